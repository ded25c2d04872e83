"""What the portal and the inbound services both serve with; it imports neither, nor the
runtime (docs/architecture.md)."""
