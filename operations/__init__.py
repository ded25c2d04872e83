"""Ready-made business operations."""
