"""The TSS control interface over a live array's control socket: the methods of
raidlab.engine.tss.control.TSSControl, each one request to the daemon (the `tss_*`
operations of raidlab.service.hosts.tss). A policy process (raidlab.policies, run by
`raidlab tss policy`, or a live run's PolicyBeside) holds one of these; a virtual-time
replay gives its policies the TSSControl itself.
"""

from __future__ import annotations

import threading
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


class PolicyBeside:
    """A policy (raidlab.policies) managing live array `lab` from a thread of this process,
    as `raidlab tss policy` does from a process of its own: through the control socket only.
    A live run starts one beside its workload (`start`) and stops it after (`stop`, which
    returns what it did, from a `finally`, so an interrupt stops and joins the thread too); a
    policy that failed is reported by `stop`, not raised into the workload."""

    def __init__(self, lab: Lab, name: str, options: dict[str, Any] | None = None) -> None:
        from raidlab.policies import make_policy

        self.control = SocketControl(lab)
        self.name = name
        self.policy = make_policy(name, options)
        self.turns = 0
        self.error: str | None = None
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._ready = threading.Event()

    def start(self) -> "PolicyBeside":
        def count(moved: dict) -> None:
            self.turns += 1

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as scope:
                self._scope = scope
                self._ready.set()
                await self.policy.run(self.control, on_check=count)

        def body() -> None:
            try:
                trio.run(main)
            except BaseException as exc:  # noqa: BLE001 - reported by stop()
                self.error = f"{type(exc).__name__}: {exc}"
            finally:
                self._ready.set()

        self._thread = threading.Thread(target=body, name=f"tss-policy-{self.control.lab.name}", daemon=True)
        self._thread.start()
        self._ready.wait()
        return self

    def stop(self, timeout: float = 60.0) -> dict[str, Any]:
        """Cancel the policy, wait for its thread; what it was and what it moved."""
        if self._thread is not None:
            if self._thread.is_alive() and self._token is not None and self._scope is not None:
                try:
                    trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
                except trio.RunFinishedError:
                    pass
            self._thread.join(timeout)
            if self._thread.is_alive():
                self.error = self.error or f"the policy did not stop within {timeout:.0f} s"
            self._thread = None
        return {"name": self.name, **self.policy.describe(), "moves": dict(self.policy.moves),
                "checks": self.turns, "error": self.error}
