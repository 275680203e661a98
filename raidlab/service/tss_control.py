"""The TSS control interface over a live array's control socket: the methods of
raidlab.engine.tss.control.TSSControl, each one request to the daemon (the `tss_*`
operations of raidlab.service.hosts.tss). A policy process (raidlab.policies, run by
`raidlab tss policy`) holds one of these; a virtual-time replay gives its policies the
TSSControl itself.
"""

from __future__ import annotations

from typing import Any

import trio

from raidlab import archs
from raidlab.archs.tss import FAMILY as TSS
from raidlab.errors import UsageError
from raidlab.lab import Lab
from raidlab.service import control
from raidlab.service.spec import ArraySpec


def require_tss(lab: Lab, hint: str) -> None:
    """UsageError unless `lab` holds an array of the TSS family (whose host answers the tss_*
    operations), with `hint` saying what works on one."""
    arch = ArraySpec.load(lab.path).arch
    declared = archs.REGISTRY.get(arch)
    if declared is None or declared.family != TSS.name:
        names = " or ".join(a.name for a in archs.of_family(TSS.name))
        raise UsageError(f"{lab.name} is a {arch} array, not {names}", hint=hint)


class SocketControl:
    """TSSControl's methods, answered by the daemon of lab `lab` (module doc)."""

    def __init__(self, lab: Lab) -> None:
        require_tss(lab, "policies manage arrays made with --arch tss")
        self.lab = lab

    async def _call(self, op: str, **fields: Any) -> dict[str, Any]:
        return await trio.to_thread.run_sync(lambda: control.request(self.lab, op, **fields))

    async def get(self, stripe: int) -> dict[str, Any]:
        return await self._call("tss_get", stripe=stripe)

    async def set(self, stripe: int, value: float) -> dict[str, Any]:
        return await self._call("tss_set", stripe=stripe, value=value)

    async def reset(self) -> dict[str, Any]:
        return await self._call("tss_reset")

    async def age(self) -> dict[str, Any]:
        return await self._call("tss_age")

    async def degrade(self, factor: float = 0.5) -> dict[str, Any]:
        return await self._call("tss_degrade", factor=factor)

    async def counts(self) -> dict[str, Any]:
        return await self._call("tss_counts")

    async def promote(self, stripe: int | None = None, kind: str | None = None, *, above: float | None = None,
                      recent=None) -> dict[str, Any]:
        return await self._call("tss_promote", stripe=stripe, kind=kind, above=above,
                                recent=list(recent) if recent else None)

    async def victimize(self, stripe: int | None = None, kind: str | None = None, *, below: float | None = None,
                        recent=None) -> dict[str, Any]:
        return await self._call("tss_victimize", stripe=stripe, kind=kind, below=below,
                                recent=list(recent) if recent else None)
