"""raidlab never writes what it did not create: every command that takes a name or an output
path, pointed at a loop device and at a file made outside raidlab, refuses in one line (exit
2) before it writes anything, and the device and the file are as they were.

The loop device and its file are made here with losetup and plain file writes, as a user's
own would be; what is compared afterwards is the file's checksum, the device's first MiB and
the device's backing file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.live]

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results" / "raidx-fig7-andrew" / "20261126-212240"

# {x}: the foreign loop device or file; {results}: a copy of a committed results directory.
COMMANDS = [
    "create {x} --arch raid0 --disks 2 --disk-size 16M",
    "destroy {x}",
    "assemble {x}",
    "status {x}",
    "fail {x} --disk 0",
    "replace {x} --disk 0",
    "lab cleanup {x}",
    "cluster up {x} --nodes 2",
    "cluster serve {x} --address 127.0.0.1",
    "cluster down {x}",
    "crashtest {x} --points 1",
    "trace capture {x} true",
    "trace capture nosuch -o {x} true",
    "trace synth --profile cello --duration 1 -o {x}",
    "report {results} --out {x}",
    "run scenarios/raidx-fig7-andrew.toml --results {x}",
    "demo --results {x}",
    "reliability --crash raid5 --fault raid0 --points 1 --write {x}",
    "faulttest {x}",
    "bench engine --arch raid0 --profile {x}",
    "disk bench hp-c2200a --clock live --image-dir {x}",
]


def digest(path: str, length: int | None = None) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read(length) if length else f.read()).hexdigest()


@pytest.fixture
def foreign(tmp_path):
    """A 16 MiB file of random bytes and a loop device over it, made outside raidlab."""
    path = tmp_path / "theirs.img"
    path.write_bytes(os.urandom(16 << 20))
    device = subprocess.run(["losetup", "--find", "--show", str(path)], capture_output=True, text=True,
                            check=True).stdout.strip()
    try:
        yield device, path
    finally:
        try:
            backing = Path(f"/sys/block/{Path(device).name}/loop/backing_file").read_text().strip()
        except OSError:
            backing = ""
        if backing == str(path):   # only while still ours: a freed number is the next test's
            subprocess.run(["losetup", "-d", device], capture_output=True)


@pytest.mark.parametrize("template", COMMANDS, ids=[c.split(" {")[0].split(" -")[0] for c in COMMANDS])
@pytest.mark.parametrize("target", ["device", "file"])
def test_a_foreign_device_or_file_is_refused_and_left_as_it_was(raidlab_cmd, tmp_path, foreign, template, target):
    device, path = foreign
    results = tmp_path / "results-copy"
    shutil.copytree(RESULTS, results)
    before = (digest(str(path)), digest(device, 1 << 20))
    x = device if target == "device" else str(path)
    argv = template.format(x=x, results=results).split()
    env = {**os.environ, "RAIDLAB_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    proc = subprocess.run([*raidlab_cmd, *argv], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 2, (argv, proc.returncode, proc.stdout[-500:], proc.stderr[-1500:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert (digest(str(path)), digest(device, 1 << 20)) == before
    backing = Path(f"/sys/block/{Path(device).name}/loop/backing_file").read_text().strip()
    assert backing == str(path)


def test_outputs_raidlab_wrote_itself_are_written_again(raidlab_cmd, tmp_path):
    """The guard lets a trace or a report be regenerated over raidlab's own earlier one."""
    env = {**os.environ, "RAIDLAB_HOME": str(tmp_path / "home")}
    trace = tmp_path / "t.trace"
    for _ in range(2):
        proc = subprocess.run([*raidlab_cmd, "trace", "synth", "--profile", "cello", "--duration", "2",
                               "-o", str(trace)], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
    results = tmp_path / "results-copy"
    shutil.copytree(RESULTS, results)
    for _ in range(2):
        proc = subprocess.run([*raidlab_cmd, "report", str(results)], capture_output=True, text=True, env=env,
                              cwd=ROOT, timeout=300)
        assert proc.returncode == 0, proc.stderr
    assert (results / "report" / "report.md").stat().st_size > 0
