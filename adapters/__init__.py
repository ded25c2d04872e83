"""Outbound (and inbound) adapters: the transport edge of a business host."""
# engine.host imports adapters.base, and adapters import engine modules: loading the engine
# first keeps that cycle in one order whichever package a program imports first.
import engine  # noqa: F401,E402
