"""``python -m autotune`` is the ``autotune`` command."""

from autotune._cli import main

main()
