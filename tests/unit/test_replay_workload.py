"""The live trace replay (raidlab.workloads.replay): the trace it hands its program, the
program itself on a file (open loop: requests leave at their arrival times, response times
counted from arrival), and the refusals of its parameters."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from raidlab import workloads
from raidlab.errors import UsageError
from raidlab.workloads.cprogram import program
from raidlab.workloads.replay import trace_text


def test_the_trace_is_the_synthetic_profile_in_the_programs_format():
    body, count = trace_text("snake", 600, 1, 64 << 20)
    assert body == trace_text("snake", 600, 1, 64 << 20)[0]  # a seed is one trace
    lines = body.splitlines()
    assert len(lines) == count > 100
    times = [float(line.split()[0]) for line in lines]
    assert times == sorted(times) and times[-1] <= 600
    for line in lines:
        _time, op, offset, length = line.split()
        assert op in ("r", "w") and int(offset) % 512 == 0 and int(length) % 512 == 0
        assert int(offset) + int(length) <= 64 << 20
    assert {line.split()[1] for line in lines} == {"r", "w"}


def test_the_program_replays_open_loop_and_reports_response_times():
    binary = program("replay")
    # O_DIRECT needs a file system that has it: beside the tests, not a tmpfs /tmp
    with tempfile.TemporaryDirectory(dir=Path(__file__).parent) as tmp:
        image = Path(tmp) / "disk.img"
        image.write_bytes(b"\0" * (8 << 20))
        trace = Path(tmp) / "trace.txt"
        trace.write_text("".join(f"{i * 0.05:.3f} {'w' if i % 2 else 'r'} {i * 8192} 4096\n" for i in range(20)))
        started = time.monotonic()
        proc = subprocess.run([str(binary), "--device", str(image), "--trace", str(trace), "--threads", "4"],
                              capture_output=True, text=True, timeout=60)
        elapsed = time.monotonic() - started
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["requests"] == 20 and doc["read"]["count"] == doc["write"]["count"] == 10
        assert elapsed >= 0.95 * 0.05 * 19, "the last request waited for its arrival time"
        assert doc["all"]["max_ms"] >= doc["all"]["p99_ms"] >= doc["all"]["p50_ms"] > 0
        assert image.read_bytes()[8192:8192 + 4096] == bytes([1]) * 4096  # request 1 wrote its pattern
        halved = subprocess.run([str(binary), "--device", str(image), "--trace", str(trace), "--scale", "2"],
                                capture_output=True, text=True, timeout=60)
        assert json.loads(halved.stdout)["elapsed_s"] < doc["elapsed_s"]
        trace.write_text("0.5 w 0 4096\n0.1 w 0 4096\n")
        backwards = subprocess.run([str(binary), "--device", str(image), "--trace", str(trace)],
                                   capture_output=True, text=True, timeout=60)
        assert backwards.returncode == 2 and "backwards" in backwards.stderr
        trace.write_text("0.0 w 100 4096\n")
        assert subprocess.run([str(binary), "--device", str(image), "--trace", str(trace)],
                              capture_output=True, text=True, timeout=60).returncode == 2


@pytest.mark.parametrize("params, words", [({"profile": "nosuch"}, "profile"), ({"duration": "soon"}, "duration"),
                                           ({"device_size": "lots"}, "device_size"), ({"threads": 0}, "threads")])
def test_bad_replay_parameters_are_refused(params, words):
    with pytest.raises(UsageError, match=words):
        workloads.get("replay").resolve(params)
