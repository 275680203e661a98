"""A partition reports its share of its drive's time: the service time of its own requests
(the shares add up to the drive's busy time), their mean per read or write, and the drive's
deepest queue, which its partitions share."""

from __future__ import annotations

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.sched import run_virtual

MiB = 1 << 20


def test_partitions_split_the_drives_busy_time():
    async def main():
        disk = EmulatedDisk("drive", "hp-c2200a", MemoryBackend(64 * MiB))
        cache, data = disk.partition(0, 8 * MiB, "cache"), disk.partition(8 * MiB, 56 * MiB, "data")
        async with sched.open_nursery() as nursery:
            disk.start(nursery)
            async with sched.open_nursery() as requests:
                for i in range(6):
                    requests.start_soon(cache.write, i * 4096, bytes(4096))
                for i in range(4):
                    requests.start_soon(data.read, i * MiB, 8192)
            await data.flush()
            nursery.cancel_scope.cancel()
        return disk.statistics(), cache.statistics(), data.statistics()

    drive, cache, data = run_virtual(main)
    assert cache["busy_time"] > 0 and data["busy_time"] > 0
    assert abs(cache["busy_time"] + data["busy_time"] - drive["busy_time"]) < 1e-12
    assert cache["mean_service_ms"] == cache["busy_time"] / 6 * 1e3
    assert data["mean_service_ms"] == data["busy_time"] / 4 * 1e3  # the flush's time counts, per read or write
    assert cache["max_queue_length"] == data["max_queue_length"] == drive["max_queue_length"] == 10


def test_a_replay_can_put_its_members_on_partitions_of_fewer_drives():
    from raidlab.runners.virtual import SimSpec, replay_requests
    from raidlab.traces.formats import Request

    requests = [Request(i * 0.001, "write" if i % 3 else "read", (i * 37 % 400) * 16384, 16384) for i in range(300)]
    report = replay_requests(SimSpec("raid0", "quantum-fireball-1280s", disks=5, drives=3, chunk=16384,
                                     disk_size=96 * MiB), requests)
    places = [(m["name"], m["drive"], m["slot"]) for m in report["layout"]["members"]]
    assert places == [("d0", "drive0", 0), ("d1", "drive1", 0), ("d2", "drive2", 0),
                      ("d3", "drive0", 1), ("d4", "drive1", 1)]
    assert report["member_sizes"] == [48 * MiB] * 5  # each a half of a 96 MiB drive
    busy = {d["name"]: d["busy_s"] for d in report["per_disk"]}
    drives = {d["name"]: d["busy_s"] for d in report["drives"]}
    assert abs(drives["drive0"] - busy["d0"] - busy["d3"]) < 1e-9
    assert abs(drives["drive2"] - busy["d2"]) < 1e-9
    whole = replay_requests(SimSpec("raid0", "quantum-fireball-1280s", disks=5, chunk=16384, disk_size=48 * MiB),
                            requests)
    assert whole["layout"] is None and whole["drives"] is None
