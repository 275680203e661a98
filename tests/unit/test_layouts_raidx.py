"""RAID-x orthogonal striping and mirroring (Hwang, Jin & Ho, §3, Fig. 2a, eqs. (1)-(2))."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raidlab.engine.layouts.raidx import RaidxLayout

CHUNK = 4096


def _layout(n, rows):
    return RaidxLayout(n_disks=n, disk_size=rows * CHUNK, chunk_bytes=CHUNK)


def _places(layout):
    for chunk in range(layout.capacity // CHUNK):
        data, image = layout.copies(chunk * CHUNK, CHUNK)[0]
        yield chunk, data, image


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 9), st.integers(0, 30))
def test_block_and_image_never_share_a_disk_and_halves_are_respected(n, extra_rows):
    layout = _layout(n, 2 * (n - 1) + extra_rows)
    half = layout.chunks_per_disk // 2
    for chunk, data, image in _places(layout):
        assert data.disk != image.disk
        assert data.role == "data" and image.role == "image"
        assert (data.disk_offset // CHUNK) < half <= (image.disk_offset // CHUNK)
        # data striped horizontally like RAID0 in the upper half
        assert (data.disk, data.disk_offset // CHUNK) == (chunk % n, chunk // n)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 9), st.integers(0, 30))
def test_images_of_one_mirror_group_are_clustered_on_one_disk(n, extra_rows):
    layout = _layout(n, 2 * (n - 1) + extra_rows)
    groups: dict[int, list] = {}
    for chunk, _data, image in _places(layout):
        groups.setdefault(chunk // (n - 1), []).append(image)
    for group, images in groups.items():
        assert len(images) == n - 1
        assert len({i.disk for i in images}) == 1, f"group {group} images on several disks"
        rows = [i.disk_offset // CHUNK for i in images]
        assert rows == list(range(rows[0], rows[0] + n - 1)), "images of a group are not consecutive"
    # every data stripe (row of n blocks) has its images on exactly two disks (n >= 3)
    if n >= 3:
        for row in range(layout.data_rows):
            disks = {image.disk for chunk, _d, image in _places(layout) if chunk // n == row}
            assert len(disks) == 2


def test_figure_2a_four_disks():
    # §3.1: "B0, B1, and B2 ... Their images, M0, M1, and M2, are stored in Disk 3. Similarly,
    # the images of the second stripe, B3, B4, and B5, are mapped to Disk 2, etc."
    layout = _layout(4, 24)
    image_disks = [image.disk for _c, _d, image in _places(layout)]
    assert image_disks[:12] == [3, 3, 3, 2, 2, 2, 1, 1, 1, 0, 0, 0]
    assert [d.disk for _c, d, _i in _places(layout)][:4] == [0, 1, 2, 3]
    # M0..M2 in consecutive rows starting at b/2
    rows = [image.disk_offset // CHUNK for _c, _d, image in _places(layout)]
    assert rows[:3] == [12, 13, 14] and rows[12:15] == [15, 16, 17]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_equations_1_and_2_as_printed(n):
    b = 2 * (n - 1) * 3
    layout = _layout(n, b)
    for d, _data, image in _places(layout):
        i = n - 1 - (d // (n - 1)) % n                                  # (1)
        j = b // 2 + (d // ((n - 1) * n)) * (n - 1) + d % (n - 1)        # (2)
        assert (image.disk, image.disk_offset // CHUNK) == (i, j)


def test_capacity_rounds_data_rows_to_whole_image_cycles():
    layout = _layout(4, 25)  # half = 12 rows, already a multiple of 3
    assert layout.data_rows == 12 and layout.capacity == 48 * CHUNK
    layout = _layout(4, 22)  # half = 11 -> 9 rows of data
    assert layout.data_rows == 9 and layout.capacity == 36 * CHUNK
    assert layout.locate(0, 9 * CHUNK).role == "unused"
    assert layout.locate(0, 11 * CHUNK).role == "image"


def test_write_plan_marks_image_writes_for_background_writing():
    layout = _layout(4, 24)
    plan = layout.write_plan(0, 3 * CHUNK)  # one mirror group: B0-B2 -> M0-M2 on disk 3
    data = [w for w in plan.writes if w.role == "data"]
    images = [w for w in plan.writes if w.role == "image"]
    assert [w.disk for w in data] == [0, 1, 2]
    # the three images are contiguous on disk 3, so they go out as one request
    assert [(w.disk, w.disk_offset, w.length) for w in images] == [(3, 12 * CHUNK, 3 * CHUNK)]
    assert layout.redundancy.any_failures == 1 and layout.redundancy.max_failures == 1
