"""Outbound adapters: the transport edge of a business operation (HTTP, SOAP)."""
