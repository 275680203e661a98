"""Chained declustering (Hsiao & DeWitt), as drawn in the RAID-x paper, Fig. 2c.

RAID-x paper (Hwang, Jin & Ho), §3.3: "The chained-declustering RAID allows a skewed
striping of image blocks (Fig. 2c)"; §3.2: "Like chained declustering (Fig. 2c), the mapping
of data blocks and their images can be also interleaved"; §3.5: chained declustering "needs
to write a data stripe and its image in 2W time because interleaved data and images must be
written separately"; §7.4 blames its slow writes on "the frequent change of disk head
position in writing data and mirroring". Fig. 2c itself is missing from our copy of the
paper; from that text we read it as:

    disk:      0     1     2     3
    row 0:    B0    B1    B2    B3        data stripe 0, striped like RAID0
    row 1:    M3    M0    M1    M2        its images, skewed by one disk
    row 2:    B4    B5    B6    B7
    row 3:    M7    M4    M5    M6

i.e. block c on disk c mod n (chunk row 2*(c div n)) and its image on the next disk,
(c mod n) + 1 mod n, in the row just below. Every disk's data is backed up by its right
neighbour, so the array survives any set of failures with no two neighbours (disks i and
i+1 mod n) failed: up to n/2 failures, Table 3's "n/2 disk failures".

Option image_placement="halves" gives Hsiao & DeWitt's original placement instead (all
primaries in the first half of each disk, all backups in the second half); the chain (image
on the next disk) and therefore the failure behaviour are the same.

Departure: after a failure, chained declustering's point is that the failed disk's read
load is spread over the whole chain. Which copy serves a read is a read-balancing policy of
the engine; this module offers every copy through `copies()`, and its degraded plans simply
read the surviving copy.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from raidlab.engine.layouts.base import ChunkMappedLayout
from raidlab.errors import UsageError

IMAGE_PLACEMENTS = ("interleaved", "halves")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChainedLayout(ChunkMappedLayout):
    image_placement: str = "interleaved"

    name: ClassVar[str] = "chained"
    summary: ClassVar[str] = "chained declustering: each chunk's copy on the next disk"
    source: ClassVar[str] = 'RAID-x paper, chained declustering'
    option_help: ClassVar[dict[str, str]] = {"image_placement": "where the copy of a chunk goes on the next disk"}
    min_disks: ClassVar[int] = 2
    failure_rule: ClassVar[str] = (
        "survives any failures with no two neighbouring disks (i and i+1 mod n) both failed"
    )

    def _validate_options(self) -> None:
        if self.image_placement not in IMAGE_PLACEMENTS:
            raise UsageError(
                f"chained: image placement {self.image_placement!r} is not one of {IMAGE_PLACEMENTS}"
            )

    @property
    def data_rows(self) -> int:
        """Chunk rows of data per disk (the other half of the rows holds images)."""
        return self.chunks_per_disk // 2

    def _capacity(self) -> int:
        return self.n_disks * self.data_rows * self.chunk_bytes

    def _chunk_places(self, chunk: int) -> tuple[tuple[int, int, str], ...]:
        stripe, disk = divmod(chunk, self.n_disks)
        image_disk = (disk + 1) % self.n_disks
        if self.image_placement == "interleaved":
            return ((disk, 2 * stripe, "data"), (image_disk, 2 * stripe + 1, "mirror"))
        return ((disk, stripe, "data"), (image_disk, self.data_rows + stripe, "mirror"))

    def _chunk_at(self, disk: int, row: int) -> tuple[int, int] | None:
        n = self.n_disks
        if self.image_placement == "interleaved":
            stripe, is_image = divmod(row, 2)
        else:
            stripe, is_image = row % self.data_rows, row // self.data_rows
            if is_image > 1:
                return None
        if stripe >= self.data_rows:
            return None
        if is_image:
            return stripe * n + (disk - 1) % n, 1
        return stripe * n + disk, 0
