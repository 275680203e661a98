"""The FUSE control file system (/sys/fs/fuse/connections): a mount's connection, and
aborting it.

Why the lab needs it: a FUSE mount whose server hung or died still answers nothing, and
everything stacked on it (loop devices over its files, mounts on those) waits for that
answer when it is released. Writing to the connection's `abort` file fails every waiting
and future request with ENOTCONN, so the release cannot hang. The export layer uses the
same connection directory to tune the kernel's background-request limits.

The host may not have fusectl mounted; then it is mounted privately in the lab directory
for the moment it is needed and unmounted again, so nothing is left mounted.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from raidlab.errors import RaidlabError
from raidlab.tools import mount as mount_tool

FUSECTL_DIR = Path("/sys/fs/fuse/connections")


def is_fuse_fstype(fstype: str) -> bool:
    """A FUSE file system ("fuse", "fuse.<subtype>", "fuseblk") -- not "fusectl"."""
    return fstype in ("fuse", "fuseblk") or fstype.startswith("fuse.")


def fuse_connection_id(mountpoint: str | os.PathLike, mountinfo: str | None = None) -> int | None:
    """The FUSE connection number (minor of st_dev) of a mount, from /proc/self/mountinfo.

    Read from mountinfo rather than stat(2): stat would send GETATTR to our own server
    from the thread that runs it.
    """
    text = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
    wanted = os.path.abspath(mountpoint)
    for entry in reversed(mount_tool.parse_mountinfo(text)):
        if entry.mount_point == wanted and is_fuse_fstype(entry.fstype):
            return entry.minor
    return None


@contextlib.contextmanager
def fusectl(scratch_dir: str | os.PathLike) -> Iterator[tuple[Path, str]]:
    """The fuse control file system: the host's, or mounted at `scratch_dir` for the
    duration of the block (and unmounted again, so nothing is left mounted)."""
    if any(e.fstype == "fusectl" and e.mount_point == str(FUSECTL_DIR)
           for e in mount_tool.current_mounts()):
        yield FUSECTL_DIR, str(FUSECTL_DIR)
        return
    scratch = Path(scratch_dir)
    scratch.mkdir(parents=True, exist_ok=True)
    mount_tool.mount("fusectl", scratch, fstype="fusectl")
    try:
        yield scratch, "fusectl mounted privately for the moment"
    finally:
        mount_tool.umount(scratch)


def abort_connection(mountpoint: str | os.PathLike, scratch_dir: str | os.PathLike) -> bool:
    """Abort a FUSE mount's connection: every waiting and future request fails with
    ENOTCONN, so releasing loop devices over it cannot hang on a hung or dead server.
    Returns False when there is no live connection (a dead server's is aborted already)."""
    conn = fuse_connection_id(mountpoint)
    if conn is None:
        return False
    try:
        with fusectl(scratch_dir) as (ctl, _how):
            abort = ctl / str(conn) / "abort"
            if not abort.exists():
                return False
            abort.write_text("1\n")
            return True
    except (RaidlabError, OSError):
        return False
