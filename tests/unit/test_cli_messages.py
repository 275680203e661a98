"""Messages a newcomer meets: a bad size names the option it came from, an array that does not
exist is called an array, and an architecture's unknown option lists the valid ones."""

from __future__ import annotations

import os
import subprocess

import pytest


def _run(raidlab_cmd, tmp_path, *args):
    env = {**os.environ, "RAIDLAB_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    return subprocess.run([*raidlab_cmd, *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("args,words", [
    (("create", "x", "--arch", "raid5", "--disks", "3", "--disk-size", "12Q"), "--disk-size: cannot read size '12Q'"),
    (("create", "x", "--arch", "raid5", "--disks", "3", "--chunk", "1000"), "--chunk: size '1000' is not"),
    (("create", "x", "--arch", "raid5", "--disks", "3", "-o", "foo=1"), "its options: algorithm (default"),
    (("status", "nosuch"), "no array named 'nosuch'"),
    (("destroy", "nosuch"), "no array named 'nosuch'"),
    (("sim", "--arch", "raid5", "--disk-model", "hp-c2200a", "--trace", "t", "--format", "raidlab",
      "--chunk", "7X"), "--chunk: cannot read size"),
])
def test_a_bad_input_is_one_line_naming_what_was_wrong(raidlab_cmd, tmp_path, args, words):
    proc = _run(raidlab_cmd, tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
