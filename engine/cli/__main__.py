"""``python -m engine.cli``: the ``encore`` command."""
from engine.cli.commands import main

main()
