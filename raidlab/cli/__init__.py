"""The `raidlab` command.

Parsing lives here and in the sibling modules (one per command group); actions live in the
library modules they call. Every RaidlabError becomes one line on stderr and exit code 2.
The command modules import those library modules inside the command functions, because
importing them all at start-up loads matplotlib and numpy (reports, trace statistics),
pyfuse3 (the FUSE export) and trio.testing with pytest (the disk bench, the replay) into
every invocation and makes `raidlab --help` several times slower.
"""

from __future__ import annotations

import importlib
import signal
import sys

import click
from rich.console import Console

from raidlab import __version__
from raidlab.errors import RaidlabError
from raidlab.signals import stop_signal, terminate_as_interrupt

err_console = Console(stderr=True, highlight=False)

# Command modules: each defines `register(main)`. Listed here so that a module can be added
# without touching the others.
_COMMAND_MODULES = [
    "raidlab.cli.doctor",
    "raidlab.cli.disk",
    "raidlab.cli.export",
    "raidlab.cli.vm",
    "raidlab.cli.demo",
    "raidlab.cli.archs",
    "raidlab.cli.array",
    "raidlab.cli.trace",
    "raidlab.cli.bench",
    "raidlab.cli.cache",
    "raidlab.cli.tss",
    "raidlab.cli.crashtest",
    "raidlab.cli.faulttest",
    "raidlab.cli.damagetest",
    "raidlab.cli.reliability",
    "raidlab.cli.run",
    "raidlab.cli.worker",
    "raidlab.cli.sweep",
    "raidlab.cli.report",
    "raidlab.cli.claims",
    "raidlab.cli.reproduce",
    "raidlab.cli.explain",
    "raidlab.cli.top",
    "raidlab.cli.cluster",
]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="raidlab")
def cli() -> None:
    """raidlab: classic software-RAID research systems over loop devices."""


for _name in _COMMAND_MODULES:  # a command module that fails to import is an error, not a gap
    importlib.import_module(_name).register(cli)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry: run the CLI, turning user errors into one line + exit 2.

    SIGTERM and SIGHUP stop a command as Ctrl-C does (raidlab.signals): it releases what it
    started and exits with 128 + the signal's number."""
    try:
        with terminate_as_interrupt():
            rv = cli.main(args=argv, standalone_mode=False)
    except RaidlabError as exc:
        err_console.print(f"raidlab: error: {exc}", markup=False, soft_wrap=True)
        return exc.exit_code
    except click.exceptions.Abort as exc:
        return _interrupted(exc.__cause__)
    except click.ClickException as exc:
        exc.show()
        return 2
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    return rv if isinstance(rv, int) else 0


def _interrupted(exc: BaseException | None) -> int:
    signum = stop_signal(exc)
    if signum == signal.SIGINT:
        err_console.print("raidlab: interrupted", markup=False)
    else:
        err_console.print(f"raidlab: interrupted by {signal.Signals(signum).name}", markup=False)
    return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
