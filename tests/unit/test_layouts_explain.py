"""OSTEP-style teaching output: forward and reverse questions, answers on request, every
address said in blocks, and a drawing with its legend."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from raidlab.engine.layouts import create_layout, layout_names
from raidlab.engine.layouts.explain import draw_layout, explain_physical, explain_request

K = 1024


def _raid5(n=4):
    return create_layout("raid5", n_disks=n, disk_size=8 * 4 * K, chunk_bytes=4 * K)


def test_raid5_small_write_is_explained_as_read_modify_write():
    layout = _raid5(5)
    text = explain_request(layout, 4 * 4 * K, 4 * K, write=True)
    lines = text.splitlines()
    assert lines[1] == "LOGICAL WRITE at block 4, 1 block"
    assert ("stripe 1: read-modify-write (RMW reads 2 blocks in 2 member reads, RCW reads 3 blocks in 3 member reads; "
            "the fewer blocks read wins, a tie goes to RCW)") in lines[2]
    # chunk 4: stripe 1, data chunk 0, parity on disk (N-1) - 1 = 3, data on disk 4 (md left-symmetric)
    assert (layout.parity_disk(1), layout.data_disk(1, 0)) == (3, 4)
    assert [line.split()[0:5] for line in lines[3:]] == [
        ["read", "[disk", "3,", "block", "1]"], ["read", "[disk", "4,", "block", "1]"],
        ["write", "[disk", "4,", "block", "1]"], ["write", "[disk", "3,", "block", "1]"]]
    assert lines[3].endswith("old parity") and lines[4].endswith("old data") and lines[6].endswith("parity")


def test_raid5_small_write_on_four_disks_is_explained_as_reconstruct_write():
    """Four members: RMW and RCW both read two chunks; md breaks the tie towards RCW."""
    text = explain_request(_raid5(), 4 * 4 * K, 4 * K, write=True)
    lines = text.splitlines()
    assert ("stripe 1: reconstruct-write (RMW reads 2 blocks in 2 member reads, RCW reads 2 blocks in 2 member reads; "
            "the fewer blocks read wins, a tie goes to RCW)") in lines[2]
    # chunk 4: stripe 1, data on disk 0, parity on disk 2: RCW reads disks 1 and 3
    assert [line.split()[0:3] for line in lines[3:5]] == [["read", "[disk", "1,"], ["read", "[disk", "3,"]]


def test_answers_hidden_on_request_in_both_directions():
    """A question shows nothing of its answer: the forward one no member operation and no
    stripe, the reverse one no logical block and no stripe (which would name the blocks)."""
    layout = _raid5()
    forward = explain_request(layout, 0, 12 * K, write=True, show_answers=False)
    assert forward.splitlines()[-1] == "  Physical reads and writes?" and "disk" not in forward.split("\n", 1)[1]
    assert "stripe" not in forward
    reverse = explain_request(layout, 0, 12 * K, write=True, reverse=True, show_answers=False)
    assert reverse.splitlines()[-1] == "LOGICAL WRITE at block ?, ? blocks"
    assert "stripe" not in reverse and "full-stripe" not in reverse and reverse.count("  write ") == 4
    answered = explain_request(layout, 0, 12 * K, write=True, reverse=True)
    assert answered.splitlines()[-1] == "LOGICAL WRITE at block 0, 3 blocks"
    assert "stripe 0: full-stripe write (no reads)" in answered


def test_degraded_read_shows_the_reconstruction():
    text = explain_request(_raid5(), 5 * 4 * K, 4 * K, failed=[1])
    assert "failed disks: 1" in text
    assert "block 5 rebuilt as XOR of disks 0, 2, 3" in text
    assert "[disk 1," not in text
    hidden = explain_request(_raid5(), 5 * 4 * K, 4 * K, failed=[1], reverse=True, show_answers=False)
    assert "1 block rebuilt as XOR of disks 0, 2, 3" in hidden and "block 5" not in hidden


def test_every_address_says_its_unit():
    """Blocks everywhere (the header says how many bytes one is); a range is first..last;
    a RAID 5 method's cost is in member reads."""
    layout = create_layout("raid5", n_disks=5, disk_size=32 * 64 * K, chunk_bytes=64 * K)
    text = explain_request(layout, 1280 * 4 * K, 16 * 4 * K, write=True, block=4 * K)
    assert text.splitlines()[0].endswith("; 1 block = 4 KiB")
    assert "LOGICAL WRITE at block 1280, 16 blocks" in text and "size:" not in text and "addr" not in text
    ops = [line for line in text.splitlines() if line.startswith(("  read", "  write"))]
    assert len(ops) == 4 and all("blocks 320..335]" in line for line in ops)


