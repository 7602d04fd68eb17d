"""The trial's side of a trial, in its worker process: the Trial behind the Run handle, its windows, marks and phases (warmup, ceilings, profile), the script trial, the warm worker trials are forked from, and the fingerprints that tell the same training.

May import: ``autotune.core``, ``autotune.machine``, ``autotune.training`` (checked by tests/unit/test_layers.py).
"""
