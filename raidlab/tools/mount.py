"""mount(8) / umount(8), and reading the kernel's mount table.

Why mountinfo and not /proc/mounts: mountinfo carries the device number (major:minor) of
each mount, which is how a FUSE mount is matched to its connection in
/sys/fs/fuse/connections, and it is what the lab's stale cleanup scans to find leftover
mounts under a lab directory or on a lab's loop devices.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from raidlab.tools.base import run


@dataclass(frozen=True)
class MountEntry:
    mount_id: int
    major: int
    minor: int
    mount_point: str
    fstype: str
    source: str
    options: str


def _unescape(field: str) -> str:
    """Undo the kernel's octal escapes (\\040 space, \\011 tab, \\012 newline, \\134 \\)."""
    out, i = [], 0
    while i < len(field):
        digits = field[i + 1:i + 4]
        if field[i] == "\\" and len(digits) == 3 and all(c in "01234567" for c in digits):
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Parse /proc/<pid>/mountinfo (proc(5)): one MountEntry per line, in kernel order."""
    entries = []
    for line in text.splitlines():
        if not line.strip():
            continue
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split()
        mount_id = int(fields[0])
        major, minor = (int(x) for x in fields[2].split(":"))
        mount_point = _unescape(fields[4])
        right_fields = right.split()
        fstype = right_fields[0]
        source = _unescape(right_fields[1]) if len(right_fields) > 1 else ""
        options = right_fields[2] if len(right_fields) > 2 else ""
        entries.append(MountEntry(mount_id, major, minor, mount_point, fstype, source, options))
    return entries


def current_mounts() -> list[MountEntry]:
    return parse_mountinfo(Path("/proc/self/mountinfo").read_text())


def mounts_under(directory: str | os.PathLike, entries: list[MountEntry] | None = None
                 ) -> list[MountEntry]:
    """Mounts at or below `directory`, deepest first (the order to unmount them)."""
    base = os.path.abspath(directory)
    entries = current_mounts() if entries is None else entries
    found = [e for e in entries
             if e.mount_point == base or e.mount_point.startswith(base.rstrip("/") + "/")]
    return sorted(found, key=lambda e: (-e.mount_point.count("/"), -e.mount_id))


def mounts_of_source(source: str, entries: list[MountEntry] | None = None) -> list[MountEntry]:
    """Mounts whose source is `source` (e.g. a loop device), newest first."""
    entries = current_mounts() if entries is None else entries
    return sorted((e for e in entries if e.source == source), key=lambda e: -e.mount_id)


def is_mount_point(path: str | os.PathLike) -> bool:
    wanted = os.path.abspath(path)
    return any(e.mount_point == wanted for e in current_mounts())


def mount(source: str | os.PathLike, target: str | os.PathLike, *, fstype: str | None = None,
          options: list[str] | tuple[str, ...] = (), timeout: float = 60) -> None:
    argv = ["mount"]
    if fstype:
        argv += ["-t", fstype]
    if options:
        argv += ["-o", ",".join(options)]
    argv += [str(source), str(target)]
    run(argv, timeout=timeout)


def umount(target: str | os.PathLike, *, lazy: bool = False, timeout: float = 60) -> None:
    argv = ["umount"]
    if lazy:
        argv.append("--lazy")
    argv.append(str(target))
    run(argv, timeout=timeout)
