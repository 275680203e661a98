"""`raidlab disk serve` and `raidlab lab list|cleanup`: parsing and printing only.

The actions live in raidlab.export.serve and raidlab.lab. Status lines go to stderr (rich),
the result (the table of loop devices, or with --json one JSON object) to stdout, so
`raidlab disk serve --json ... | jq` works.
"""

from __future__ import annotations

import json
import os
import sys

import click
from rich.console import Console
from rich.table import Table

from raidlab.errors import RaidlabError, leaf_exceptions
from raidlab.units import parse_size

_out = Console(highlight=False)
_err = Console(stderr=True, highlight=False)


def _status(message: str) -> None:
    _err.print(f"[dim]raidlab:[/dim] {message}", soft_wrap=True)


def run_trio(async_fn, *args):
    """trio.run, with a lone RaidlabError unwrapped from trio's exception groups so the
    CLI prints it as one line."""
    import trio

    try:
        return trio.run(async_fn, *args)
    except BaseExceptionGroup as group:
        leaves = leaf_exceptions(group)
        if len(leaves) == 1 and isinstance(leaves[0], (RaidlabError, KeyboardInterrupt)):
            raise leaves[0] from None
        raise


def _print_ready(disks, session, as_json: bool) -> None:
    if as_json:
        obj = {"lab": session.lab.name, "lab_dir": str(session.lab.path),
               "mount": str(session.lab.mountpoint),
               "disks": [d.as_json() for d in disks]}
        print(json.dumps(obj), flush=True)
        return
    mount = session.lab.mountpoint
    table = Table(title=f"lab {session.lab.name}: {len(disks)} emulated disks, "
                        f"files in {mount}")
    for col in ("disk", "loop device", "model", "size", "direct I/O", "file"):
        table.add_column(col)
    for d in disks:
        table.add_row(d.name, d.device, d.model, f"{d.size / 2**20:.0f} MiB",
                      "on" if d.direct_io else "OFF", os.path.relpath(d.file, mount))
    _out.print(table)
    sys.stdout.flush()


@click.command("serve", context_settings={"allow_interspersed_args": False})
@click.option("--disks", "n_disks", type=int, required=True, help="Number of emulated disks.")
@click.option("--disk-model", "model", required=True,
              help="Catalog model (raidlab disk models), or one per disk: m0,m1,...")
@click.option("--disk-size", "size", required=True, help="Size of each disk, e.g. 256M, 1G.")
@click.option("--name", default="serve", show_default=True, help="Lab name (its directory).")
@click.option("--discipline", default="fifo", show_default=True,
              help="Queue discipline of each disk: fifo, sstf, scan.")
@click.option("--keep-images", is_flag=True, help="Keep the disk images after teardown.")
@click.option("--json", "as_json", is_flag=True, help="Print the devices as one JSON object.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def serve(n_disks, model, size, name, discipline, keep_images, as_json, command):
    """Serve N emulated disks as loop devices.

    Runs COMMAND (after `--`) with RAIDLAB_DISKS="/dev/loopX ..." and RAIDLAB_DISK0.. set,
    then releases everything and exits with its status; without COMMAND, serves until
    Ctrl-C or SIGTERM. Example:

      raidlab disk serve --disks 3 --disk-model none --disk-size 256M -- sh -c 'lsblk $RAIDLAB_DISKS'
    """
    from raidlab.export.serve import ServeRequest, serve_disks

    req = ServeRequest(disks=n_disks, model=model, size=parse_size(size, "--disk-size"), name=name,
                       discipline=discipline, command=list(command) or None,
                       keep_images=keep_images)

    async def main():
        return await serve_disks(
            req, status=_status,
            on_ready=lambda disks, session: _print_ready(disks, session, as_json))

    return run_trio(main)


@click.group("lab")
def lab_group():
    """Labs: the run directories that hold a FUSE mount, loop devices and processes."""


@lab_group.command("list")
@click.option("--json", "as_json", is_flag=True)
def lab_list(as_json):
    """Labs under $RAIDLAB_HOME (default ~/.local/state/raidlab): running, stale (left by a killed run), idle."""
    from raidlab.lab import labs_dir, list_labs

    labs = list_labs()
    if as_json:
        print(json.dumps(labs))
        return 0
    if not labs:
        _out.print(f"no labs in {labs_dir()}")
        return 0
    table = Table(title=f"labs in {labs_dir()}")
    for col in ("name", "status", "pid", "resources"):
        table.add_column(col)
    for lab in labs:
        table.add_row(lab["name"], lab["status"], str(lab["pid"] or ""),
                      "\n".join(lab["resources"]) or "-")
    _out.print(table)
    return 0


@lab_group.command("cleanup")
@click.argument("name")
def lab_cleanup(name):
    """Release what a killed run of lab NAME left: processes, mounts, loop devices, its
    FUSE mount, scratch images, a cluster's links and network namespaces. Refused while the
    lab is running. The scratch array of a killed `raidlab run` is destroyed, member images
    and all (its run would have)."""
    from raidlab.errors import LabError, NeedsRootError
    from raidlab.lab import Lab, cleanup_lab
    from raidlab.runners.live import remove_abandoned_scratch

    if os.geteuid() != 0:
        raise NeedsRootError("raidlab lab cleanup")
    removed = remove_abandoned_scratch(Lab(name))
    if removed:
        _out.print(removed)
        return 0
    report = cleanup_lab(name)
    if report.nothing_to_do:
        _out.print(f"lab {name}: nothing to release")
        return 0
    for line in report.released:
        _out.print(f"released {line}")
    if report.failed:
        raise LabError(f"lab {name}: could not release: " + "; ".join(report.failed))
    return 0


def _fallback_disk_group() -> click.Group:
    @click.group("disk")
    def disk():
        """Emulated member disks."""

    return disk


def register(cli: click.Group) -> None:
    # `disk` is defined in raidlab.cli.disk (registered before this module); if that module
    # is absent, serve still gets a home.
    disk = cli.commands.get("disk")
    if disk is None:
        disk = _fallback_disk_group()
        cli.add_command(disk)
    disk.add_command(serve)
    cli.add_command(lab_group)
