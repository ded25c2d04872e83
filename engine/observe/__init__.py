"""Observability below delivery: the Prometheus metrics (:mod:`engine.observe.metrics`) and
the repeat-limited logging of failures (:mod:`engine.observe.logs`). It imports only the
kernel, so that delivery, the runtime and the servers all report through it."""
