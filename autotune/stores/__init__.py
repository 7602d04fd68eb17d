"""The stores: Optuna's storage and the spool of pending results, MLflow's tracking store and its schema, the trial records read back from them. The one place that reads and writes them.

May import: ``autotune.core`` (checked by tests/unit/test_layers.py).
"""
