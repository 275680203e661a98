"""`raidlab run --resume RESULTS_DIR` continues an interrupted run in its own directory: the
runs that were ok are kept (not run again), the others run, the manifest records the
resumption with both revisions, and the report says so. A virtual-time scenario at quick size
stands in for a long live one (the loop is the same)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(raidlab_cmd, *args):
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([*raidlab_cmd, *args], capture_output=True, text=True, env=env, timeout=600, cwd=REPO)


def test_resume_keeps_the_ok_runs_and_runs_the_rest(raidlab_cmd, tmp_path):
    proc = _run(raidlab_cmd, "run", "scenarios/sa-raid-raw-partitions.toml", "--quick", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    out = Path(proc.stdout.strip())
    runs = sorted((out / "runs").glob("*.json"))
    assert len(runs) == 8
    # As a run killed after five runs, the sixth failed, would leave it:
    kept = {p.name: p.read_text() for p in runs[:5]}
    doc = json.loads(runs[5].read_text())
    runs[5].write_text(json.dumps({**doc, "status": "failed", "error": "killed"}))
    for p in runs[6:]:
        p.unlink()
    man = json.loads((out / "manifest.json").read_text())
    first_started = man["started"]
    (out / "manifest.json").write_text(json.dumps({**man, "status": "interrupted"}))

    refused = _run(raidlab_cmd, "run", "scenarios/sa-raid-raw-partitions.toml", "--resume", str(out))
    assert refused.returncode == 2 and "--resume continues a run as it was planned" in refused.stderr

    proc = _run(raidlab_cmd, "run", "--resume", str(out))
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == out
    assert "5 of 8 runs kept, 3 to run" in proc.stderr
    assert {p.name: p.read_text() for p in sorted((out / "runs").glob("*.json"))[:5]} == kept   # not rerun
    docs = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]
    assert len(docs) == 8 and all(d["status"] == "ok" for d in docs)
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "complete" and man["ok"] == 8 and man["started"] == first_started
    (step,) = man["resumed"]
    assert step["previous_status"] == "interrupted" and len(step["kept"]) == 5
    assert "revision" in step["git"] and "revision" in step["previous_git"]
    assert step["previous_kernel"] == man["kernel"] and step["previous_host"]["cpus"] == man["host"]["cpus"]
    assert man["scenario_file"] == "scenarios/sa-raid-raw-partitions.toml"   # not the directory's copy
    # as if the part before had run on another host kernel: the report names it
    (out / "manifest.json").write_text(json.dumps({**man, "resumed": [{**step, "previous_kernel": "5.10.0-earlier"}]}))
    rep = _run(raidlab_cmd, "report", str(out), "--format", "md")
    assert rep.returncode == 0, rep.stderr
    text = (out / "report" / "report.md").read_text()
    assert "Resumed at" in text and "on host kernel 5.10.0-earlier" in text
    again = _run(raidlab_cmd, "run", "--resume", str(tmp_path / "nothing-here"))
    assert again.returncode == 2
