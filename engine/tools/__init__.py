"""Ready-made tools built on the engine: ``encore demo`` and ``encore simulate``."""
