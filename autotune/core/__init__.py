"""The shared vocabulary: the knobs, a config, a trial's kinds, outcomes and events, the rules a figure is judged by (divergence, ceilings' keys, bounds), what a loader reads. Every other part imports it; it imports nothing of autotune outside itself.

May import: nothing of autotune (checked by tests/unit/test_layers.py).
"""
