"""RAID10 against md's own code, and chained declustering as drawn in the RAID-x paper.

md_raid10_find_phys / md_raid10_find_virt / md_calc_sectors transliterate
__raid10_find_phys(), raid10_find_virt() and calc_sectors() from Linux drivers/md/raid10.c
(torvalds/linux at commit 0021b7bc045e4b0b85d8c53614342aaf84ca96a5; far_set_size = the
whole array, mdadm's default), in sectors, with md's variable names.
"""

from __future__ import annotations

import pytest

from raidlab.engine.layouts.chained import ChainedLayout
from raidlab.engine.layouts.raid10 import Raid10Layout

SECTOR = 512


class Geo:
    def __init__(self, raid_disks, near, far, offset, chunk_sectors, dev_sectors):
        self.raid_disks, self.near_copies, self.far_copies, self.far_offset = raid_disks, near, far, offset
        self.chunk_shift = chunk_sectors.bit_length() - 1
        self.chunk_mask = chunk_sectors - 1
        # calc_sectors(conf, size)
        size = dev_sectors >> self.chunk_shift
        size //= far
        size *= raid_disks
        size //= near
        self.array_sectors = size << self.chunk_shift
        size = size * near * far
        size = -(-size // raid_disks)
        if offset:
            self.stride = 1 << self.chunk_shift
        else:
            size //= far
            self.stride = size << self.chunk_shift


def md_raid10_find_phys(geo: Geo, r10bio_sector: int) -> list[tuple[int, int]]:
    devs = []
    chunk = r10bio_sector >> geo.chunk_shift
    sector = r10bio_sector & geo.chunk_mask
    chunk *= geo.near_copies
    stripe = chunk
    stripe, dev = divmod(stripe, geo.raid_disks)
    if geo.far_offset:
        stripe *= geo.far_copies
    sector += stripe << geo.chunk_shift
    for _n in range(geo.near_copies):
        d = dev
        s = sector
        devs.append((d, s))
        for _f in range(1, geo.far_copies):
            d += geo.near_copies
            d %= geo.raid_disks
            s += geo.stride
            devs.append((d, s))
        dev += 1
        if dev >= geo.raid_disks:
            dev = 0
            sector += geo.chunk_mask + 1
    return devs


def md_raid10_find_virt(geo: Geo, sector: int, dev: int) -> int:
    offset = sector & geo.chunk_mask
    if geo.far_offset:
        chunk = sector >> geo.chunk_shift
        chunk, fc = divmod(chunk, geo.far_copies)
        dev -= fc * geo.near_copies
        if dev < 0:
            dev += geo.raid_disks
    else:
        while sector >= geo.stride:
            sector -= geo.stride
            if dev < geo.near_copies:
                dev += geo.raid_disks - geo.near_copies
            else:
                dev -= geo.near_copies
        chunk = sector >> geo.chunk_shift
    vchunk = chunk * geo.raid_disks + dev
    vchunk //= geo.near_copies
    return (vchunk << geo.chunk_shift) + offset


CASES = [(n, layout) for layout in ("n2", "n3", "f2", "f3", "o2", "o3") for n in (2, 3, 4, 5, 6, 7)
         if int(layout[1]) <= n]


@pytest.mark.parametrize("n, md_layout", CASES)
def test_every_sector_matches_md_raid10(n, md_layout):
    chunk, rows, data_offset = 1024, 11, 2048
    layout = Raid10Layout(n_disks=n, disk_size=data_offset + rows * chunk, chunk_bytes=chunk,
                          data_offset=data_offset, layout=md_layout)
    kind, copies = md_layout[0], int(md_layout[1])
    geo = Geo(n, copies if kind == "n" else 1, copies if kind != "n" else 1, kind == "o",
              chunk // SECTOR, rows * chunk // SECTOR)
    assert layout.capacity == geo.array_sectors * SECTOR
    for sector in range(layout.capacity // SECTOR):
        (piece,) = layout.copies(sector * SECTOR, SECTOR)
        got = [(e.disk, (e.disk_offset - data_offset) // SECTOR) for e in piece]
        assert got == md_raid10_find_phys(geo, sector)
        for e in piece:
            dev_sector = (e.disk_offset - data_offset) // SECTOR
            assert md_raid10_find_virt(geo, dev_sector, e.disk) == sector
            assert layout.locate(e.disk, e.disk_offset).logical_offset == sector * SECTOR


def test_near2_on_four_disks_is_mirrored_pairs_like_fig_2b():
    layout = Raid10Layout(n_disks=4, disk_size=8 * 4096, chunk_bytes=4096)
    pairs = {tuple(e.disk for e in piece) for piece in layout.copies(0, layout.capacity)}
    assert pairs == {(0, 1), (2, 3)}
    assert layout.survives([0, 2]) and layout.survives([1, 3]) and not layout.survives([2, 3])


def test_near2_on_three_disks_rotates_pairs():
    layout = Raid10Layout(n_disks=3, disk_size=6 * 4096, chunk_bytes=4096)
    pairs = [tuple(e.disk for e in piece) for piece in layout.copies(0, 3 * 4096)]
    assert pairs == [(0, 1), (2, 0), (1, 2)]
    assert layout.redundancy.max_failures == 1


@pytest.mark.parametrize("placement", ["interleaved", "halves"])
def test_chained_declustering_figure_2c(placement):
    layout = ChainedLayout(n_disks=4, disk_size=8 * 4096, chunk_bytes=4096, image_placement=placement)
    for chunk in range(layout.capacity // 4096):
        data, image = layout.copies(chunk * 4096, 4096)[0]
        assert data.disk == chunk % 4 and image.disk == (chunk % 4 + 1) % 4
        stripe = chunk // 4
        if placement == "interleaved":
            # B0 B1 B2 B3 / M3 M0 M1 M2 / B4 ...: the image row right under its data row
            assert (data.disk_offset // 4096, image.disk_offset // 4096) == (2 * stripe, 2 * stripe + 1)
        else:
            assert (data.disk_offset // 4096, image.disk_offset // 4096) == (stripe, 4 + stripe)


@pytest.mark.parametrize("n", [3, 4, 5, 6, 8])
def test_chained_survives_every_set_without_neighbours(n):
    layout = ChainedLayout(n_disks=n, disk_size=4 * n * 4096, chunk_bytes=4096)
    survivable = [mask for mask in range(1 << n)
                  if not any(mask >> d & 1 and mask >> ((d + 1) % n) & 1 for d in range(n))]
    for mask in range(1 << n):
        failed = [d for d in range(n) if mask >> d & 1]
        assert layout.survives(failed) == (mask in survivable)
    assert layout.redundancy.max_failures == n // 2
