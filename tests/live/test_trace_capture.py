"""`raidlab trace capture NAME -- COMMAND` on a live raid5 lab: the trace holds exactly the
requests the volume received (dd with O_DIRECT: known offsets and sizes), the capture stops
and the volume is served unwrapped again, errors are one line, and --compare replays it."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from raidlab.traces.formats import TraceReader

pytestmark = [pytest.mark.root, pytest.mark.live]


@pytest.fixture
def lab(raidlab_cmd, tmp_path):
    env = {**os.environ, "RAIDLAB_HOME": str(tmp_path / "home"), "COLUMNS": "400"}

    def rl(*args, check=True):
        proc = subprocess.run([*raidlab_cmd, *args], capture_output=True, text=True, env=env, timeout=600)
        if check and proc.returncode != 0:
            raise AssertionError(f"raidlab {' '.join(args)} -> {proc.returncode}\n{proc.stderr}")
        return proc

    rl("create", "cap", "--arch", "raid5", "--disks", "3", "--disk-model", "none", "--disk-size", "32M")
    yield rl
    rl("destroy", "cap", check=False)


def test_capture_records_the_volumes_requests_and_compares(lab, tmp_path):
    out = tmp_path / "dd.trace"
    done = lab("trace", "capture", "cap", "-o", str(out), "--json", "--compare", "--",
               "dd", "if=/dev/zero", "of={device}", "bs=8k", "count=40", "seek=10", "oflag=direct")
    doc = json.loads(done.stdout[done.stdout.index("{"):])
    requests = list(TraceReader(out, "raidlab"))
    writes = [r for r in requests if r.op == "write"]
    assert [(r.offset, r.length) for r in writes] == [((10 + i) * 8192, 8192) for i in range(40)]
    assert doc["rc"] == 0 and doc["live"]["requests"] == len(requests)
    assert doc["live"]["response"]["write"]["count"] == 40
    assert doc["virtual"]["requests"] == len(requests)
    assert doc["comparison"][0]["op"] == "write" and doc["comparison"][0]["count_virtual"] == 40
    # Stopped: a second capture can start, and sees only its own command's requests.
    again = tmp_path / "again.trace"
    lab("trace", "capture", "cap", "-o", str(again), "--", "dd", "if={device}", "of=/dev/null", "bs=4k",
        "count=3", "iflag=direct")
    reads = [r for r in TraceReader(again, "raidlab") if r.op == "read"]
    assert [(r.offset, r.length) for r in reads] == [(0, 4096), (4096, 4096), (8192, 4096)]


def test_capture_errors_are_one_line(lab, tmp_path):
    missing = lab("trace", "capture", "nosuch", "--", "true", check=False)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    bad_dir = lab("trace", "capture", "cap", "-o", str(tmp_path / "no" / "x.trace"), "--", "true", check=False)
    assert bad_dir.returncode == 2
    assert bad_dir.stderr.strip().splitlines() == [
        f"raidlab: error: cannot write the trace {tmp_path / 'no' / 'x.trace'}: No such file or directory; "
        "give a file in an existing directory you can write to"]
