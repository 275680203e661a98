"""A cache whose background task fails (here: an injected error in the level-2 / LWFD
destage) must not leave later requests and flushes waiting for ever: they get EIO naming
the failure, the failure is logged when it happens, and the exception still reaches the
nursery. (A daemon stopping after such a failure flushed its RAM buffer in a shielded
cleanup and hung there: the log writers it waited for had been cancelled.)"""

from __future__ import annotations

import errno
import logging

import pytest

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine.caches import create_dcd, create_vcraid
from raidlab.sched import run_virtual

KiB, MiB = 1024, 1 << 20


async def make(kind: str, nursery, drives: dict | None = None):
    if kind == "vcraid":
        members = [EmulatedDisk(f"d{i}", "none", MemoryBackend(8 * MiB)) for i in range(4)]
        cache = EmulatedDisk("cache", "none", MemoryBackend(1 * MiB))
        disks = [*members, cache]
        for d in disks:
            d.start(nursery)
        target = await create_vcraid("v", members, [cache], ram_buffer=64 * KiB, idle_threshold=0.05)
    else:
        cache = EmulatedDisk("cache", "none", MemoryBackend(1 * MiB))
        data = EmulatedDisk("data", "none", MemoryBackend(8 * MiB))
        for d in (cache, data):
            d.start(nursery)
        target = await create_dcd("t", cache, data, ram_buffer=64 * KiB, idle_threshold=0.05)
    if drives is not None:
        drives["cache"] = cache
    return target


@pytest.mark.parametrize("kind", ["vcraid", "dcd"])
def test_a_failed_background_task_fails_requests_instead_of_hanging(kind, caplog):
    after: dict[str, object] = {}

    async def injected(*args, **kwargs):
        raise RuntimeError("injected destage failure")

    async def main():
        async with sched.open_nursery() as nursery:
            target = await make(kind, nursery)
            target.store.destage_together = injected
            target.start(nursery)
            try:
                await target.write(0, b"a" * 4096)
                await target.flush()
                await sched.sleep(10.0)  # idle: the destage runs and fails, cancelling us
            finally:
                # What a stopping daemon does (shielded): flush what is in RAM.
                with sched.CancelScope(shield=True), sched.move_on_after(60) as waited:
                    for name, call in (("write", lambda: target.write(8192, b"b" * 4096)),
                                       ("flush", target.flush)):
                        try:
                            await call()
                            after[name] = "returned"
                        except OSError as exc:
                            after[name] = exc
                after["timed_out"] = waited.cancelled_caught

    with caplog.at_level(logging.ERROR, logger="raidlab.engine.caches.activity"):
        with pytest.raises(BaseExceptionGroup) as group:
            run_virtual(main)
    assert group.group_contains(RuntimeError, match="injected destage failure")
    assert after["timed_out"] is False
    for name in ("write", "flush"):
        exc = after[name]
        assert isinstance(exc, OSError) and exc.errno == errno.EIO, (name, exc)
        assert "injected destage failure" in str(exc)
    assert any("background task" in r.getMessage() and r.exc_info for r in caplog.records)



@pytest.mark.parametrize("fault", ["write-eio", "read-eio"])
@pytest.mark.parametrize("kind", ["vcraid", "dcd"])
def test_a_drive_failing_under_a_background_task_fails_the_cache_not_its_owner(kind, fault, caplog):
    """A drive's EIO is not a bug: the cache has failed (requests get EIO, `failure` says why)
    and the nursery its owner serves in goes on, so the daemon still answers and stops. With
    read-eio the failure meets the destage that drains a full log, which reads the cache
    disk in a nursery of its own: the EIO arrives inside an exception group."""
    seen: dict[str, object] = {}

    async def main():
        async with sched.open_nursery() as nursery:
            drives: dict = {}
            target = await make(kind, nursery, drives)
            target.start(nursery)
            await target.write(0, b"a" * 4096)
            await target.flush()
            drives["cache"].fault = fault
            try:  # more than the RAM buffer, then more than the log's high watermark: the log is
                # written, and drained home from the cache disk
                for offset in range(65536, 65536 + 2 * MiB, 256 * KiB):
                    await target.write(offset, b"b" * (256 * KiB))
            except OSError as exc:
                seen["write"] = exc
            with sched.move_on_after(10):
                while target.failure is None:
                    await sched.sleep(0.05)
            seen["failure"] = target.failure
            try:
                await target.read(0, 4096)
            except OSError as exc:
                seen["read"] = exc
            nursery.cancel_scope.cancel()
        seen["nursery"] = "ended by its owner"

    with caplog.at_level(logging.ERROR, logger="raidlab.engine.caches.activity"):
        run_virtual(main)
    assert seen["nursery"] == "ended by its owner"
    assert seen["failure"] == "emulated disk cache has failed", seen
    assert seen.get("write") is None or seen["write"].errno == errno.EIO
    assert isinstance(seen["read"], OSError) and seen["read"].errno == errno.EIO
    assert any("met a failed drive" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("kind, failing", [("vcraid", "cache"), ("dcd", "data")])
def test_a_failure_is_kept_in_the_superblocks_and_refuses_the_next_assembly(kind, failing):
    """The failed state outlives the run: VC-RAID records it in its raid5 members'
    superblocks (a cache disk failed), DCD in its cache-disk's (its data disk failed); once
    the drive answers again, assembly is refused in one line naming the failure, instead of
    serving blocks older than what was acknowledged."""
    from raidlab.engine.caches import assemble_dcd, assemble_vcraid
    from raidlab.engine.metadata import MetadataError

    seen: dict[str, object] = {}

    async def main():
        async with sched.open_nursery() as nursery:
            members = [EmulatedDisk(f"d{i}", "none", MemoryBackend(8 * MiB)) for i in range(4)]
            cache = EmulatedDisk("cache", "none", MemoryBackend(1 * MiB))
            data = EmulatedDisk("data", "none", MemoryBackend(8 * MiB))
            drives = [*members, cache] if kind == "vcraid" else [cache, data]
            for d in drives:
                d.start(nursery)
            if kind == "vcraid":
                target = await create_vcraid("v", members, [cache], ram_buffer=64 * KiB, idle_threshold=0.05)
            else:
                target = await create_dcd("t", cache, data, ram_buffer=64 * KiB, idle_threshold=0.05)
            target.start(nursery)
            await target.write(0, b"a" * 4096)
            await target.flush()
            broken = cache if failing == "cache" else data
            broken.fault = "read-eio" if failing == "cache" else "write-eio"
            try:
                for offset in range(65536, 65536 + 2 * MiB, 256 * KiB):
                    await target.write(offset, b"b" * (256 * KiB))
                await sched.sleep(10.0)  # idle: a destage meets the failed drive
            except OSError:
                pass
            with sched.move_on_after(10):
                while target.failure is None:
                    await sched.sleep(0.05)
            seen["failure"] = target.failure
            nursery.cancel_scope.cancel()
        # the drives again, the failed one answering as before (its bytes as it left them)
        again = {d.name: EmulatedDisk(d.name, "none", d.backend) for d in drives}
        async with sched.open_nursery() as nursery:
            for d in again.values():
                d.start(nursery)
            try:
                if kind == "vcraid":
                    await assemble_vcraid([again[m.name] for m in members], [again["cache"]])
                else:
                    await assemble_dcd(again["cache"], again["data"])
            except MetadataError as exc:
                seen["refused"] = str(exc)
            nursery.cancel_scope.cancel()

    run_virtual(main)
    assert seen["failure"], seen
    assert "failed while it ran" in seen["refused"] and "\n" not in seen["refused"], seen
