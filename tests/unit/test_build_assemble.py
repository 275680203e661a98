"""Creating and assembling engine arrays from member superblocks (virtual clock)."""

from __future__ import annotations

import pytest

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine import build, metadata
from raidlab.sched import run_virtual
from raidlab.errors import UsageError

MiB = 1 << 20


def disks(n, size=8 * MiB, model="none", sizes=None):
    return [EmulatedDisk(f"d{i}", model, MemoryBackend((sizes or [size] * n)[i])) for i in range(n)]


def served(body, members):
    async def main():
        outcome = {}
        async with sched.open_nursery() as nursery:
            for m in members:
                m.start(nursery)
            try:
                outcome["result"] = await body()
            except Exception as exc:  # re-raised as itself, not inside an ExceptionGroup
                outcome["error"] = exc
            nursery.cancel_scope.cancel()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["result"]

    return run_virtual(main)


@pytest.mark.parametrize("arch", ["raid0", "raid1", "raid10", "raid5", "chained", "raidx", "sa1", "sa2", "sa3"])
def test_create_then_assemble_returns_the_same_bytes(arch):
    members = disks(4 if arch != "raid1" else 2)

    async def body():
        array, keeper = await build.create_array("a", arch, members, chunk=64 * 1024)
        payload = bytes(range(256)) * 1024  # 256 KiB
        await array.write(512 * 1024, payload)
        await array.flush()
        again, keeper2 = await build.assemble_array(members)
        assert again.layout == array.layout
        assert await again.read(512 * 1024, len(payload)) == payload
        assert keeper2.superblock.generation == keeper.superblock.generation + 1
        return array.layout

    layout = served(body, members)
    if arch.startswith("sa"):
        assert len(layout.virtual_device_array) == 100


def test_sa_probe_sees_the_slow_member():
    # One member in the innermost zones of an IBM Ultrastar is slower than the outer ones:
    # the probe must give it fewer entries of the virtual device array.
    fast = [EmulatedDisk(f"f{i}", "ibm-ultrastar-9lzx", MemoryBackend(64 * MiB)) for i in range(3)]
    whole = EmulatedDisk("slow", "ibm-ultrastar-9lzx", MemoryBackend(512 * MiB))
    slow = whole.partition(448 * MiB, 64 * MiB, name="slow-inner")
    members = [*fast, slow]

    async def main():
        async with sched.open_nursery() as nursery:
            for d in [*fast, whole]:
                d.start(nursery)
            array, keeper = await build.create_array("sa", "sa3", members, chunk=64 * 1024,
                                                     prepare_options={"probe_bytes": 4 * MiB, "probe_at": "start"})
            nursery.cancel_scope.cancel()
        return array, keeper

    array, keeper = run_virtual(main)
    shares = [array.layout.virtual_device_array.count(d) for d in range(4)]
    assert sum(shares) == 100
    assert shares[3] < min(shares[:3]), shares
    probes = keeper.superblock.arch_state["probe"]
    assert probes[3]["bandwidth"] < min(p["bandwidth"] for p in probes[:3])


def test_mapping_is_never_remeasured_on_assemble():
    members = disks(3)

    async def body():
        array, _ = await build.create_array("a", "sa2", members, chunk=64 * 1024,
                                            options={"bandwidths": (3.0, 2.0, 1.0)})
        again, _ = await build.assemble_array(members)
        return array.layout.virtual_device_array, again.layout.virtual_device_array

    first, second = served(body, members)
    assert first == second


def test_refusals():
    members = disks(3, sizes=[8 * MiB, 8 * MiB, 4 * MiB])
    with pytest.raises(UsageError, match="differ in size"):
        served(lambda: build.create_array("a", "raid5", members), members)
    members = disks(2)
    with pytest.raises(UsageError, match="at least 3 disks"):
        served(lambda: build.create_array("a", "raid5", members), members)
    members = disks(3)
    with pytest.raises(UsageError, match="unknown architecture"):
        served(lambda: build.create_array("a", "raid7", members), members)


def test_assemble_refuses_swapped_and_foreign_members():
    ours, theirs = disks(3), disks(3)

    async def body():
        await build.create_array("ours", "raid5", ours, chunk=64 * 1024)
        await build.create_array("theirs", "raid5", theirs, chunk=64 * 1024)
        with pytest.raises(metadata.MetadataError, match="position"):
            await build.assemble_array([ours[1], ours[0], ours[2]])
        with pytest.raises(metadata.MetadataError, match="another array"):
            await build.assemble_array([ours[0], theirs[1], ours[2]])

    served(body, [*ours, *theirs])


def test_failure_is_recorded_and_survives_reassembly():
    members = disks(3)

    async def body():
        array, keeper = await build.create_array("a", "raid5", members, chunk=64 * 1024)
        await array.write(0, b"\x11" * (256 * 1024))
        members[1].failed = True
        assert await array.read(0, 256 * 1024) == b"\x11" * (256 * 1024)
        assert keeper.superblock.failed_members == [1]
        members[1].failed = False  # the dead disk "comes back": its superblock is stale
        again, _ = await build.assemble_array(members)
        assert again.failed == {1}
        assert await again.read(0, 256 * 1024) == b"\x11" * (256 * 1024)

    served(body, members)
