"""File trees with known checksums, for the live tests that write through a filesystem on
an array, remount it and verify (engine layouts, caching architectures)."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

from raidlab.tools.mount import mount, umount

MIXED_SIZES = (512, 3000, 4096, 70_000, 300_000)


def write_tree(root: Path, seed: int, files: int = 60, *, dirs: int = 7,
               sizes: tuple[int, ...] = MIXED_SIZES) -> dict[str, str]:
    """`files` files of sizes drawn from `sizes` in `dirs` x 3 directories; returns
    relative path -> sha256, after a sync."""
    rng = random.Random(seed)
    sums = {}
    for i in range(files):
        rel = f"d{i % dirs}/sub{i % 3}/f{i}.bin"
        data = rng.randbytes(rng.choice(sizes))
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        sums[rel] = hashlib.sha256(data).hexdigest()
    os.sync()
    return sums


def verify_tree(root: Path, sums: dict[str, str]) -> None:
    for rel, digest in sums.items():
        assert hashlib.sha256((root / rel).read_bytes()).hexdigest() == digest, rel


def remount(device: str, mnt: Path) -> None:
    """Unmount, drop the page cache, mount again: later reads come from the array."""
    umount(mnt)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    mount(device, mnt)
