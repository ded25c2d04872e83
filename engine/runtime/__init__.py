"""The runtime: the daemon that runs a production, its cluster leases, scheduler, metrics and
alerts."""
