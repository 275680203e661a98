"""Architecture families served by the array daemon: which host class builds which arch.

Why a registry: one daemon per array (raidlab.service.daemon) owns the lab (FUSE mount,
member disks, loop device, control socket), but what it builds differs by family:

* engine layouts (raid0 ... sa3): an Array over the member disks, exported as `volume`;
* caching architectures (dcd, vcraid): RAM buffer + cache disk(s) in front of a data disk or
  an engine raid5 (raidlab.service.hosts.cache);
* md baselines (md-raid0 ... md-raid10): mdadm over loop devices on the lab's `disks/dK`
  files, natively or in the lab VM (raidlab.service.hosts.md).

A host class is named here by dotted path and imported only when used, so a family whose
module is missing or broken cannot stop the others from working. Each host class provides

    archs() -> list[str]                       (classmethod) the ids it builds
    validate(arch, disks, disk_size, chunk, options)   (classmethod) raise UsageError, start nothing
    validate_runner(arch, runner)              (optional classmethod) refuse a runner early
    __init__(daemon)
    async open(session, mode) -> dict          build or assemble; push cleanups on the session;
                                               return {"device", "capacity", "state", ...}
    async op_status(request, send) -> dict     and any other op_NAME(request, send) it supports
    vm_disks() -> list[Path]                   (optional) the files a lab VM runner attaches
    fs                                         (optional) the BlockExportFS serving `volume`,
                                               for the daemon's capture op
"""

from __future__ import annotations

import importlib
from typing import Any

from raidlab.errors import UsageError

# family name -> "module:Class"; order is the order `raidlab create --help` lists them.
HOST_CLASSES: dict[str, str] = {
    "engine": "raidlab.service.hosts.engine:EngineHost",
    "cache": "raidlab.service.hosts.cache:CacheHost",
    "md": "raidlab.service.hosts.md:MdHost",
}


def _load(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def available_hosts() -> dict[str, Any]:
    """Family -> host class, for the families whose module imports."""
    out = {}
    for family, path in HOST_CLASSES.items():
        try:
            out[family] = _load(path)
        except ImportError:
            continue
    return out


def all_archs() -> list[str]:
    return [arch for cls in available_hosts().values() for arch in cls.archs()]


def host_class(arch: str):
    """The host class that builds `arch`, or UsageError naming the known ids."""
    for cls in available_hosts().values():
        if arch in cls.archs():
            return cls
    raise UsageError(f"unknown architecture {arch!r}", hint=f"choose one of: {', '.join(all_archs())}")


def validate(arch: str, disks: int, disk_size: int, chunk: int, options: dict, runner: str = "native") -> None:
    """Refuse an impossible configuration before anything is started (a host class may also
    refuse a runner with `validate_runner(arch, runner)`)."""
    cls = host_class(arch)
    cls.validate(arch, disks, disk_size, chunk, options)
    if hasattr(cls, "validate_runner"):
        cls.validate_runner(arch, runner)
