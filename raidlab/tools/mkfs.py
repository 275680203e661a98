"""mkfs.ext4 and e2fsck: make a file system on a block device and check it.

Why `-E nodiscard` by default: the loop devices raidlab builds sit on FUSE files, which
cannot discard (pyfuse3 has no fallocate handler), so mkfs's discard pass would only be
refused block by block; skipping it makes mkfs deterministic and quicker.

Why a benchmark's ext4 is made with `lazy_itable_init=0,lazy_journal_init=0` (mkfs_argv):
by default mkfs.ext4 leaves zeroing the inode tables to a kernel thread (ext4lazyinit) that
starts at the first mount and writes in the background for as long as that takes, and the
journal's zeroing too; those writes would land in the measured workload. With both off mkfs
writes them itself, before the array is settled. ext2 has no lazy initialisation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from raidlab.errors import ToolFailedError, UsageError
from raidlab.tools.base import run

# e2fsck(8) exit status bits
FSCK_OK = 0
FSCK_CORRECTED = 1
FSCK_REBOOT = 2
FSCK_UNCORRECTED = 4
FSCK_OPERATIONAL_ERROR = 8


def extended_options(fstype: str, extra: list[str] | tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """The one `-E` value of a benchmark's mkfs.FSTYPE and the rest of `extra` (pure).

    Ours: nodiscard, and for ext4 no lazy initialisation (module doc). The `-E` values in
    `extra` ("-E", "a,b" or "-Ea,b") are merged into it, one option per key, theirs winning
    over ours for the same key (discard and nodiscard are one key), so mkfs gets a single
    -E instead of two, the second of which would silently replace the first."""
    ours = ["nodiscard"] + (["lazy_itable_init=0", "lazy_journal_init=0"] if fstype == "ext4" else [])
    theirs: list[str] = []
    rest: list[str] = []
    args = iter(extra)
    for arg in args:
        if arg == "-E":
            value = next(args, None)
            if value is None:
                raise UsageError("mkfs option -E has no value", hint='give it as "-E", "OPTION[,OPTION...]"')
            theirs += [v for v in value.split(",") if v]
        elif arg.startswith("-E"):
            theirs += [v for v in arg[2:].split(",") if v]
        else:
            rest.append(arg)

    def key(option: str) -> str:
        name = option.split("=", 1)[0]
        return "discard" if name in ("discard", "nodiscard") else name

    taken = {key(option) for option in theirs}
    merged = [option for option in ours if key(option) not in taken] + theirs
    return ",".join(merged), rest


def mkfs_argv(fstype: str, device: str, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The mkfs command line of a benchmark's file system (pure): `mkfs.FSTYPE -F -q -E ...
    EXTRA DEVICE`, with the extended options of `extended_options`."""
    options, rest = extended_options(fstype, extra)
    return [f"mkfs.{fstype}", "-F", "-q", "-E", options, *rest, str(device)]


def mkfs_ext4(device: str | os.PathLike, *, label: str | None = None, discard: bool = False,
              extra: list[str] | tuple[str, ...] = (), timeout: float = 300) -> None:
    argv = ["mkfs.ext4", "-F", "-q"]
    if not discard:
        argv += ["-E", "nodiscard"]
    if label:
        argv += ["-L", label]
    argv += list(extra)
    argv.append(str(device))
    run(argv, timeout=timeout)


@dataclass(frozen=True)
class FsckResult:
    returncode: int
    output: str

    @property
    def clean(self) -> bool:
        """e2fsck found nothing to correct."""
        return self.returncode == FSCK_OK


def e2fsck(device: str | os.PathLike, *, fix: bool = False, timeout: float = 600) -> FsckResult:
    """Force a full check (-f). Read-only (-n) unless fix=True (then -p, preen).

    Returns the result for exit codes 0-4 (file system state); raises ToolFailedError for an
    operational error (8 and above: device missing, in use, ...).
    """
    argv = ["e2fsck", "-f", "-p" if fix else "-n", str(device)]
    proc = run(argv, check=False, timeout=timeout)
    if proc.returncode >= FSCK_OPERATIONAL_ERROR:
        raise ToolFailedError(argv, proc.returncode, proc.stderr or proc.stdout)
    return FsckResult(proc.returncode, proc.stdout + proc.stderr)
