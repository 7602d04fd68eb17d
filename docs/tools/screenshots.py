"""Screenshots of a real study for the manual: the MLflow UI and `autotune report`'s page.

    .venv/bin/python docs/tools/screenshots.py STORE     # a store folder a study ran in

docs/tools/examples.py calls it on the study it has just run. It serves the store with
`autotune ui` on a free port, opens the study's runs page (the URL `autotune ui` prints) in
headless Chromium (Debian's `chromium`: `apt-get install chromium`), writes `autotune report`'s
page and opens that too, and saves both as PNG files under docs/img/. Without Chromium it says so
and leaves the old pictures.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMG = ROOT / "docs" / "img"
AUTOTUNE = [sys.executable, "-m", "autotune"]


def browser() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def photograph(chrome: str, url: str, out: Path, size: str, wait_ms: int) -> None:
    """One page as a PNG; `wait_ms` of virtual time lets a JavaScript page (MLflow's) render."""
    argv = [
        chrome,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--window-size={size}",
        f"--virtual-time-budget={wait_ms}",
        f"--screenshot={out}",
        url,
    ]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=180)
    print("wrote", out.relative_to(ROOT))


def _wait_http(url: str, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {seconds:.0f} s")


def shoot(store: Path) -> list[Path]:
    chrome = browser()
    if chrome is None:
        print("screenshots: no chromium here (apt-get install chromium); docs/img/ left as it was")
        return []
    IMG.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
    report = store / "reports" / "example.html"
    subprocess.run(AUTOTUNE + ["report", "--store", str(store), "-o", str(report)], cwd=ROOT, env=env, check=True)
    made = [IMG / "report.png", IMG / "mlflow-ui.png"]
    photograph(chrome, report.as_uri(), made[0], "1400,1800", 3000)
    port = free_port()
    # Its own session, so that the whole server (MLflow starts workers) is stopped by its group.
    ui = subprocess.Popen(
        AUTOTUNE + ["ui", "--store", str(store), "--port", str(port)],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert ui.stderr is not None
        page = None
        for line in ui.stderr:  # `autotune ui` prints its URLs, then becomes the server
            found = re.search(rf"http://127\.0\.0\.1:{port}/#\S+", line)
            if found:
                page = found.group(0)
                break
        if page is None:
            raise RuntimeError("autotune ui printed no runs page")
        _wait_http(f"http://127.0.0.1:{port}/health", 120)
        photograph(chrome, page, made[1], "1680,900", 20000)
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        ui.wait(timeout=30)
    return made


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    shoot(Path(sys.argv[1]).resolve())
