"""The owner record of a scratch array: the host directories a native run made beside it are
kept there, so whoever cleans up after a killed run removes them too."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

from raidlab.runners import live
from raidlab.runners.session import SCRATCH_PREFIX


def test_the_owner_record_keeps_every_directory_claimed(tmp_path):
    lab = SimpleNamespace(path=tmp_path)
    live._claim_scratch(lab)
    live._claim_scratch(lab, scratch="/tmp/raidlab-scratch-a")
    live._claim_scratch(lab, mountpoint="/tmp/raidlab-mnt-b")
    owner = json.loads((tmp_path / live.OWNER_FILE).read_text())
    assert owner["pid"] == os.getpid()
    assert owner["scratch"] == "/tmp/raidlab-scratch-a" and owner["mountpoint"] == "/tmp/raidlab-mnt-b"


def test_another_process_s_directories_are_not_carried_over(tmp_path):
    lab = SimpleNamespace(path=tmp_path)
    (tmp_path / live.OWNER_FILE).write_text(json.dumps({"pid": os.getpid() + 1, "scratch": "/tmp/x"}))
    live._claim_scratch(lab, mountpoint="/tmp/raidlab-mnt-c")
    owner = json.loads((tmp_path / live.OWNER_FILE).read_text())
    assert "scratch" not in owner and owner["mountpoint"] == "/tmp/raidlab-mnt-c"


def test_a_killed_session_s_scratch_directory_goes_with_its_files(tmp_path):
    scratch = tmp_path / f"{SCRATCH_PREFIX}abc"
    (scratch / "sub").mkdir(parents=True)
    (scratch / "sub" / "tree.tar").write_bytes(b"x" * 1000)
    live._remove_session_scratch(str(scratch))
    assert not scratch.exists()


def test_a_directory_that_is_not_a_session_s_scratch_is_left_alone(tmp_path):
    other = tmp_path / "results"
    other.mkdir()
    (other / "keep").write_text("data")
    live._remove_session_scratch(str(other))
    assert (other / "keep").read_text() == "data"
