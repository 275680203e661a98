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

# Command modules: each defines `register(group)`, which adds its commands to the group.
# Listed in registration order, each with the top-level commands it adds or extends (a
# module may extend a group another defined: raidlab.cli.export adds `disk serve`). A
# command's modules are imported when it is invoked, all of them for `raidlab --help`:
# importing every module on start-up was half of each invocation's processor time
# (`raidlab list` 0.34 s with it, 0.14 s without; results/bench/suite).
# tests/unit/test_cli_lazy.py checks the table against what the modules register.
_COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "raidlab.cli.doctor": ("doctor",),
    "raidlab.cli.disk": ("disk",),
    "raidlab.cli.export": ("disk", "lab"),
    "raidlab.cli.vm": ("vm",),
    "raidlab.cli.demo": ("demo",),
    "raidlab.cli.archs": ("archs",),
    "raidlab.cli.array": ("create", "assemble", "list", "status", "destroy", "fail", "power-cut",
                          "replace", "check"),
    "raidlab.cli.trace": ("trace", "sim"),
    "raidlab.cli.bench": ("bench",),
    "raidlab.cli.cache": ("bypass",),
    "raidlab.cli.tss": ("tss",),
    "raidlab.cli.crashtest": ("crashtest",),
    "raidlab.cli.faulttest": ("faulttest",),
    "raidlab.cli.damagetest": ("damagetest",),
    "raidlab.cli.reliability": ("reliability",),
    "raidlab.cli.run": ("run",),
    "raidlab.cli.worker": ("worker",),
    "raidlab.cli.sweep": ("sweep",),
    "raidlab.cli.report": ("report",),
    "raidlab.cli.claims": ("claims",),
    "raidlab.cli.reproduce": ("reproduce",),
    "raidlab.cli.explain": ("explain",),
    "raidlab.cli.top": ("top",),
    "raidlab.cli.cluster": ("cluster",),
}


class LazyGroup(click.Group):
    """The top-level group: a command's modules are imported when it is looked up.

    A command's modules are those that list it, and with them every module that shares one
    of their commands; they register in the table's order, so a module that extends another's
    group finds it. Listing the commands (`--help`) loads every module."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._loaded: set[str] = set()

    def _load(self, modules) -> None:
        for name in _COMMAND_MODULES:  # the table's order
            if name in modules and name not in self._loaded:
                self._loaded.add(name)
                importlib.import_module(name).register(self)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        wanted = {m for m, names in _COMMAND_MODULES.items() if cmd_name in names}
        while True:  # and the modules whose groups these extend, or that extend them
            names = {n for m in wanted for n in _COMMAND_MODULES[m]}
            more = {m for m, ns in _COMMAND_MODULES.items() if names & set(ns)} - wanted
            if not more:
                break
            wanted |= more
        self._load(wanted)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self.load_all()
        return super().list_commands(ctx)

    def load_all(self) -> None:
        """Every command module (a module that fails to import is an error, not a gap)."""
        self._load(set(_COMMAND_MODULES))


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="raidlab")
def cli() -> None:
    """raidlab: classic software-RAID research systems over loop devices."""


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
