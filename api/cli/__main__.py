"""``python -m api.cli``: the ``autosched`` command line."""

from api.cli import main

main()
