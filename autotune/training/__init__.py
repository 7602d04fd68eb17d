"""What runs in the user's training process, tuned or in production: the Run handle, the prefetchers, the hooks that apply a config to an unmodified script (its loaders, optimizers and loop: autocast, prefetch, the model's knobs), the frameworks and the ranks of a DDP job.

May import: ``autotune.core``, ``autotune.machine`` (checked by tests/unit/test_layers.py).
"""
