"""``encore run``: the production's daemon, in the foreground of this process."""
from __future__ import annotations

import sys

import click

from engine.cli.context import Context, pass_ctx

# Workers spend their time in socket calls; when one returns it waits for the GIL for up to
# the switch interval while another thread computes (the "convoy" effect): 5 ms by default,
# longer than a fast service takes to answer. The daemon's own process shortens it; a
# program that embeds a Daemon keeps its own (docs/operating.md, "Running as a service").
GIL_SWITCH_INTERVAL = 0.0005  # seconds a thread may hold the GIL while others wait


@click.command()
@pass_ctx
def run(ctx: Context) -> None:
    """Run the production in the foreground (SIGTERM/SIGINT: graceful stop)."""
    from engine.runtime.daemon import Daemon

    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    Daemon(ctx.production, store=ctx.store).run()
