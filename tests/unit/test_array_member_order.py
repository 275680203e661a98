"""An array's member requests of one plan reach the members in plan order, and an Array
turns on its emulated members' queue merging (it is their block layer)."""

from __future__ import annotations

import trio

from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine.array import Array
from raidlab.engine.layouts.raid5 import Raid5Layout

KiB, MiB = 1024, 1024 * 1024


class _Recording:
    """A member that notes each request when it arrives, before it first waits."""

    def __init__(self, name: str, size: int, log: list) -> None:
        self.name, self._size, self._log = name, size, log
        self._data = bytearray(size)

    @property
    def size(self) -> int:
        return self._size

    async def read(self, offset: int, length: int) -> bytes:
        self._log.append((self.name, offset))
        await trio.sleep(0)
        return bytes(self._data[offset:offset + length])

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        self._log.append((self.name, offset))
        await trio.sleep(0)
        self._data[offset:offset + len(data)] = data

    async def flush(self) -> None:
        await trio.sleep(0)

    def statistics(self) -> dict:
        return {}


def test_member_requests_arrive_in_plan_order_every_time():
    """A raid5 read of 1 MiB asks two ranges of some members (around a parity chunk); trio
    may run the tasks of one batch in reverse order, but the members see plan order."""
    layout = Raid5Layout(n_disks=4, disk_size=16 * MiB, chunk_bytes=64 * KiB, data_offset=MiB)
    plan = layout.read_plan(5 * MiB, MiB)
    expected = [(f"d{r.disk}", r.disk_offset) for r in plan.reads]
    assert len({disk for disk, _ in expected}) < len(expected)  # some member gets two reads
    for _ in range(24):
        log: list = []

        async def main():
            members = [_Recording(f"d{i}", 16 * MiB, log) for i in range(4)]
            await Array("t", layout, members).read(5 * MiB, MiB)

        trio.run(main)
        assert log == expected


def test_an_array_turns_on_its_drives_queue_merging():
    layout = Raid5Layout(n_disks=4, disk_size=16 * MiB, chunk_bytes=64 * KiB, data_offset=MiB)
    drives = [EmulatedDisk(f"d{i}", "none", MemoryBackend(16 * MiB)) for i in range(4)]
    alone = EmulatedDisk("alone", "none", MemoryBackend(16 * MiB))
    Array("t", layout, drives)
    assert all(d._merge for d in drives) and not alone._merge
