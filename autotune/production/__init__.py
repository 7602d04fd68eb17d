"""Production: the export, loading it into a Recipe, autotune exec for a script, the adaptive loaders and their log.

May import: ``autotune.core``, ``autotune.stores``, ``autotune.machine``, ``autotune.training`` (checked by tests/unit/test_layers.py).
"""
