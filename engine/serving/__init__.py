"""What the portal and the inbound services both serve with (docs/architecture.md): the
connection-limited server and its limits, the hop to a thread, batched intake, callers'
authentication, accepting a message and waiting for its end, and a gone client's answer.

It imports neither the portal, the inbound services nor the runtime, so that either edge can
change without the other."""
