"""A results directory someone else prepared cannot make root write where it should not.

raidlab runs as root on machines students share, and an instructor may resume or report a
results directory a student handed in. Here a second user (`nobody`) prepares one from a real
run (a virtual-time scenario at quick size) and plants links to a root-owned victim file at
every name a writer could have guessed: the fixed `manifest.json.tmp` and `runs/*.json.tmp`,
the pid-numbered partial names `.NAME.raidlab-partial-PID.SUFFIX` for the pids that come next,
and a report directory with the same. Then root, through the CLI:

* refuses (exit 2, one line) `run --resume` of nobody's directory, `report --out` into
  nobody's directory, a report into nobody's RESULTS/report, and a link given as the
  directory; the victim and nobody's tree are exactly as they were;
* may read nobody's results into a report of its own (--out of root's);
* resumes and reports a root-owned copy (`cp -r`, which copies the links as links): its files
  are written, every planted link still points at the unchanged victim, and a link planted
  at a run file's own name is replaced by the run file.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.live]

REPO = Path(__file__).resolve().parents[2]
SCENARIO = "scenarios/sa-raid-raw-partitions.toml"
NOBODY = "nobody"
VICTIM_TEXT = "root's file: no results here\n"

# Run as nobody with the system's python (the venv may be under a directory nobody cannot
# read): copy ROOT_RUN to RESULTS, mark the run interrupted with its last two runs missing,
# and plant links to VICTIM at the guessable names, with pids from FIRST_PID on.
PREPARE = r"""
import json, os, shutil, sys
root_run, results, victim, first_pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
shutil.copytree(root_run, results, symlinks=True)
man_path = os.path.join(results, "manifest.json")
man = json.load(open(man_path))
man["status"] = "interrupted"
json.dump(man, open(man_path, "w"))
runs = sorted(man["planned_runs"])
for rid in runs[-2:]:
    os.unlink(os.path.join(results, "runs", rid + ".json"))
os.symlink(victim, os.path.join(results, "runs", runs[-1] + ".json"))   # a run file's own name

def plant(directory, stem, suffix):
    os.makedirs(directory, exist_ok=True)
    names = [stem + suffix + ".tmp", stem + ".partial"]
    names += [".%s.raidlab-partial-%d%s" % (stem, pid, suffix) for pid in range(first_pid, first_pid + 400)]
    for name in names:
        path = os.path.join(directory, name)
        if not os.path.lexists(path):
            os.symlink(victim, path)

plant(results, "manifest", ".json")
plant(results, "scenario", ".toml")
for rid in runs:
    plant(os.path.join(results, "runs"), rid, ".json")
for report in (os.path.join(results, "report"), sys.argv[5]):
    for fmt in ("md", "html"):
        plant(report, "report", "." + fmt)
    for metric in ("write_read_mb_s", "write_mb_s", "read_mb_s"):
        plant(os.path.join(report, "figures"), metric, ".png")
"""


def _raidlab(raidlab_cmd, *args):
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([*raidlab_cmd, *args], capture_output=True, text=True, env=env, timeout=600, cwd=REPO)


def _tree(top: Path) -> dict[str, tuple]:
    """What is in `top`, without following a link: kind, size, mtime, link target."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = os.lstat(path)
            seen[str(path.relative_to(top))] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_uid,
                                                os.readlink(path) if stat.S_ISLNK(st.st_mode) else None)
    return seen


def _links_to(top: Path, victim: Path) -> list[Path]:
    return [p for p in top.rglob("*") if p.is_symlink() and os.readlink(p) == str(victim)]


