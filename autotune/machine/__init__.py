"""The machine: probing it (CUDA, bf16, fused kernels, compile), process trees, the monitors of RAM, CPU and GPU, the slots and their CPUs, launching a worker and reaping what it leaves, the noise a neighbour makes.

May import: ``autotune.core`` (checked by tests/unit/test_layers.py).
"""