def test_reverse_question_for_one_member_address():
    layout = _raid5()
    assert explain_physical(layout, 3, 0) == "disk 3, block 0: parity of stripe 0"
    assert explain_physical(layout, 3, 4 * K) == "disk 3, block 1: data of logical block 3"
    raidx = create_layout("raidx", n_disks=4, disk_size=24 * 4 * K, chunk_bytes=4 * K)
    assert explain_physical(raidx, 3, 12 * 4 * K) == "disk 3, block 12: image of logical block 0 (copy 1)"
    assert explain_physical(raidx, 0, 30 * 4 * K) == "disk 0, block 30: reserved"


def test_drawing_of_raidx_matches_figure_2a():
    raidx = create_layout("raidx", n_disks=4, disk_size=6 * 4 * K, chunk_bytes=4 * K)
    assert draw_layout(raidx).splitlines() == [
        "row   disk 0 disk 1 disk 2 disk 3",
        "0         B0     B1     B2     B3",
        "1         B4     B5     B6     B7",
        "2         B8     B9    B10    B11",
        "3         M9     M6     M3     M0",
        "4        M10     M7     M4     M1",
        "5        M11     M8     M5     M2",
        "one cell = one chunk of 4 KiB: Bn = logical chunk n (data); Mn = a mirror copy or image of chunk n",
    ]


def test_the_legend_names_the_symbols_the_drawing_uses():
    raid5 = draw_layout(_raid5()).splitlines()
    assert raid5[-1] == "one cell = one chunk of 4 KiB: Bn = logical chunk n (data); Pn = the parity of stripe n"
    raidx = create_layout("raidx", n_disks=4, disk_size=16 * 4 * K, chunk_bytes=4 * K)
    assert draw_layout(raidx).splitlines()[-1].endswith("Mn = a mirror copy or image of chunk n; . = unused")


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(layout_names()), st.integers(3, 5), st.data())
def test_every_layout_explains_every_request_consistently(name, n, data):
    if name == "saz":
        opts = {"bandwidth_curves": tuple((10 + d, 8 + d) for d in range(n)), "regions": 2}
    else:
        opts = {"bandwidths": tuple(range(10, 10 + n))} if name.startswith("sa") else {}
    layout = create_layout(name, n_disks=n, disk_size=200 * 4 * K, chunk_bytes=4 * K, **opts)
    blocks = layout.capacity // (4 * K)
    start = data.draw(st.integers(0, blocks - 1))
    count = data.draw(st.integers(1, min(8, blocks - start)))
    write = data.draw(st.booleans())
    text = explain_request(layout, start * 4 * K, count * 4 * K, write=write)
    plan = layout.write_plan(start * 4 * K, count * 4 * K) if write else layout.read_plan(start * 4 * K, count * 4 * K)
    assert text.count("  write ") == (len(plan.writes) if write else 0)
    assert text.count("  read  ") == len(plan.reads)
    # every physical address named answers the reverse question with the right logical addr
    for ext in layout.map(start * 4 * K, count * 4 * K):
        answer = explain_physical(layout, ext.disk, ext.disk_offset)
        assert answer.endswith(f"data of logical block {ext.logical_offset // (4 * K)}")
