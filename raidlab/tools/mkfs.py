"""mkfs.ext4 and e2fsck: make a file system on a block device and check it.

Why `-E nodiscard` by default: the loop devices raidlab builds sit on FUSE files, which
cannot discard (pyfuse3 has no fallocate handler), so mkfs's discard pass would only be
refused block by block; skipping it makes mkfs deterministic and quicker.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from raidlab.errors import ToolFailedError
from raidlab.tools.base import run

# e2fsck(8) exit status bits
FSCK_OK = 0
FSCK_CORRECTED = 1
FSCK_REBOOT = 2
FSCK_UNCORRECTED = 4
FSCK_OPERATIONAL_ERROR = 8


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
