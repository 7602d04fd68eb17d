"""The shipped search spaces, installed as package data ``autotune.spaces`` (``--space NAME``)."""
