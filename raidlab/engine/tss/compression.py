"""Compression for cRAID5 stripes (Pallipadi & Gopinath §3.5), and what it costs in time.

The paper compressed whole stripes in the kernel with an LZ-family coder chosen for being
light on memory and CPU (its reference [9], Williams' LZRW). raidlab uses lz4's block
format, the same family and of the same intent: a stripe is compressed whole, and a stripe
whose compressed form does not save at least one sub-stripe is stored as it is.

Time: live, compression costs what it costs on this host, inside the request. In virtual
time the engine's own CPU time does not advance the clock, so the device is given a cost
that charges its processor work:

* `HostCost` (cpu_cost=host): the run's host (raidlab.disks.host), the same component that
  charges every other architecture's and workload's processor work. A compression or
  decompression holds a processor for the uncompressed stripe at the host's compress or
  decompress rate, plus one copy of the stripe between the buffer cache and the page cache
  (TSS §6: "cRAID5 involves lot of copying from buffer cache to page cache, during
  compression / decompression ... the page cache and buffer cache are separate in
  Linux-2.2.5"); every parity computation (RAID5 and cRAID5 stripes alike) holds it for the
  bytes XORed at the host's parity rate (§6 names "an additional parity calculation time"
  among RAID5's costs).
* `CpuCost`: compression and decompression alone, a time per byte of the uncompressed stripe
  that holds nothing (sched.sleep): `measured_cost()` measures lz4 on this host, or rates
  given as C/D MB/s. Parity is free.

The device reports the cost it was charged, so a result says which one it used.
"""

from __future__ import annotations

import dataclasses
import os
import time

import lz4.block
from raidlab import sched


def compress(data: bytes) -> bytes:
    return lz4.block.compress(data, store_size=False)


def decompress(blob: bytes, size: int) -> bytes:
    """`blob` (compressed bytes, possibly followed by padding) back to `size` bytes."""
    return lz4.block.decompress(blob, uncompressed_size=size)


@dataclasses.dataclass(frozen=True)
class CpuCost:
    """Seconds charged per uncompressed byte, in virtual time; `label` names the source."""

    compress_s_per_byte: float
    decompress_s_per_byte: float
    label: str

    async def compressing(self, nbytes: int) -> None:
        await sched.sleep(nbytes * self.compress_s_per_byte)

    async def decompressing(self, nbytes: int) -> None:
        await sched.sleep(nbytes * self.decompress_s_per_byte)

    async def xor(self, nbytes: int) -> None:
        """Parity is not charged by a rate-only cost."""

    def describe(self) -> dict:
        return {"label": self.label,
                "compress_mb_s": round(1e-6 / self.compress_s_per_byte, 3) if self.compress_s_per_byte else None,
                "decompress_mb_s": round(1e-6 / self.decompress_s_per_byte, 3) if self.decompress_s_per_byte else None}


class HostCost:
    """Compression, its cache copy and parity charged on the run's host (module doc)."""

    def __init__(self, host) -> None:
        self.host = host

    async def compressing(self, nbytes: int) -> None:
        await self.host.charge("compress", nbytes)
        await self.host.charge("copy", nbytes)

    async def decompressing(self, nbytes: int) -> None:
        await self.host.charge("decompress", nbytes)
        await self.host.charge("copy", nbytes)

    async def xor(self, nbytes: int) -> None:
        await self.host.charge("parity", nbytes)

    def describe(self) -> dict:
        m = self.host.model
        return {"label": f"host {m.name}", "compress_mb_s": m.compress_mb_s or None,
                "decompress_mb_s": m.decompress_mb_s or None, "copy_mb_s": m.copy_mb_s or None,
                "parity_mb_s": m.parity_mb_s or None, "cost_scale": m.cost_scale}


def measured_cost(stripe_bytes: int = 64 * 1024, repeat: int = 20) -> CpuCost:
    """lz4 on this host, over a half-compressible stripe (random bytes then zeros), best of
    `repeat` runs (the least disturbed by other work)."""
    half = stripe_bytes // 2
    sample = os.urandom(half) + bytes(stripe_bytes - half)
    packed = compress(sample)
    best_c = best_d = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        compress(sample)
        t1 = time.perf_counter()
        decompress(packed, stripe_bytes)
        t2 = time.perf_counter()
        best_c, best_d = min(best_c, t1 - t0), min(best_d, t2 - t1)
    return CpuCost(best_c / stripe_bytes, best_d / stripe_bytes, "measured on this host (lz4)")
