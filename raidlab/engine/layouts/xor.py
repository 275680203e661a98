"""Parity arithmetic: XOR of equal-length byte strings.

numpy's bitwise_xor over the buffers viewed as 64-bit words (8-bit where a length is not a
multiple of 8), accumulated in place: one vectorised pass per operand, no copies of the
inputs. It replaced XOR through Python integers (`int.from_bytes` in 16 KiB slices), the
fastest pure-Python way. Measured on the development machine (2 cores, Python 3.11, numpy
2.4, a campaign running beside it), time per call:
    operands x size    Python integers    numpy
    2 x 4 KiB          29 µs              4 µs
    3 x 4 KiB          30 µs              10 µs
    3 x 64 KiB         330 µs             15 µs
    4 x 512 KiB        5.4 ms             0.9 ms
A raid5 read-modify-write of one 4 KiB block XORs three 4 KiB buffers, a full-stripe write
the stripe's data units, so this is on every parity write's path.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def xor_blocks(blocks: Sequence[bytes | bytearray | memoryview]) -> bytes:
    """XOR of one or more equal-length buffers. One buffer returns a copy of it."""
    if not blocks:
        raise ValueError("xor_blocks needs at least one buffer")
    views = [memoryview(b).cast("B") for b in blocks]
    length = len(views[0])
    for view in views:
        if len(view) != length:
            raise ValueError(f"xor_blocks: lengths differ ({[len(v) for v in views]})")
    if len(views) == 1 or length == 0:
        return bytes(views[0])
    word = np.uint64 if length % 8 == 0 else np.uint8
    acc = np.frombuffer(views[0], dtype=word).copy()
    for view in views[1:]:
        np.bitwise_xor(acc, np.frombuffer(view, dtype=word), out=acc)
    return acc.tobytes()


def xor_bytes(a: bytes | bytearray | memoryview, b: bytes | bytearray | memoryview) -> bytes:
    """XOR of two equal-length buffers."""
    return xor_blocks((a, b))
