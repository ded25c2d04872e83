"""Observability below delivery: Prometheus metrics and repeat-limited logging."""
