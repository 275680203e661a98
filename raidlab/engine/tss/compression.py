"""Compression for cRAID5 stripes (Pallipadi & Gopinath §3.5), and what it costs in time.

The paper compressed whole stripes in the kernel with an LZ-family coder chosen for being
light on memory and CPU (its reference [9], Williams' LZRW). raidlab uses lz4's block
format, the same family and of the same intent: a stripe is compressed whole, and a stripe
whose compressed form does not save at least one sub-stripe is stored as it is.

Time: live, compression costs what it costs on this host, inside the request. In virtual
time the engine's own CPU time does not advance the clock, so a `CpuCost` charges each
compression and decompression a time per byte of the uncompressed stripe with sched.sleep:
`measured_cost()` measures lz4 on this host; the Pentium 75 of the paper's set-up (§5.3) is
an assumption with its derivation where scenarios use it. The device reports the rates it
was charged, so a result says which one it used.
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

    def describe(self) -> dict:
        return {"label": self.label,
                "compress_mb_s": round(1e-6 / self.compress_s_per_byte, 3) if self.compress_s_per_byte else None,
                "decompress_mb_s": round(1e-6 / self.decompress_s_per_byte, 3) if self.decompress_s_per_byte else None}


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
