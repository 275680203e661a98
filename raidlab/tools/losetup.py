"""losetup(8): attach a file as a loop device, detach it (and wait until the kernel released
it), list loop devices.

Why `--direct-io=on` by default: the files raidlab attaches live on its own FUSE mount;
without direct I/O the loop driver would cache every block twice (loop's page cache and the
FUSE file's) and writes would reach the emulated disk only at writeback time, which breaks
both the timing and the durability the disk model promises. `attach` verifies in sysfs that
the kernel really enabled direct I/O and reports it in LoopDevice.direct_io.

Blocking: call from a worker thread (trio.to_thread) when the backing file is served by the
calling process's FUSE loop -- losetup opens the file and would otherwise wait for us.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from raidlab.errors import ToolFailedError
from raidlab.tools.base import run


@dataclass(frozen=True)
class LoopDevice:
    device: str          # /dev/loopN
    backing_file: str    # as the kernel reports it ("" when unknown)
    direct_io: bool
    read_only: bool = False
    autoclear: bool = False
    size_limit: int = 0
    offset: int = 0
    sector_size: int = 512


def _flag(value) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip() in ("1", "true", "yes")


def parse_list_json(text: str) -> list[LoopDevice]:
    """Parse `losetup --list --json --output NAME,BACK-FILE,DIO,RO,AUTOCLEAR,...`."""
    text = text.strip()
    if not text:
        return []  # losetup prints nothing when no loop device is in use
    data = json.loads(text)
    out = []
    for row in data.get("loopdevices", []):
        back = row.get("back-file") or ""
        out.append(LoopDevice(
            device=row["name"],
            backing_file=back,
            direct_io=_flag(row.get("dio", False)),
            read_only=_flag(row.get("ro", False)),
            autoclear=_flag(row.get("autoclear", False)),
            size_limit=int(row.get("sizelimit") or 0),
            offset=int(row.get("offset") or 0),
            sector_size=int(row.get("log-sec") or 512),
        ))
    return out


LIST_COLUMNS = "NAME,BACK-FILE,DIO,RO,AUTOCLEAR,SIZELIMIT,OFFSET,LOG-SEC"


def list_devices() -> list[LoopDevice]:
    """Every configured loop device on the host."""
    proc = run(["losetup", "--list", "--json", "--output", LIST_COLUMNS], timeout=30)
    return parse_list_json(proc.stdout)


def strip_deleted(backing_file: str) -> str:
    """The kernel appends ' (deleted)' to a backing file that was unlinked."""
    suffix = " (deleted)"
    return backing_file[: -len(suffix)] if backing_file.endswith(suffix) else backing_file


def devices_backed_under(directory: str | os.PathLike,
                         devices: list[LoopDevice] | None = None) -> list[LoopDevice]:
    """Loop devices whose backing file lies under `directory`."""
    base = os.path.abspath(directory).rstrip("/") + "/"
    devices = list_devices() if devices is None else devices
    return [d for d in devices if strip_deleted(d.backing_file).startswith(base)]


def sysfs_state(device: str) -> dict[str, str]:
    """The kernel's view of a loop device (/sys/block/loopN/loop/*), empty if unconfigured."""
    name = os.path.basename(device)
    loop_dir = Path("/sys/block") / name / "loop"
    state: dict[str, str] = {}
    if not loop_dir.is_dir():
        return state
    for item in loop_dir.iterdir():
        try:
            state[item.name] = item.read_text().strip()
        except OSError:
            continue
    return state


def device_size(device: str) -> int:
    """Size in bytes from sysfs (512-byte sectors), 0 for an unconfigured device."""
    name = os.path.basename(device)
    try:
        return int(Path(f"/sys/block/{name}/size").read_text()) * 512
    except (OSError, ValueError):
        return 0


def attach(path: str | os.PathLike, *, direct_io: bool = True, read_only: bool = False,
           timeout: float = 60) -> LoopDevice:
    """Attach `path` to the first free loop device and return it."""
    argv = ["losetup", "--find", "--show", f"--direct-io={'on' if direct_io else 'off'}"]
    if read_only:
        argv.append("--read-only")
    argv.append(str(path))
    proc = run(argv, timeout=timeout)
    device = proc.stdout.strip().splitlines()[-1]
    state = sysfs_state(device)
    return LoopDevice(
        device=device,
        backing_file=state.get("backing_file", str(path)),
        direct_io=state.get("dio") == "1",
        read_only=read_only,
        autoclear=state.get("autoclear") == "1",
    )


def serves(device: str, backing: str | Collection[str]) -> bool:
    """Whether `device` is configured and its backing file is `backing` (or one of several
    names the kernel may give it). A loop device is known only by its number, and a number
    freed by its owner is handed to the next `losetup --find`: check before acting on one."""
    names = {backing} if isinstance(backing, str) else set(backing)
    state = sysfs_state(device)
    return bool(state) and strip_deleted(state.get("backing_file", "")) in names


def detach(device: str, *, backing: str | Collection[str] | None = None, timeout: float = 60) -> None:
    """Detach a loop device. A device still in use (mounted) is marked autoclear by the
    kernel and goes away when its last user closes it. With `backing`, a device that no
    longer serves that file (released, its number taken by someone else) is left alone."""
    if backing is not None and not serves(device, backing):
        return
    try:
        run(["losetup", "--detach", device], timeout=timeout)
    except ToolFailedError as exc:
        # Already gone (detached by someone else, or never configured): nothing to release.
        if "No such device" in exc.fields.get("stderr", "") or not sysfs_state(device):
            return
        raise


def detach_and_wait(device: str, *, backing: str | Collection[str] | None = None,
                    timeout: float = 20.0, grace: float = 5.0) -> bool:
    """Detach `device`; return True once the kernel released it, False if it stays in use
    (then the kernel's autoclear releases it at its last close).

    A device still open when detached is only marked for autoclear. The opener is often
    transient (udev's probe of a device attached a moment ago, another tool's scan), so a
    pending autoclear is given `grace` seconds to complete before the device counts as held.
    With `backing`, a device that serves another file is not ours (any more): released.
    """
    detach(device, backing=backing, timeout=timeout)
    deadline = time.monotonic() + timeout
    pending_since = None
    while time.monotonic() < deadline:
        state = sysfs_state(device)
        if not state or (backing is not None and not serves(device, backing)):
            return True
        if state.get("autoclear") == "1":
            if pending_since is None:
                pending_since = time.monotonic()
            elif time.monotonic() - pending_since >= grace:
                return False
        time.sleep(0.01)
    return not sysfs_state(device)
