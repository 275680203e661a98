"""An array as the service records it: the spec `raidlab create` saves in the lab, the file
names of the lab directory, and where the array daemon's control socket is.

Kept apart from the daemon so that the CLI and the runners can name an array and reach its
daemon without importing what only the daemon process needs (the hosts, FUSE, capture).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from raidlab.errors import UsageError
from raidlab.lab import saved

SPEC_FILE = "array.json"
RUNTIME_FILE = "runtime.json"

# How `raidlab assemble` tells the daemon what its flags asked (the daemon is a program of its
# own; its environment carries them): --no-resync leaves the stripes of an array that was not
# stopped cleanly as they are, for `check` to find (md's sync_action "frozen"); --force starts
# a parity array that is dirty and degraded, which is refused otherwise (its parity may not
# match its data: the write hole), as `mdadm --assemble --force` does.
NO_RESYNC_ENV = "RAIDLAB_NO_RESYNC"
FORCE_ENV = "RAIDLAB_FORCE"


@dataclasses.dataclass
class ArraySpec:
    """What `raidlab create` asked for; kept in the lab directory for `assemble`."""

    name: str
    arch: str
    disks: int
    disk_model: str  # one catalog model for every member, or "m0,m1,...": one per member
    disk_size: int
    chunk: int
    discipline: str = "fifo"
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    runner: str = "native"  # native | vm (the lab VM runner, raidlab.vm)
    partitions: str | None = None  # members are partitions of whole drives ("b8-c1-d1-e1"; raidlab.disks.partitions)
    bus: str | None = None  # one bus every drive shares (raidlab.disks.bus.parse_bus)
    write_cache: str = "model"  # every drive's write cache: model (its default) | on | off
    flushes: str = "honoured"  # the host's flushes and FUA at every drive: honoured | dropped (disks.disk)
    span: str | None = None  # every drive's bytes over its whole stroke (full) or at its start; None: full
    # Over a cluster's disks (raidlab.cluster): the cluster, the node the array runs on, and
    # each member's disk and how that node reaches it (raidlab.cluster.members; the daemon
    # attaches them with raidlab.service.hosts.nodes). None: members are the lab's own images.
    cluster: str | None = None
    node: int | None = None
    members: list[dict[str, Any]] | None = None
    # Over a cluster: this lab is another instance of array `joins` (created elsewhere on the
    # cluster), on its own node, that never writes the array's metadata (raidlab create
    # --join; raidlab.engine.build.assemble_array join=True).
    joins: str | None = None
    # Power-loss emulation (raidlab.disks.volatile): the drives log what their write caches
    # hold, so a power cut can be applied to the images after the daemon dies.
    power_loss: bool = False

    def save(self, lab_path: Path) -> None:
        saved.save(self, lab_path / SPEC_FILE)

    @classmethod
    def load(cls, lab_path: Path) -> "ArraySpec":
        return saved.load(cls, lab_path / SPEC_FILE,
                          missing=UsageError(f"no array in {lab_path}", hint="create one with `raidlab create`"),
                          damaged_hint="the array's member images are untouched; restore the file, or destroy the array")


CONTROL_SOCKET = "control.sock"  # the daemon's control socket, a file of the lab directory


def control_socket(lab_path: Path) -> Path:
    """Where the lab's daemon listens: a socket file (0600) in the lab directory (0700), so
    only the lab's owner and root can reach it; the daemon also checks every peer's
    credentials (raidlab.service.daemonbase) and the client checks the daemon's
    (raidlab.service.control)."""
    return Path(lab_path) / CONTROL_SOCKET


@contextlib.contextmanager
def socket_address(lab_path: Path) -> Iterator[str]:
    """A name of the lab's control socket short enough for sockaddr_un (108 bytes), however
    deep the lab directory is: the socket seen through a descriptor of the lab directory,
    /proc/self/fd/N/control.sock, valid while the context lasts."""
    fd = os.open(lab_path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{CONTROL_SOCKET}"
    finally:
        os.close(fd)


_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(sock: Any) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a connected Unix socket, as the
    kernel recorded them when the connection was made (SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return pid, uid, gid
