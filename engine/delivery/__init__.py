"""Delivery: what happens to one message of one item — the dispatcher's claims, the workers'
attempts, what follows each attempt, and the middleware around them (events, guards; the
runtime adds tracing and metrics)."""
