"""The importer's error: a source it cannot read, or a production it cannot choose."""
from __future__ import annotations

from engine.errors import ConfigurationError


class SourceError(ConfigurationError):
    """An Ensemble source is unreadable, hostile or ambiguous; the text says which file and
    what is wrong."""
