"""The tuner's side: the study and its scheduler, planner and queue, watching a trial, recording and judging it, the standing, confirmation and the winner, the space as of now, the tuners of a study, the profile runs, the report.

May import: ``autotune.core``, ``autotune.stores``, ``autotune.machine``, ``autotune.training``, ``autotune.worker``, ``autotune.production`` (checked by tests/unit/test_layers.py).
"""
