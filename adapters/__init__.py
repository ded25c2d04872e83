"""Outbound (and inbound) adapters: the transport edge of a business host."""
