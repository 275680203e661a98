"""`raidlab explain`: the member operations it prints are the engine's own plans, for every
layout; the reverse question hides its answer until --answers; a seed gives the same quiz
every time; bad input is one line and exit 2."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from raidlab.cli import cli, main
from raidlab.cli.explain import build
from raidlab.engine.layouts import layout_names

K = 1024
OP = re.compile(r"^  (read|write) +\[disk (\d+), offset (\d+)\](?: x(\d+))?")


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["explain", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def printed_ops(text: str) -> list[tuple[str, int, int, int]]:
    out = []
    for line in text.splitlines():
        m = OP.match(line)
        if m:
            out.append((m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4) or 1)))
    return out


@pytest.mark.parametrize("name", layout_names())
@pytest.mark.parametrize("write", [False, True])
def test_every_layout_prints_the_engine_s_own_plan(name, write):
    layout, _note = build(name, 4, 4 * K, None, {})
    blocks = layout.capacity // (4 * K)
    lba, length = blocks // 3, min(6, blocks - blocks // 3)
    text = run(name, "--lba", str(lba), "--length", str(length), *(["--write"] if write else []))
    plan = (layout.write_plan if write else layout.read_plan)(lba * 4 * K, length * 4 * K)
    expected = [("read", r.disk, r.disk_offset // (4 * K), r.length // (4 * K)) for r in plan.reads]
    if write:
        expected += [("write", e.disk, e.disk_offset // (4 * K), e.length // (4 * K)) for e in plan.writes]
    assert printed_ops(text) == expected and expected


def test_a_degraded_raid5_read_is_rebuilt_from_the_other_disks():
    text = run("raid5", "--lba", "5", "--failed", "1")
    assert "failed disks: 1" in text and "rebuilt as XOR of disk 0, disk 2, disk 3" in text
    assert all(disk != 1 for _op, disk, _off, _n in printed_ops(text))


def test_failures_the_layout_cannot_survive_name_the_lost_blocks_and_refuse_writes():
    """Two failed members of raidx: the blocks whose data and image were both on them are
    named as lost, the others are read from what survives; a write to such a block is
    refused with EIO, as the engine refuses it."""
    text = run("raidx", "--lba", "0", "--length", "12", "--failed", "1", "--failed", "3")
    lost = re.findall(r"addr (\d+): no surviving copy \(disks 1, 3 failed\)", text)
    layout, _note = build("raidx", 4, 4 * K, None, {})
    expected = [str(b) for b in range(12) if {p.disk for p in layout.copies(b * 4 * K, 4 * K)[0]} <= {1, 3}]
    assert lost == expected and lost
    assert all(disk not in (1, 3) for _op, disk, _off, _n in printed_ops(text))
    refused = run("raidx", "--lba", lost[0], "--write", "--failed", "1", "--failed", "3")
    assert "refused with EIO" in refused and not printed_ops(refused)


def test_the_reverse_question_hides_the_logical_request_until_answers():
    question = run("raid5", "--lba", "4", "--write", "--reverse")
    assert question.splitlines()[-1] == "LOGICAL WRITE from addr:? size:?" and printed_ops(question)
    answer = run("raid5", "--lba", "4", "--write", "--reverse", "--answers")
    assert answer.splitlines()[-1] == "LOGICAL WRITE from addr:4 size:4096"


def test_a_seeded_quiz_is_the_same_every_time_and_hides_answers_until_asked():
    quiz = run("raid5", "--seed", "7", "--count", "3")
    assert quiz == run("raid5", "--seed", "7", "--count", "3") != run("raid5", "--seed", "8", "--count", "3")
    assert quiz.count("Physical reads/writes?") == 3 and not printed_ops(quiz)
    answered = run("raid5", "--seed", "7", "--count", "3", "--answers")
    assert [line for line in answered.splitlines() if line.startswith("LOGICAL")] == \
        [line for line in quiz.splitlines() if line.startswith("LOGICAL")]
    assert printed_ops(answered)


def test_the_drawing_of_raidx_has_data_rows_then_image_rows():
    text = run("raidx", "--draw", "--disk-size", "24K")
    assert text.splitlines()[1:4] == ["row   disk 0 disk 1 disk 2 disk 3", "0         B0     B1     B2     B3",
                                      "1         B4     B5     B6     B7"]
    assert "M0" in text
    assert run("raidx", "--draw", "--rows", "2").splitlines()[-1] == "... (14 more rows)"  # 16 rows by default


def test_sa_layouts_get_example_bandwidths_and_say_so():
    text = run("sa3", "--lba", "0", "--length", "8")
    assert "bandwidths 20,10,..." in text
    assert sum(n for op, disk, _off, n in printed_ops(text) if disk == 0) > 2  # the fast disk takes more


@pytest.mark.parametrize("args, words", [
    (["bogus"], "no layout named 'bogus'"),
    (["raid5", "--lba", "999"], "beyond the layout's 48 blocks"),
    (["raid5", "--failed", "9"], "--failed 9"),
    (["raid5", "-o", "algorithm"], "is not KEY=VALUE"),
    (["sa1", "-o", "bandwidths=1,2"], "names 2 disks, not 4"),
    (["raid5", "--block", "3K"], "does not divide"),
])
def test_bad_input_is_one_line_and_exit_2(args, words, capsys):
    assert main(["explain", *args]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
