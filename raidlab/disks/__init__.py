"""Emulated member disks: a backing store plus a timing model, as trio BlockTargets.

seek.py       the Ruemmler-Wilkes seek curve and its fit to a spec sheet's figures
geometry.py   DriveSpec (a drive's description) and the zoned geometry an image maps onto
mechanisms/   the timing model, one class per drive kind (pure arithmetic: seek, rotation,
              zones, buffers; ssd latency + rate; none)
catalog.py    the papers' drives and their sources (data/catalog.toml)
scheduler.py  queue disciplines (FIFO, SSTF, SCAN)
backend.py    where the bytes live (memory, sparse image file, real block device)
disk.py       EmulatedDisk and its partitions: the service task, one request at a time
bus.py        a bus several drives share: their transfers queue for its bandwidth
bench.py      `raidlab disk bench`: what a user can ask of a model
"""

from raidlab.disks.backend import BlockDeviceBackend, ImageBackend, MemoryBackend
from raidlab.disks.disk import EmulatedDisk, Partition, as_block_layer

__all__ = ["EmulatedDisk", "Partition", "as_block_layer", "MemoryBackend", "ImageBackend", "BlockDeviceBackend"]
