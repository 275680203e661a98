"""`raidlab run --jobs N`: a virtual-time scenario's runs in N worker processes give the run
files a serial loop gives, but for wall-clock fields and `beside`; a live scenario's runs go
one at a time; an interrupted parallel loop keeps what finished and --resume completes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from test_sweep import TINY

# What may differ between a serial and a parallel loop: the wall clock, and who ran beside.
WALL = {"started", "seconds", "beside", "requests_per_wall_second", "wall_seconds",
        "virtual_seconds_per_wall_second"}
SCENARIO = TINY.replace("repeat = 1", "repeat = 2")


def _without_wall(doc):
    if isinstance(doc, dict):
        return {k: _without_wall(v) for k, v in doc.items() if k not in WALL}
    if isinstance(doc, list):
        return [_without_wall(v) for v in doc]
    return doc


def _run(raidlab_cmd, tmp_path: Path, *args: str) -> Path:
    proc = subprocess.run([*raidlab_cmd, "run", *args], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip().splitlines()[-1])


def _runs(directory: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted((directory / "runs").glob("*.json"))}


def test_parallel_runs_write_what_a_serial_loop_writes(tmp_path, raidlab_cmd):
    path = tmp_path / "tiny.toml"
    path.write_text(SCENARIO)
    serial = _run(raidlab_cmd, tmp_path, str(path), "--results", str(tmp_path / "serial"))
    parallel = _run(raidlab_cmd, tmp_path, str(path), "--results", str(tmp_path / "parallel"), "--jobs", "2")
    one, two = _runs(serial), _runs(parallel)
    assert len(one) == 12 and one.keys() == two.keys()
    for name in one:
        assert one[name]["status"] == "ok", name
        assert _without_wall(one[name]) == _without_wall(two[name]), name
    # the parallel loop says who ran beside each run, and the manifest how many ran at once
    assert any(doc["beside"] for doc in two.values())
    assert all(set(doc["beside"]) <= {n.removesuffix(".json") for n in two} for doc in two.values())
    assert json.loads((parallel / "manifest.json").read_text())["jobs"] == 2
    assert json.loads((parallel / "manifest.json").read_text())["status"] == "complete"


def test_an_interrupted_parallel_loop_keeps_what_finished_and_resume_completes_it(tmp_path, raidlab_cmd):
    path = tmp_path / "tiny.toml"
    path.write_text(SCENARIO.replace("repeat = 2", "repeat = 6"))
    results = tmp_path / "results"
    proc = subprocess.Popen([*raidlab_cmd, "run", str(path), "--results", str(results), "--jobs", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    runs_dir = None
    while time.monotonic() < deadline:  # interrupt once the first runs are written
        found = [p for p in results.glob("*/*/runs/*.json") if not p.name.startswith(".")]  # not a partial
        if found:
            runs_dir = found[0].parent
            break
        time.sleep(0.05)
    assert runs_dir is not None, "no run finished"
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, err
    directory = runs_dir.parent
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    kept = _runs(directory)
    assert 0 < len(kept) < 36 and all(doc["status"] == "ok" for doc in kept.values())
    # no worker is left behind: nothing is left in the session the command led
    time.sleep(0.5)
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _in_session(int(pid), proc.pid)]
    again = _run(raidlab_cmd, tmp_path, "--resume", str(directory), "--jobs", "2")
    assert again == directory
    assert len(_runs(directory)) == 36
    assert json.loads((directory / "manifest.json").read_text())["status"] == "complete"


def _in_session(pid: int, session: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
    return fields[0] != "Z" and int(fields[3]) == session
