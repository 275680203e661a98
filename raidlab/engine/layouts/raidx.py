"""RAID-x: orthogonal striping and mirroring (OSM), Hwang, Jin & Ho, §3 and Fig. 2a.

What the paper says (§3.1, §3.2, §4.2):
  * "The data blocks are striped across the disks horizontally on the top half of the disk
    array. Their images are clustered together and copied in a single disk vertically. All
    image blocks occupy the lower half of the disk array."
  * "Consider the top data stripe consisting of three blocks: B0, B1, and B2. Their images,
    M0, M1, and M2, are stored in Disk 3. Similarly, the images of the second stripe, B3, B4,
    and B5, are mapped to Disk 2, etc." (n = 4 disks in Fig. 2a.)
  * "Each mirror group has n - 1 blocks residing on one disk." "no data block and its image
    should be mapped to the same disk."
  * Data: "A logical data block addressed by d is mapped to the i-th disk and the j-th
    block, where i = d mod n and j = (2d/n) mod n." Images, with b blocks per disk:
        i = n - 1 - (d/(n-1)) mod n                              (1)
        j = b/2 + floor(d/(n-1)n) (n-1) + d mod (n-1)            (2)

How raidlab reads the garbled parts (the words above and Fig. 2a's description decide):
  * Data row. "(2d/n) mod n" cannot be right: it would send blocks 0 and n/2 of a stripe to
    the same rows and only ever use n rows. Striping "horizontally on the top half" means
    row j = floor(d / n) on disk d mod n (RAID0 over the upper half).
  * (1): the divisions are integer divisions and the modulo binds to the quotient:
    mirror group g = floor(d / (n-1)) (n-1 consecutive blocks, the "stripe" of the images
    in the text), image disk i = n - 1 - (g mod n). For n = 4 this gives M0-M2 on disk 3
    and M3-M5 on disk 2, exactly as the text says.
    Why no block lands on its own image disk: block d = g(n-1)+k sits on disk
    (g(n-1)+k) mod n = (k - g) mod n, k = 0..n-2, i.e. on every disk except
    (n-1-g) mod n, which is precisely the image disk. So the rule of thumb holds by
    construction, and the n-1 images of a group are on one disk, n-1 consecutive rows.
  * (2): read as j = b/2 + floor(d / ((n-1) n)) (n-1) + (d mod (n-1)): the image area starts
    at half the disk; every n mirror groups (n(n-1) blocks) each disk receives one group of
    n-1 images, stacked in consecutive rows. This one is consistent as printed once the
    denominator (n-1)n is read as one product.

Geometry decisions (departures, and why):
  * b = chunks per member; the image area starts at row floor(b/2) as in (2). The data area
    holds R rows, R = floor(b/2) rounded down to a multiple of n-1, so that the number of
    data blocks n*R is a whole number of image cycles n(n-1) and every disk's images fit in
    exactly R rows below b/2. At most n-2 rows per half stay unused (reported by `locate`).
  * The paper's n-by-k cluster (Fig. 3, several disks per node, images of a stripe group on
    exactly two disks) is a placement of these members on nodes; the mapping is the same.
  * Images are written "at the background" from a persistent buffer (§3.5, §3.7). That is
    engine behaviour: write plans mark image writes with role "image" so the engine can
    defer them; the layout itself only says where they go. Option `image_buffer` says where
    the engine keeps pending images (raidlab.engine.imagebuffer): "disk" (default), a log
    on the image disk that survives a crash and any single failure; "memory", in the
    writing node's memory, which survives a disk failure but not a crash. §3.7 calls the
    buffer "a buffer file" whose overhead "can be neglected" and says no more; memory is
    that reading's fast end, and an ablation beside the default. Option `image_merge`: the
    background writer sends contiguous pending images of one writing node home as one write,
    up to a mirror group (n-1 chunks, which lie in n-1 consecutive rows of one disk): §3.7's
    "aggressive implementation", where such images "can be written to the disk in a
    pipelined fashion", which the other mirrored layouts cannot do for lack of contiguous
    images.

Fault tolerance (Table 3, §3.6): any single failure; with n >= 3 two failures always lose
some block (every pair of disks holds some block and its image).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from raidlab.engine.layouts.base import ChunkMappedLayout
from raidlab.errors import UsageError
from raidlab.units import parse_size

IMAGE_BUFFERS = ("disk", "memory")
MIN_IMAGE_MEMORY = 64 * 1024


@dataclasses.dataclass(frozen=True, kw_only=True)
class RaidxLayout(ChunkMappedLayout):
    name: ClassVar[str] = "raidx"
    summary: ClassVar[str] = "orthogonal striping and mirroring, images written late from a buffer"
    source: ClassVar[str] = "RAID-x paper §3"
    min_disks: ClassVar[int] = 2
    failure_rule: ClassVar[str] = "survives any single failure"
    buffers_images: ClassVar[bool] = True  # images are written late, from a persistent buffer (§3.5)
    option_help: ClassVar[dict[str, str]] = {
        "image_buffer": "where pending images wait: disk (a log on the image disk, crash-safe) or memory",
        "image_memory": "with image_buffer=memory: the pending images each image disk may have, e.g. 4M "
                        "(assumed; the paper gives its buffer file no size)",
        "image_delay": "seconds the background writer waits after an image disk's first pending image "
                       "before it writes that disk's images home (assumed 0.005; the paper: 'in a delayed "
                       "time at the background')",
        "image_merge": "the largest write home the background writer makes of contiguous images of one "
                       "writing node: group (default: a mirror group, n-1 chunks, §4.2, which §3.7 says 'can "
                       "be written to the disk in a pipelined fashion'), or a size such as 128K; one chunk "
                       "or less writes every image alone"}

    image_buffer: str = "disk"
    image_memory: str | int = "4M"
    image_delay: float | str = 0.005
    image_merge: str | int = "group"

    def _validate_options(self) -> None:
        if self.image_buffer not in IMAGE_BUFFERS:
            raise UsageError(f"raidx image_buffer {self.image_buffer!r} is not one of {', '.join(IMAGE_BUFFERS)}")
        self.image_delay_seconds  # noqa: B018 - refuses a value that is not a delay
        self.image_merge_bytes  # noqa: B018 - refuses a value that is not a size
        if self.image_memory_bytes < MIN_IMAGE_MEMORY:
            raise UsageError(f"raidx image_memory {self.image_memory} is below {MIN_IMAGE_MEMORY >> 10} KiB",
                             hint="write it like image_memory=4M")

    @property
    def image_delay_seconds(self) -> float:
        """The `image_delay` option in seconds (UsageError if it is not 0..3600)."""
        try:
            value = float(self.image_delay) if not isinstance(self.image_delay, bool) else -1.0
        except (TypeError, ValueError):
            value = -1.0
        if not 0 <= value <= 3600:
            raise UsageError(f"raidx image_delay {self.image_delay!r} is not a number of seconds in 0..3600",
                             hint="write it like image_delay=0.5")
        return value

    @property
    def image_memory_bytes(self) -> int:
        """The `image_memory` option in bytes (UsageError if it is not a size)."""
        value = self.image_memory
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return parse_size(str(value), "image_memory")
        except UsageError:
            raise UsageError(f"raidx image_memory {value!r} is not a size", hint="write it like image_memory=4M") from None

    @property
    def image_merge_bytes(self) -> int:
        """The `image_merge` option in bytes (UsageError if it is not a size)."""
        value = self.image_merge
        if value == "group":
            return (self.n_disks - 1) * self.chunk_bytes
        if isinstance(value, int) and not isinstance(value, bool):
            size = value
        else:
            try:
                size = parse_size(str(value), "image_merge")
            except UsageError:
                size = -1
        if size < 0:
            raise UsageError(f"raidx image_merge {value!r} is neither group nor a size",
                             hint="write it like image_merge=group or image_merge=512K")
        return size

    def _placement_period(self) -> int:
        return self.n_disks * (self.n_disks - 1)

    @property
    def image_base_row(self) -> int:
        """First chunk row of the image (lower) half: floor(b/2), equation (2)'s b/2."""
        return self.chunks_per_disk // 2

    @property
    def data_rows(self) -> int:
        """Chunk rows of data (upper half), a multiple of n-1."""
        half = self.chunks_per_disk // 2
        return half - half % (self.n_disks - 1)

    def _capacity(self) -> int:
        return self.n_disks * self.data_rows * self.chunk_bytes

    def image_disk(self, chunk: int) -> int:
        """Equation (1): n - 1 - (floor(d / (n-1)) mod n)."""
        n = self.n_disks
        return n - 1 - (chunk // (n - 1)) % n

    def image_row(self, chunk: int) -> int:
        """Equation (2): b/2 + floor(d / ((n-1) n)) (n-1) + d mod (n-1)."""
        n = self.n_disks
        return self.image_base_row + (chunk // ((n - 1) * n)) * (n - 1) + chunk % (n - 1)

    def _chunk_places(self, chunk: int) -> tuple[tuple[int, int, str], ...]:
        row, disk = divmod(chunk, self.n_disks)
        return ((disk, row, "data"), (self.image_disk(chunk), self.image_row(chunk), "image"))

    def _chunk_at(self, disk: int, row: int) -> tuple[int, int] | None:
        n = self.n_disks
        if row < self.data_rows:
            return row * n + disk, 0
        rel = row - self.image_base_row
        if 0 <= rel < self.data_rows:
            cycle, k = divmod(rel, n - 1)
            group = cycle * n + (n - 1 - disk)
            return group * (n - 1) + k, 1
        return None
