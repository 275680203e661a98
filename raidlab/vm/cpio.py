"""Write a "newc" cpio archive, the format the Linux kernel unpacks as an initramfs.

Why not the cpio program: the archive needs entries an ordinary user cannot create on disk
(the /dev/console character device the kernel opens for init's stdin/stdout, files owned by
root), and a build cache needs byte-identical output for identical inputs (fixed owners,
fixed mtimes, sorted entries). Both are easy when the archive is written directly; the format
is the kernel's Documentation/driver-api/early-userspace/buffer-format.rst.
"""

from __future__ import annotations

import dataclasses
import stat
from collections.abc import Iterable
from typing import BinaryIO

NEWC_MAGIC = b"070701"
TRAILER = "TRAILER!!!"


@dataclasses.dataclass(frozen=True)
class CpioEntry:
    """One archive member. `path` is relative to the archive root, without a leading '/'.

    Exactly one of: a directory (kind 'dir'), a regular file with `data` or `source` (a host
    path read at write time), a symlink with `target`, or a character device (`rdev`).
    """

    path: str
    kind: str                       # dir | file | symlink | chardev
    mode: int = 0o755               # permission bits only
    data: bytes | None = None
    source: str | None = None
    target: str | None = None
    rdev: tuple[int, int] = (0, 0)


def _type_bits(kind: str) -> int:
    return {"dir": stat.S_IFDIR, "file": stat.S_IFREG, "symlink": stat.S_IFLNK,
            "chardev": stat.S_IFCHR}[kind]


def _pad4(n: int) -> bytes:
    return b"\0" * (-n % 4)


def _header(ino: int, mode: int, nlink: int, filesize: int, rdev: tuple[int, int], namesize: int) -> bytes:
    fields = (ino, mode, 0, 0, nlink, 0, filesize, 0, 0, rdev[0], rdev[1], namesize, 0)
    return NEWC_MAGIC + b"".join(b"%08X" % f for f in fields)


def with_parents(entries: Iterable[CpioEntry]) -> list[CpioEntry]:
    """Add missing parent directories and sort so that every parent precedes its children."""
    by_path: dict[str, CpioEntry] = {}
    for entry in entries:
        path = entry.path.strip("/")
        if not path:
            raise ValueError("empty path in cpio entry")
        by_path[path] = dataclasses.replace(entry, path=path)
    for path in list(by_path):
        parts = path.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent not in by_path:
                by_path[parent] = CpioEntry(parent, "dir")
            elif by_path[parent].kind != "dir":
                raise ValueError(f"{parent} is both a {by_path[parent].kind} and a directory")
    return [by_path[p] for p in sorted(by_path, key=lambda p: p.split("/"))]


def write_newc(entries: Iterable[CpioEntry], out: BinaryIO) -> int:
    """Write the archive (parents added, sorted, owner root, mtime 0). Returns bytes written."""
    written = 0
    for ino, entry in enumerate(with_parents(entries), start=1):
        if entry.kind == "file":
            if entry.data is not None:
                payload = entry.data
            elif entry.source is not None:
                with open(entry.source, "rb") as f:
                    payload = f.read()
            else:
                raise ValueError(f"file entry {entry.path} has neither data nor source")
        elif entry.kind == "symlink":
            if not entry.target:
                raise ValueError(f"symlink entry {entry.path} has no target")
            payload = entry.target.encode()
        else:
            payload = b""
        name = entry.path.encode() + b"\0"
        nlink = 2 if entry.kind == "dir" else 1
        mode = _type_bits(entry.kind) | (entry.mode & 0o7777)
        head = _header(ino, mode, nlink, len(payload), entry.rdev, len(name))
        chunk = head + name + _pad4(len(head) + len(name)) + payload + _pad4(len(payload))
        out.write(chunk)
        written += len(chunk)
    name = TRAILER.encode() + b"\0"
    head = _header(0, 0, 1, 0, (0, 0), len(name))
    chunk = head + name + _pad4(len(head) + len(name))
    out.write(chunk)
    written += len(chunk)
    return written