@pytest.fixture
def arena():
    """/tmp/raidlab-security-*/ (root's, 0755) with a root-owned victim file and a directory
    of nobody's; removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="raidlab-security-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        victim = base / "victim"
        victim.write_text(VICTIM_TEXT)
        os.chmod(victim, 0o644)
        student = base / "student"
        student.mkdir()
        shutil.chown(student, NOBODY)
        yield base, victim, student
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_directory_nobody_prepared_cannot_make_root_write_elsewhere(arena, raidlab_cmd):
    base, victim, student = arena
    made = _raidlab(raidlab_cmd, "run", SCENARIO, "--quick", "--results", str(base / "made"))
    assert made.returncode == 0, made.stderr
    root_run = Path(made.stdout.strip())
    results, student_out = student / "results", student / "out"
    first_pid = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    prepare = subprocess.run(["runuser", "-u", NOBODY, "--", "/usr/bin/python3", "-c", PREPARE, str(root_run),
                              str(results), str(victim), str(first_pid), str(student_out)],
                             capture_output=True, text=True, timeout=120)
    assert prepare.returncode == 0, prepare.stderr
    assert os.lstat(results).st_uid != 0 and len(_links_to(student, victim)) > 1000
    before = _tree(student)

    refusals = [
        (("run", "--resume", str(results)), "belongs to nobody"),
        (("report", str(results), "--out", str(student_out)), "belongs to nobody"),
        (("report", str(results)), "belongs to nobody"),  # RESULTS/report, inside nobody's directory
    ]
    link_to_theirs, link_to_ours = base / "theirs-link", base / "ours-link"
    link_to_theirs.symlink_to(results)
    link_to_ours.symlink_to(root_run)
    refusals += [(("run", "--resume", str(link)), "symbolic link") for link in (link_to_theirs, link_to_ours)]
    refusals += [(("report", str(root_run), "--out", str(link_to_ours)), "symbolic link")]
    for args, why in refusals:
        proc = _raidlab(raidlab_cmd, *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        message = proc.stderr.strip()
        assert why in message and "\n" not in message and "Traceback" not in message, (args, message)
        if why.startswith("belongs"):
            assert "copy it first" in message
    assert victim.read_text() == VICTIM_TEXT and os.lstat(victim).st_uid == 0
    assert _tree(student) == before   # nothing written, moved or removed in nobody's tree

    # A root-owned copy keeps the planted links (cp -r copies links as links), now root's.
    copy = base / "copy"
    subprocess.run(["cp", "-r", str(results), str(copy)], check=True)
    planted = {p: os.readlink(p) for p in _links_to(copy, victim)}
    last_run = sorted(json.loads((copy / "manifest.json").read_text())["planned_runs"])[-1]
    run_file_link = copy / "runs" / f"{last_run}.json"
    assert run_file_link in planted and (copy / "manifest.json.tmp") in planted

    # Reading nobody's results is allowed, into a directory of root's; what raidlab reads there
    # is read as it wrote it: the link at a run file's name is refused, not followed.
    mine = base / "report-of-theirs"
    rep = _raidlab(raidlab_cmd, "report", str(results), "--out", str(mine), "--format", "md")
    assert rep.returncode == 2 and f"runs/{last_run}.json is a symbolic link" in rep.stderr, rep.stderr
    assert not mine.exists()
    subprocess.run(["runuser", "-u", NOBODY, "--", "rm", str(results / "runs" / f"{last_run}.json")], check=True)
    before = _tree(student)
    rep = _raidlab(raidlab_cmd, "report", str(results), "--out", str(mine), "--format", "md")
    assert rep.returncode == 0, rep.stderr
    assert (mine / "report.md").read_text().startswith("#") and any((mine / "figures").glob("[!.]*.png"))
    assert _tree(student) == before and victim.read_text() == VICTIM_TEXT
    resumed = _raidlab(raidlab_cmd, "run", "--resume", str(copy))
    assert resumed.returncode == 0, resumed.stderr
    assert "6 of 8 runs kept, 2 to run" in resumed.stderr
    report = _raidlab(raidlab_cmd, "report", str(copy))
    assert report.returncode == 0, report.stderr

    assert victim.read_text() == VICTIM_TEXT
    assert len(list((copy / "report" / "figures").glob("[!.]*.png"))) == 3
    man = json.loads((copy / "manifest.json").read_text())
    assert man["status"] == "complete" and man["ok"] == 8
    for written in [copy / "manifest.json", run_file_link, copy / "report" / "report.md",
                    copy / "report" / "report.html", *(copy / "report" / "figures").glob("[!.]*.png")]:
        st = os.lstat(written)
        assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and st.st_size > 0, written
    assert json.loads(run_file_link.read_text())["status"] == "ok"
    still = {p: os.readlink(p) for p in _links_to(copy, victim)}
    assert still == {p: t for p, t in planted.items() if p != run_file_link}
    assert not [p for p in copy.rglob("*") if ".raidlab-partial-" in p.name and not p.is_symlink()]
