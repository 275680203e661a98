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


def test_traces_say_their_format_and_a_replay_says_how_to_fit_and_how_far_it_is(raidlab_cmd, tmp_path):
    """`trace stats` and `sim` read the format from a raidlab trace's own header; a trace past
    the end of the volume gets the --device-size that fits; a logical DCD is one drive with
    two members; a long replay reports its progress (a line each 10,000 requests off a terminal)."""
    trace = tmp_path / "h.trace"
    assert _run(raidlab_cmd, tmp_path, "trace", "synth", "--profile", "oltp", "--duration", "7m",
                "-o", str(trace)).returncode == 0
    stats = _run(raidlab_cmd, tmp_path, "trace", "stats", str(trace))
    assert stats.returncode == 0 and "requests" in stats.stdout
    other = tmp_path / "x.trace"
    other.write_text("1 2 3\n")
    proc = _run(raidlab_cmd, tmp_path, "trace", "stats", str(other))
    assert proc.returncode == 2 and "give --format" in proc.stderr
    proc = _run(raidlab_cmd, tmp_path, "sim", "--arch", "dcd", "--disk-model", "hp-c2200a", "-o", "cache=logical",
                "--trace", str(trace))
    assert proc.returncode == 2 and "--device-size 314853376" in proc.stderr, proc.stderr
    fits = tmp_path / "fits.trace"
    assert _run(raidlab_cmd, tmp_path, "trace", "synth", "--profile", "oltp", "--duration", "7m", "--device-size",
                "314853376", "-o", str(fits)).returncode == 0
    proc = _run(raidlab_cmd, tmp_path, "sim", "--arch", "dcd", "--disk-model", "hp-c2200a", "-o", "cache=logical",
                "--trace", str(fits))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("dcd on 1 x hp-c2200a") and "2 members: cache, data" in proc.stdout
    assert "replayed 20,000 requests:" in proc.stderr and "virtual s in" in proc.stderr
