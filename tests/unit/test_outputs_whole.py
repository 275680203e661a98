"""A file raidlab writes is whole or absent: written into a partial file beside it and renamed
over it; a partial file a killed writer left is removed by the next write into the directory;
and the interrupt campaign's check of a report tells a whole file from a cut one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from raidlab.campaigns.interrupt import _report_damage, _report_files
from raidlab.outputs import PARTIAL, remove_partials, write_whole


def test_a_failed_write_leaves_the_earlier_file_and_no_partial(tmp_path):
    path = tmp_path / "report.md"
    write_whole(path, lambda p: p.write_text("first\n"))
    assert path.read_text() == "first\n"

    def dies_halfway(partial):
        partial.write_text("sec")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_whole(path, dies_halfway)
    assert path.read_text() == "first\n" and os.listdir(tmp_path) == ["report.md"]


def test_a_partial_file_keeps_the_suffix_and_a_killed_writer_s_is_removed_next_time(tmp_path):
    seen = []
    write_whole(tmp_path / "fig.png", lambda p: (seen.append(p.name), p.write_bytes(b"png")))
    assert seen[0].startswith(".fig" + PARTIAL) and seen[0].endswith(".png")
    # a writer killed with SIGKILL runs no cleanup: its partial file stays
    code = ("import sys, os, signal; sys.path.insert(0, %r); from raidlab.outputs import write_whole; "
            "write_whole(%r, lambda p: (p.write_text('half'), os.kill(os.getpid(), signal.SIGKILL)))"
            % (os.getcwd(), str(tmp_path / "report.html")))
    proc = subprocess.run([sys.executable, "-c", code])
    assert proc.returncode == -signal.SIGKILL
    left = [n for n in os.listdir(tmp_path) if PARTIAL in n]
    assert len(left) == 1 and not (tmp_path / "report.html").exists()
    assert [p.name for p in remove_partials(tmp_path)] == left
    assert sorted(os.listdir(tmp_path)) == ["fig.png"]


def test_the_campaign_s_report_check_finds_a_cut_file_and_a_partial_one(tmp_path):
    report = tmp_path / "report"
    (report / "figures").mkdir(parents=True)
    (report / "report.md").write_text("# whole report\n")
    (report / "figures" / "a.png").write_bytes(b"\x89PNG whole")
    reference = _report_files(tmp_path)
    assert _report_damage(tmp_path, reference) == []
    (report / "report.md").write_text("# whole")
    (report / "figures" / (".b" + PARTIAL + "1.png")).write_bytes(b"\x89P")
    damage = _report_damage(tmp_path, reference)
    assert damage == [f"partial file left: figures/.b{PARTIAL}1.png", "not whole: report.md (7 of 15 bytes)"]
