"""Attach exported files as loop devices and wait until the kernel (and udev) have them.

Why an event wait at all: `losetup` returns once LOOP_CONFIGURE succeeded, but on hosts
running systemd-udevd the device's udev processing (symlinks, blkid probe, permissions) is
still under way; mkfs or mdadm racing it sees a busy or half-described device. We listen
for the device's uevent with pyudev:

* udevd running (/run/udev/control exists): the "udev" source, so the event arrives after
  udev's rules ran -- the same guarantee `udevadm settle` gives, for just this device;
* no udevd (this project's development machines: PID 1 is not systemd, /dev is devtmpfs,
  which creates nodes synchronously in the kernel): the "kernel" source, i.e. the raw
  uevent, which needs no daemon. We do not start udevd ourselves: it would take over device
  management for the whole host, shared with other users;
* no netlink socket at all (restricted containers): poll sysfs and /dev every 10 ms.

In every case "ready" is checked from sysfs and /dev, not inferred from the event:
/sys/block/loopN/loop/backing_file names our file, the size is non-zero and /dev/loopN is a
block device node. Blocking code: run it in a worker thread (trio.to_thread) when the
backing file is served by this process's FUSE loop.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from raidlab.errors import LabError
from raidlab.tools import losetup

UDEV_CONTROL = Path("/run/udev/control")


def udev_running() -> bool:
    return UDEV_CONTROL.exists()


@dataclass
class ReadyWait:
    source: str          # "udev", "kernel" or "poll"
    events_seen: int
    seconds: float


def _is_ready(device: str, backing_file: str) -> bool:
    state = losetup.sysfs_state(device)
    if losetup.strip_deleted(state.get("backing_file", "")) != os.path.abspath(backing_file):
        return False
    if losetup.device_size(device) <= 0:
        return False
    try:
        return stat.S_ISBLK(os.stat(device).st_mode)
    except FileNotFoundError:
        return False


def _open_monitor():
    """A started pyudev monitor of block devices, or None if netlink is unavailable."""
    try:
        import pyudev

        context = pyudev.Context()
        source = "udev" if udev_running() else "kernel"
        monitor = pyudev.Monitor.from_netlink(context, source=source)
        monitor.filter_by("block")
        monitor.start()
        return monitor, source
    except Exception:  # no netlink (container), no libudev: fall back to polling
        return None, "poll"


def attach_and_wait(path: str | os.PathLike, *, direct_io: bool = True,
                    require_direct_io: bool = True, timeout: float = 20.0
                    ) -> tuple[losetup.LoopDevice, ReadyWait]:
    """losetup `path` and return once its loop device is usable.

    With require_direct_io, a loop device the kernel configured without direct I/O is
    detached again and LabError raised: its timing and durability would be wrong.
    """
    path = os.path.abspath(path)
    monitor, source = _open_monitor()
    start = time.monotonic()
    events = 0
    try:
        dev = losetup.attach(path, direct_io=direct_io)
        name = os.path.basename(dev.device)
        udev_done = source != "udev"   # with udevd we also wait for its event on this device
        deadline = start + timeout
        while True:
            if udev_done and _is_ready(dev.device, path):
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                losetup.detach(dev.device)
                raise LabError(f"loop device {dev.device} for {path} did not become ready "
                               f"within {timeout:.0f} s ({source} events)")
            if monitor is None:
                time.sleep(min(0.01, remaining))
                continue
            event = monitor.poll(timeout=min(0.2, remaining))
            if event is not None and event.sys_name == name:
                events += 1
                if event.action in ("change", "add"):
                    udev_done = True
            elif event is None and source == "udev" and _is_ready(dev.device, path):
                # The kernel side is ready but no udev event came (a rule set that drops
                # loop events): give udev 2 s, then go on rather than hang.
                udev_done = time.monotonic() - start > 2.0
    finally:
        del monitor  # pyudev closes the netlink socket when the monitor is freed
    if require_direct_io and direct_io and not dev.direct_io:
        losetup.detach(dev.device)
        raise LabError(f"the kernel attached {path} to {dev.device} without direct I/O",
                       hint="the file system of the backing file must support O_DIRECT")
    return dev, ReadyWait(source, events, time.monotonic() - start)
