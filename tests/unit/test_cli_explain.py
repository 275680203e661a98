"""`raidlab explain`: the member operations it prints are the engine's own plans, for every
layout; the reverse question hides its answer until --answers and says how to see it; a seed
gives the same numbered quiz every time; a request beyond the default disks gets disks that
hold it; the drawing has a legend; bad input is one line and exit 2."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from raidlab.cli import cli, main
from raidlab.cli.explain import build
from raidlab.engine.layouts import layout_names

K = 1024
OP = re.compile(r"^  (read|write) +\[disk (\d+), blocks? (\d+)(?:\.\.(\d+))?\]")


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["explain", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def printed_ops(text: str) -> list[tuple[str, int, int, int]]:
    out = []
    for line in text.splitlines():
        m = OP.match(line)
        if m:
            first = int(m.group(3))
            out.append((m.group(1), int(m.group(2)), first, int(m.group(4) or first) - first + 1))
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
    assert "failed disks: 1" in text and "block 5 rebuilt as XOR of disks 0, 2, 3" in text
    assert all(disk != 1 for _op, disk, _off, _n in printed_ops(text))


def test_failures_the_layout_cannot_survive_name_the_lost_blocks_and_refuse_writes():
    """Two failed members of raidx: the blocks whose data and image were both on them are
    named as lost, the others are read from what survives; a write to such a block is
    refused with EIO, as the engine refuses it."""
    text = run("raidx", "--lba", "0", "--length", "12", "--failed", "1", "--failed", "3")
    lost = re.findall(r"block (\d+): no surviving copy \(disks 1, 3 failed\)", text)
    layout, _note = build("raidx", 4, 4 * K, None, {})
    expected = [str(b) for b in range(12) if {p.disk for p in layout.copies(b * 4 * K, 4 * K)[0]} <= {1, 3}]
    assert lost == expected and lost
    assert all(disk not in (1, 3) for _op, disk, _off, _n in printed_ops(text))
    refused = run("raidx", "--lba", lost[0], "--write", "--failed", "1", "--failed", "3")
    assert "refused with EIO" in refused and not printed_ops(refused)


def test_the_reverse_question_hides_the_logical_request_until_answers():
    question = run("raid5", "--lba", "4", "--write", "--reverse")
    lines = question.splitlines()
    assert lines[-2:] == ["LOGICAL WRITE at block ?, ? blocks",
                          "To see the answers, run the same command with --answers."]
    assert printed_ops(question) and "stripe" not in question  # the stripe would give the block away
    answer = run("raid5", "--lba", "4", "--write", "--reverse", "--answers")
    assert answer.splitlines()[-1] == "LOGICAL WRITE at block 4, 1 block" and "--answers" not in answer
    assert "stripe 1: reconstruct-write" in answer


def test_a_seeded_quiz_is_numbered_the_same_every_time_and_hides_answers_until_asked():
    quiz = run("raid5", "--seed", "7", "--count", "3")
    assert quiz == run("raid5", "--seed", "7", "--count", "3") != run("raid5", "--seed", "8", "--count", "3")
    assert [line for line in quiz.splitlines() if line.startswith("Question")] == \
        ["Question 1:", "Question 2:", "Question 3:"]
    assert quiz.count("Physical reads and writes?") == 3 and not printed_ops(quiz) and "stripe" not in quiz
    assert quiz.splitlines()[-1] == "To see the answers, run the same command with --answers."
    answered = run("raid5", "--seed", "7", "--count", "3", "--answers")
    assert [line for line in answered.splitlines() if line.startswith(("LOGICAL", "Question"))] == \
        [line for line in quiz.splitlines() if line.startswith(("LOGICAL", "Question"))]
    assert printed_ops(answered) and "--answers" not in answered
    reverse = run("raid5", "--seed", "7", "--count", "3", "--reverse")
    assert reverse.count("LOGICAL") == reverse.count("at block ?, ? blocks") == 3 and "stripe" not in reverse


def test_every_line_says_blocks_or_bytes():
    """The logical request, every member operation and every reconstruction name their unit."""
    text = run("raid5", "--disks", "5", "--lba", "3", "--length", "6", "--failed", "2")
    for line in text.splitlines()[1:]:
        if line.startswith(("LOGICAL", "  read", "  write")) or "rebuilt" in line:
            assert re.search(r"\bblocks?\b", line), line
    assert "size:" not in text and "addr" not in text and "offset" not in text


def test_a_request_beyond_the_default_disks_gets_disks_that_hold_it():
    """Lab 1's command: 16 chunks of 64 KiB per member end at block 1023; the disks grow to
    the next whole 16 chunks that hold the request, and the plan is the engine's."""
    text = run("raid5", "--disks", "5", "--chunk", "64K", "--lba", "1280", "--length", "16", "--write")
    assert text.splitlines()[0].startswith("raid5 on 5 disks of 2 MiB, chunk 64 KiB")
    assert "16 chunks each (the default) would end before the request" in text
    assert "stripe 20: read-modify-write (RMW reads 32 blocks in 2 member reads, RCW reads 48 blocks in 3 member reads" in text
    layout, _note = build("raid5", 5, 64 * K, 2 << 20, {})
    plan = layout.write_plan(1280 * 4 * K, 16 * 4 * K)
    assert printed_ops(text) == [("read", r.disk, r.disk_offset // (4 * K), r.length // (4 * K)) for r in plan.reads] \
        + [("write", e.disk, e.disk_offset // (4 * K), e.length // (4 * K)) for e in plan.writes]
    assert "would end" not in run("raid5", "--lba", "4")  # a request that fits keeps the default


def test_a_disk_size_too_small_for_the_request_says_how_large_it_must_be(capsys):
    assert main(["explain", "raid5", "--disks", "5", "--chunk", "64K", "--lba", "1280", "--length", "16",
                 "--write", "--disk-size", "1M"]) == 2
    err = capsys.readouterr().err
    assert "blocks 1280..1295 are beyond the layout's 1024 blocks" in err and "--disk-size 1344K or more" in err
    # 1344K is the least that holds it: 1344 KiB of 64 KiB chunks x 4 data disks = 5376 KiB >= 1296 blocks
    assert run("raid5", "--disks", "5", "--chunk", "64K", "--lba", "1280", "--length", "16", "--disk-size", "1344K")
    assert main(["explain", "raid5", "--disks", "5", "--chunk", "64K", "--lba", "1280", "--length", "16",
                 "--disk-size", "1280K"]) == 2


def test_the_drawing_has_a_legend_for_its_symbols():
    raidx = run("raidx", "--draw").splitlines()
    assert raidx[-1] == ("one cell = one chunk of 4 KiB: Bn = logical chunk n (data); Mn = a mirror copy or image "
                         "of chunk n; . = unused")
    assert run("raid5", "--draw").splitlines()[-1].endswith("Pn = the parity of stripe n")


def test_sa_layouts_get_example_bandwidths_and_say_so():
    text = run("sa3", "--lba", "0", "--length", "8")
    assert "bandwidths 20,10,..." in text
    assert "virtual device array: disk 0 40 entries, disk 1 20 entries, disk 2 20 entries, disk 3 20 entries" in text
    assert sum(n for op, disk, _off, n in printed_ops(text) if disk == 0) > 2  # the fast disk takes more


@pytest.mark.parametrize("args, words", [
    (["bogus"], "no layout named 'bogus'"),
    (["raid5", "--lba", "999", "--disk-size", "64K"], "beyond the layout's 48 blocks"),
    (["raid5", "--failed", "9"], "--failed 9"),
    (["raid5", "-o", "algorithm"], "is not KEY=VALUE"),
    (["sa1", "-o", "bandwidths=1,2"], "names 2 disks, not 4"),
    (["raid5", "--block", "3K"], "does not divide"),
    (["raid5", "--timing"], "--timing times the request of --lba or a --workload"),
    (["raid5", "--workload", "seq", "--lba", "3"], "--workload generates the requests"),
    (["raid5", "--workload", "rand", "--range", "999999"], "--range 999999 is beyond"),
    (["raid5", "--workload", "rand", "--range", "4", "--size", "5"], "--size 5 blocks does not fit"),
    (["raid5", "--lba", "1", "--timing", "--disk-model", "floppy"], "unknown disk model 'floppy'"),
])
def test_bad_input_is_one_line_and_exit_2(args, words, capsys):
    assert main(["explain", *args]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


TIMED = re.compile(r"^  (read|write) +(\d+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)"
                   r" +([\d.]+) +([\d.]+) +([\d.]+)")


def test_timing_runs_the_plan_on_the_drive_model_reads_before_writes():
    """A small write on five HP C2200A drives: the two old-block reads start at once, the two
    writes when both reads are done; each operation's parts add up to its service, and the
    request ends when the last write does."""
    text = run("raid5", "--disks", "5", "--lba", "4", "--write", "--timing")
    (head,) = [line for line in text.splitlines() if line.startswith("TIMING on hp-c2200a")]
    total = float(re.search(r"took ([\d.]+) ms", head).group(1))
    ops = [m.groups() for m in map(TIMED.match, text.splitlines()) if m]
    assert [(op, int(disk)) for op, disk, *_rest in ops] == [("read", 3), ("read", 4), ("write", 3), ("write", 4)]
    reads_done = max(float(o[-1]) for o in ops if o[0] == "read")
    for op, _disk, _blocks, arrived, queued, controller, seek, rotation, transfer, switches, ended in ops:
        started = float(arrived) + float(queued)
        assert float(ended) - started == pytest.approx(
            sum(map(float, (controller, seek, rotation, transfer, switches))), abs=0.02)
        if op == "write":
            assert float(arrived) >= reads_done - 0.01
            assert float(rotation) > 0  # back to the block it just read: most of a revolution
    assert total == pytest.approx(max(float(o[-1]) for o in ops), abs=0.01)
    per_disk = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"^ +(\d) +(\d+) +[\d.]+ +[\d.]+ ", text, re.M)}
    assert per_disk == {0: 0, 1: 0, 2: 0, 3: 2, 4: 2}


def test_timing_of_a_read_on_another_model():
    text = run("raid0", "--disks", "2", "--lba", "0", "--length", "2", "--read", "--timing",
               "--disk-model", "quantum-fireball-1280s")
    assert "TIMING on quantum-fireball-1280s" in text
    assert len([m for m in map(TIMED.match, text.splitlines()) if m]) == 2


def test_a_mirrored_read_says_which_copy_the_engine_takes_and_what_md_would():
    raid10 = run("raid10", "--disks", "4", "--lba", "2", "--length", "2")
    assert "the engine reads each block from its first surviving copy; md's read_balance" in raid10
    chained = run("chained", "--disks", "4", "--lba", "2")
    assert "first surviving copy)" in chained and "md's" not in chained
    assert "first surviving copy" not in run("raid5", "--lba", "2")


def test_a_generated_workload_as_raid_py_makes_it():
    """--workload seq: requests of --size blocks one after another from block 0 (wrapping in
    --range); rand: at random places; --writes percent of them writes. Shown with their plans."""
    text = run("raid0", "--disks", "4", "--workload", "seq", "--count", "3", "--size", "2", "--range", "4")
    heads = re.findall(r"^LOGICAL (READ|WRITE) at block (\d+), (\d+) blocks", text, re.M)
    assert heads == [("READ", "0", "2"), ("READ", "2", "2"), ("READ", "0", "2")]
    assert printed_ops(text)  # the plans are shown
    writes = run("raid5", "--workload", "rand", "--count", "40", "--writes", "100", "--seed", "3")
    assert writes.count("LOGICAL WRITE") == 40 and "LOGICAL READ" not in writes
    assert run("raid5", "--workload", "rand", "--count", "40", "--seed", "3") == run(
        "raid5", "--workload", "rand", "--count", "40", "--seed", "3")


def test_a_timed_workload_reports_the_run_and_every_disk():
    text = run("raid5", "--disks", "5", "--workload", "rand", "--count", "30", "--writes", "100", "--timing")
    head = re.search(r"30 requests in ([\d.]+) ms, response mean ([\d.]+) ms, max ([\d.]+) ms", text)
    total, mean, worst = map(float, head.groups())
    assert total == pytest.approx(30 * mean, rel=0.01) and worst >= mean  # one outstanding: they add up
    rows = re.findall(r"^ +(\d) +(\d+) +([\d.]+) +([\d.]+) ", text, re.M)
    assert [int(d) for d, *_ in rows] == [0, 1, 2, 3, 4]
    # a small write writes data and parity and reads at most two more blocks (fewer where the
    # engine's stripe cache, like md's, still holds them from an earlier write)
    assert 30 * 2 < sum(int(ops) for _d, ops, *_ in rows) <= 30 * 4
