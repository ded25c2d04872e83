"""The runtime: the daemon that runs a production, its cluster leases, scheduler, reloads,
console and alerts."""
