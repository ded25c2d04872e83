"""The ``encore`` command line."""
from engine.cli.commands import main

__all__ = ["main"]
