"""The engine's own CPU per write, without FUSE: raid5 (or raid0) over 4 members of the
untimed `none` model on image files, the writes issued straight to the Array under trio,
as `raidlab bench engine` issues them through the loop device (4 KiB random writes at 32
in flight, 1 MiB sequential writes at 8 in flight, 64 KiB chunks). Prints one JSON line:
wall and process CPU seconds per write, and the array's counters.

Usage: python engine_cpu.py ARCH 4k|1m WRITES [IMAGE_DIR]
The images (4 x 256 MiB, default /var/tmp/raidlab-engine-cpu) are written whole and synced
first, so pre-reads find clean pages in the page cache as in a warmed-up bench run; they are
removed at the end.
"""
import json
import os
import random
import shutil
import sys
import time

import trio

from raidlab.disks import EmulatedDisk
from raidlab.disks.backend import ImageBackend
from raidlab.engine.build import create_array

MiB = 1 << 20
arch, workload, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
image_dir = sys.argv[4] if len(sys.argv) > 4 else "/var/tmp/raidlab-engine-cpu"


async def main() -> dict:
    os.makedirs(image_dir, exist_ok=True)
    paths = [os.path.join(image_dir, f"d{i}") for i in range(4)]
    for path in paths:
        with open(path, "wb") as f:
            for _ in range(256):
                f.write(bytes(MiB))
            os.fsync(f.fileno())   # written back: a page under writeback would send reads to a thread
    async with trio.open_nursery() as nursery:
        disks = [EmulatedDisk(f"d{i}", "none", ImageBackend(p, 256 * MiB), io_in_thread=True)
                 for i, p in enumerate(paths)]
        for disk in disks:
            disk.start(nursery)
        array, _keeper = await create_array("cpu", arch, disks, chunk=64 * 1024)
        rng = random.Random(1)
        if workload == "4k":
            size, depth = 4096, 32
            offsets = [rng.randrange(array.size // size) * size for _ in range(count)]
        else:
            size, depth = MiB, 8
            offsets = [(i * size) % (array.size - array.size % size) for i in range(count)]
        data = rng.randbytes(size)
        pending = iter(offsets)

        async def writer():
            for offset in pending:
                await array.write(offset, data)

        wall, cpu = time.perf_counter(), time.process_time()
        async with trio.open_nursery() as writers:
            for _ in range(depth):
                writers.start_soon(writer)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        nursery.cancel_scope.cancel()
    for disk in disks:
        disk.close()
    shutil.rmtree(image_dir)
    return {"arch": arch, "workload": workload, "writes": count,
            "wall_us_per_write": round(wall / count * 1e6, 1), "cpu_us_per_write": round(cpu / count * 1e6, 1),
            "counters": {k: v for k, v in array.counters.items() if v}}


print(json.dumps(trio.run(main)))
