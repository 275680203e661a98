"""`raidlab worker ADDRESS`: this machine as a Dask worker of the scheduler at ADDRESS.

The worker declares its resources (`cores` for virtual-time runs, `live` for a live run's
one slot) and carries raidlab.scaleout.RaidlabWorker, which answers `raidlab run
--scheduler` with this checkout's code revision, host, kernel and speed probe. Each run it is
given runs in a process of its own (raidlab.onerun). Ctrl-C or SIGTERM closes it: the runs
it is running are stopped (a live one destroys its array first) and the scheduler gives
their tasks to other workers.
"""

from __future__ import annotations

import os

import click
from rich.console import Console

_err = Console(stderr=True, highlight=False, soft_wrap=True)


@click.command(name="worker")
@click.argument("scheduler", metavar="ADDRESS")
@click.option("--cores", type=click.IntRange(min=0), default=None,
              help="virtual-time runs at once (default: this machine's cores)")
@click.option("--live/--no-live", default=None,
              help="whether this machine takes live runs, one at a time (default: if it is root with the lab's "
                   "programs)")
@click.option("--host", "listen_host", metavar="HOST", default=None,
              help="the interface the worker listens on (default: the one that reaches the scheduler)")
@click.option("--name", metavar="NAME", default=None, help="the worker's name (default: its address)")
def worker_cmd(scheduler, cores, live, listen_host, name):
    """Serve the runs of `raidlab run --scheduler ADDRESS` on this machine until Ctrl-C."""
    import asyncio
    import logging
    import signal

    from distributed import Worker

    from raidlab import scaleout
    from raidlab.errors import UsageError

    if "://" not in scheduler:
        raise UsageError(f"{scheduler}: give the scheduler's address, tcp://HOST:PORT or tls://HOST:PORT")
    capable, why = scaleout.live_capable()
    if live is None:
        live = capable
    elif live and not capable:
        raise UsageError(f"--live: this machine cannot take a live run: {why}")
    cores = os.cpu_count() or 1 if cores is None else cores
    if cores == 0 and not live:
        raise UsageError("--cores 0 --no-live: the worker would take no run")
    if scheduler.startswith("tcp://"):
        _err.print("tcp:// is neither encrypted nor authenticated: whoever reaches the scheduler runs code here as "
                   "this user; on a shared network use tls:// (docs/scale-out.md)")
    logging.basicConfig(level=logging.WARNING)
    resources = {"cores": cores, "live": 1 if live else 0}

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, stop.set)
        try:
            worker = await Worker(scheduler, nthreads=max(1, cores), resources=resources, host=listen_host,
                                  name=name, plugins=(scaleout.RaidlabWorker(),), dashboard=False)
        except (OSError, TimeoutError, TypeError, ValueError, RuntimeError) as exc:  # tls:// without certificates
            why = exc.__cause__ if isinstance(exc, RuntimeError) and exc.__cause__ else exc  # "failed to start"
            raise UsageError(f"{scheduler}: cannot reach the scheduler ({why})",
                             hint="tls:// takes Dask's TLS configuration (docs/scale-out.md)") from None
        plugin = worker.plugins[scaleout.PLUGIN]
        _err.print(f"worker {worker.name} ({plugin.info['host']}, kernel {plugin.info['kernel']}) at "
                   f"{scaleout.show_revision(plugin.info['revision'])}: cores {cores}, live {resources['live']}"
                   f"{'' if live else f' ({why})' if not capable else ''}; "
                   f"speed {plugin.info['speed']['seconds']} s for {plugin.info['speed']['loops']:,} loops; "
                   f"serving {scheduler} until Ctrl-C")
        finished = asyncio.ensure_future(worker.finished())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({finished, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if stopping.done():
            _err.print("closing: stopping the runs in progress, their tasks go to other workers")
            await worker.close(timeout=scaleout.STOP_GRACE + 10)
        finished.cancel()
        stopping.cancel()

    import dask

    with dask.config.set(scaleout.QUIET_CONFIG):
        asyncio.run(serve())
    return 0


def register(cli: click.Group) -> None:
    cli.add_command(worker_cmd)
