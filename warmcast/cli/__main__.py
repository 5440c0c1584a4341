"""``python -m warmcast.cli``: the same program as the ``warmcast`` command."""
from warmcast.cli import main

main()
