"""`raidlab run` + `raidlab report` for real: engine arrays on this host, ext4, PostMark.

A small scenario runs end to end natively (create -> mkfs.ext4 -> mount -> postmark -> umount
-> destroy per run); one architecture is made too small for the PostMark file set on purpose,
so its runs really fail (ENOSPC) and must be recorded as failed while the others go on. The
report is drawn from those results. Ctrl-C in the middle of a run must destroy the current
array, keep the finished run files and exit 130. Leftovers are checked with
tests/live/lab_leftovers.py (losetup -a, /proc/mounts), not with raidlab's own scanning.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from lab_leftovers import loops_of, mounts_of

pytestmark = [pytest.mark.root, pytest.mark.live]

SCENARIO = """
[scenario]
id = "live-run-report"
title = "live test: PostMark on engine raid0 vs raid5"
kind = "live"
runner = "native"
repeat = {repeat}

[[arch]]
label = "raid0"
arch = "raid0"
disks = 3
disk_model = "none"
disk_size = "48M"
chunk = "64K"

[[arch]]
label = "raid5"
arch = "raid5"
disks = 3
disk_model = "none"
disk_size = "48M"
chunk = "64K"
{extra_arch}

[workload]
name = "postmark"
params = {{ files = {files}, transactions = {transactions}, min_size = 5000, max_size = 10000 }}
mkfs_options = ["-b", "1024"]

[[case]]
name = "small"

[[paper]]
arch = "raid5"
case = "small"
metric = "tps"
value = 561
unit = "tx/s"
note = "VC-RAID Table 2 (a different machine; only shown beside ours)"

[[claim]]
id = "raid0-over-raid5"
text = "RAID 0 beats RAID 5"
kind = "order"
metric = "tps"
case = "small"
order = ["raid0", "raid5"]

[[claim]]
id = "ratio"
text = "RAID 0 / RAID 5 between 0.5 and 100"
kind = "ratio"
metric = "tps"
case = "small"
num = "raid0"
den = "raid5"
min = 0.5
max = 100

[[claim]]
id = "tiny-vs-raid5"
text = "the tiny array is never measured"
kind = "ratio"
metric = "tps"
case = "small"
num = "tiny"
den = "raid5"
min = 1
"""

TINY = """
[[arch]]
label = "tiny"
arch = "raid0"
disks = 2
disk_model = "none"
disk_size = "2M"
chunk = "64K"
"""


def _scenario(tmp_path: Path, *, repeat: int, files: int, transactions: int, tiny: bool) -> Path:
    path = tmp_path / "live-run-report.toml"
    text = SCENARIO.format(repeat=repeat, files=files, transactions=transactions, extra_arch=TINY if tiny else "")
    if not tiny:  # the tiny claim refers to a label that must exist
        text = text[:text.index('[[claim]]\nid = "tiny-vs-raid5"')]
    path.write_text(text)
    return path


def _no_leftovers(home: Path, workload_mounts: set[str] = frozenset()) -> None:
    labs = home / "labs"
    assert not labs.exists() or not any(labs.iterdir()), f"labs left: {list(labs.iterdir())}"
    assert loops_of(home) == []
    assert mounts_of(home) == []
    mounted = {line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()}
    for target in workload_mounts:
        assert target not in mounted and not os.path.exists(target)


def _workload_mounts(home: Path) -> set[str]:
    """Mount points of file systems on the lab's loop devices (the workload's ext4)."""
    loops = {line.split(":")[0] for line in loops_of(home)}
    return {line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
            if line.split()[0] in loops}


def test_run_then_report(tmp_path, raidlab_cmd):
    scenario = _scenario(tmp_path, repeat=2, files=600, transactions=3000, tiny=True)
    home, results = tmp_path / "home", tmp_path / "results"
    proc = subprocess.run(raidlab_cmd + ["run", str(scenario), "--home", str(home), "--results", str(results)],
                          capture_output=True, text=True, timeout=900)
    # the tiny array's runs fail: exit 1, but every run is recorded
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = Path(proc.stdout.strip().splitlines()[-1])
    assert out.parent == results / "live-run-report"
    _no_leftovers(home)

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["runner"] == "native"
    assert manifest["ok"] == 4 and manifest["failed"] == 2
    assert manifest["kernel"] and manifest["git"]["revision"] and manifest["tools"]["mkfs.ext4"]
    assert manifest["planned_runs"][:3] == ["raid0--small--r1", "raid5--small--r1", "tiny--small--r1"]
    assert (out / "scenario.toml").read_text() == scenario.read_text()

    runs = {p.stem: json.loads(p.read_text()) for p in (out / "runs").glob("*.json")}
    assert sorted(runs) == sorted(manifest["planned_runs"])
    for run_id, doc in runs.items():
        if run_id.startswith("tiny"):
            assert doc["status"] == "failed" and doc["error"]
            continue
        assert doc["status"] == "ok", doc.get("error")
        assert doc["workload"] == "postmark" and doc["metrics"]["tps"]["value"] > 0
        assert doc["params"]["files"] == 600
        argvs = [c["argv"][0] for c in doc["setup_commands"]]
        assert argvs[:1] == ["mkfs.ext4"] and "mount" in argvs and argvs[-1] == "umount"
        assert all(c["rc"] == 0 for c in doc["setup_commands"])
        assert doc["array"]["arch"] == doc["arch_id"]
        # the array's statistics after umount travel with the result: PostMark's writes reached
        # the members
        status = doc["array_status"]
        assert status["spec"]["arch"] == doc["arch_id"] and status["kind"] == "engine"
        members = status["statistics"]["members"]
        assert len(members) == 3 and all(m["writes"] > 0 for m in members), members
        # and the account taken before the workload (after mkfs and mount): PostMark's own
        # writes are the difference
        before = doc["array_status_before"]["statistics"]["members"]
        assert [m["name"] for m in before] == [m["name"] for m in members]
        assert all(0 < b["writes"] < m["writes"] for b, m in zip(before, members)), (before, members)

    rep = subprocess.run(raidlab_cmd + ["report", str(out.parent)], capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr
    md_path, html_path = (Path(line) for line in rep.stdout.split())
    md = md_path.read_text()
    tps = {k: runs[k]["metrics"]["tps"]["value"] for k in runs if not k.startswith("tiny")}
    raid0 = (tps["raid0--small--r1"] + tps["raid0--small--r2"]) / 2
    raid5 = (tps["raid5--small--r1"] + tps["raid5--small--r2"]) / 2
    # the claim table carries the measured ratio of the means and the right verdict
    assert f"small: raid0/raid5 = {raid0 / raid5:.2f}" in md
    def verdict(claim_id: str) -> str:  # the claim table's verdict cell
        return next(line for line in md.splitlines() if line.startswith(f"| {claim_id} |")).split(" | ")[1]

    assert (verdict("ratio") == "✓ holds") == (0.5 <= raid0 / raid5 <= 100)
    assert (verdict("raid0-over-raid5") == "✓ holds") == (raid0 > raid5)
    assert verdict("tiny-vs-raid5") == "? not measured"
    assert "## Failed runs" in md and "tiny--small--r1" in md
    assert "| 561 |" in md  # the paper's number beside ours
    assert (md_path.parent / "figures" / "tps.png").stat().st_size > 1000
    assert "<img" in html_path.read_text()


def test_report_refuses_other_scenario(tmp_path, raidlab_cmd):
    scenario = _scenario(tmp_path, repeat=1, files=100, transactions=200, tiny=False)
    home, results = tmp_path / "home", tmp_path / "results"
    proc = subprocess.run(raidlab_cmd + ["run", str(scenario), "--only", "raid0", "--home", str(home),
                                         "--results", str(results)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = Path(proc.stdout.strip())
    other = tmp_path / "other.toml"
    other.write_text(scenario.read_text().replace('id = "live-run-report"', 'id = "another"'))
    rep = subprocess.run(raidlab_cmd + ["report", str(out), "--scenario", str(other)],
                         capture_output=True, text=True, timeout=120)
    assert rep.returncode == 2
    assert len(rep.stderr.strip().splitlines()) == 1
    assert "live-run-report" in rep.stderr and "another" in rep.stderr and str(other) in rep.stderr
    assert not (out / "report").exists()
    rep = subprocess.run(raidlab_cmd + ["report", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert rep.returncode == 2 and "not a results directory" in rep.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_destroys_current_array_and_keeps_finished_runs(tmp_path, raidlab_cmd, signum, terminal_sigint):
    scenario = _scenario(tmp_path, repeat=3, files=2000, transactions=40000, tiny=False)
    home, results = tmp_path / "home", tmp_path / "results"
    proc = subprocess.Popen(raidlab_cmd + ["run", str(scenario), "--home", str(home), "--results", str(results)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=terminal_sigint)
    lines: list[str] = []
    first_ok = threading.Event()

    def read():
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("ok: "):
                first_ok.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert first_ok.wait(600), "".join(lines)[-3000:]
        # the second run is under way: its array exists and is mounted
        deadline = time.monotonic() + 120
        seen: set[str] = set()
        while not seen and time.monotonic() < deadline:
            seen = _workload_mounts(home)
            time.sleep(0.2)
        assert seen, "second run never mounted its array"
        time.sleep(2)  # PostMark is running on it
        proc.send_signal(signum)
        # Not communicate(): it would read stderr too, racing the reader thread for the
        # "interrupted by" line. stdout carries only the results path.
        proc.wait(timeout=300)
        stdout = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    assert proc.returncode == 128 + signum, "".join(lines)[-3000:]
    assert f"interrupted by {signal.Signals(signum).name}" in "".join(lines)
    out = Path(stdout.strip())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    kept = sorted(p.stem for p in (out / "runs").glob("*.json"))
    assert kept and kept[0] == "raid0--small--r1"
    assert json.loads((out / "runs" / "raid0--small--r1.json").read_text())["status"] == "ok"
    assert len(kept) < len(manifest["planned_runs"])
    try:
        _no_leftovers(home, seen)
    except AssertionError as exc:  # what the run was doing when the signal came
        raise AssertionError(f"{exc}\n{''.join(lines)[-3000:]}") from exc
    assert not list(home.glob("labs/*"))
    assert os.path.isdir(out / "runs")


TPS_SCENARIO = """
[scenario]
id = "live-tps-lines"
title = "live test: TPS against clients"
kind = "live"
runner = "native"
repeat = 1

[[arch]]
label = "raid0"
arch = "raid0"
disks = 2
disk_model = "none"
disk_size = "48M"
chunk = "64K"

[workload]
name = "tps"
params = { clients = [1, 2], mixes = 1, mix_tx = 4, dataset_mb = 8, segments = 2 }

[[case]]
name = "w0.5"
params = { write_ratio = 0.5 }

[report]
style = "lines"
metrics = ["tps_c{x}"]
x = "clients"
panel = "write_ratio"
"""


def test_tps_lines_report(tmp_path, raidlab_cmd):
    """A line figure of the TPS driver's per-client metrics (tps_c1, tps_c2 from one run)."""
    from raidlab.report.render import _fmt

    scenario = tmp_path / "tps.toml"
    scenario.write_text(TPS_SCENARIO)
    home, results = tmp_path / "home", tmp_path / "results"
    proc = subprocess.run(raidlab_cmd + ["run", str(scenario), "--home", str(home), "--results", str(results)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = Path(proc.stdout.strip())
    doc = json.loads((out / "runs" / "raid0--w0.5--r1.json").read_text())
    _no_leftovers(home)
    rep = subprocess.run(raidlab_cmd + ["report", str(out), "--format", "md"], capture_output=True, text=True,
                         timeout=300)
    assert rep.returncode == 0, rep.stderr
    md = Path(rep.stdout.strip()).read_text()
    for n in (1, 2):
        value = doc["metrics"][f"tps_c{n}"]["value"]
        row = next(line for line in md.splitlines() if line.startswith(f"| tps_c{n} | w0.5 | raid0 |"))
        assert value > 0 and f"| {_fmt(value)} (n=1) |" in row
    assert (out / "report" / "figures" / "tps_c_by_clients.png").stat().st_size > 1000
    assert not (out / "report" / "report.html").exists()


def test_missing_workload_program_stops_the_scenario(tmp_path, raidlab_cmd):
    """A program the runner lacks (here: PATH without bonnie++, so the driver's own
    `command -v` check on the runner fails, as it would in a VM image without it) stops the
    whole scenario after the first run, which is recorded as failed; one error line naming
    the program and its package, exit 2, the array destroyed."""
    import shutil

    scenario = _scenario(tmp_path, repeat=2, files=100, transactions=200, tiny=False)
    text = scenario.read_text().replace('name = "postmark"', 'name = "bonnie"')
    text = text.replace("params = { files = 100, transactions = 200, min_size = 5000, max_size = 10000 }",
                        "params = { size_mb = 8, seeks = 100 }")
    scenario.write_text(text[:text.index("[[paper]]")])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for prog in ("sh", "uname", "mkdir", "rm"):
        (bin_dir / prog).symlink_to(shutil.which(prog))
    home, results = tmp_path / "home", tmp_path / "results"
    proc = subprocess.run(raidlab_cmd + ["run", str(scenario), "--home", str(home), "--results", str(results)],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PATH=str(bin_dir)))
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("raidlab: error: ") and "'bonnie++' not found" in last and "apt-get install bonnie++" in last
    out = Path(proc.stdout.strip())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "stopped: missing program"
    runs = [json.loads(p.read_text()) for p in (out / "runs").glob("*.json")]
    assert len(runs) == 1 and runs[0]["status"] == "failed" and runs[0]["error_type"] == "MissingToolError"
    _no_leftovers(home)


FILESYSTEMS_SCENARIO = """
[scenario]
id = "live-run-filesystems"
title = "live test: the untar workload on ext4 and on ext2"
kind = "live"
runner = "native"
repeat = 1

[[arch]]
label = "raid0"
arch = "raid0"
disks = 2
disk_model = "none"
disk_size = "64M"
chunk = "64K"

[workload]
name = "untar_copy_remove"
params = { scale = 0.01, seed = 1, mode = "sync" }
mkfs_options = ["-b", "1024"]

[[case]]
name = "ext4"

[[case]]
name = "ext2"
filesystem = "ext2"
"""


def test_a_case_can_run_on_ext2(tmp_path, raidlab_cmd):
    """`filesystem = "ext2"` (the VC-RAID paper's filesystem): mkfs.ext2, mounted as ext2, and
    no journal, so the same synchronous untar/copy/remove writes less to the array. (In the lab
    VM, where the ext4 driver mounts it, tests/vm/test_demo.py: the demo's runs are on ext2.)"""
    scenario = tmp_path / "fs.toml"
    scenario.write_text(FILESYSTEMS_SCENARIO)
    home = tmp_path / "home"
    proc = subprocess.run(raidlab_cmd + ["run", str(scenario), "--runner", "native", "--home", str(home),
                                         "--results", str(tmp_path / "results")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = Path(proc.stdout.strip())
    written = {}
    for fs in ("ext4", "ext2"):
        doc = json.loads((out / "runs" / f"raid0--{fs}--r1.json").read_text())
        assert doc["status"] == "ok", doc.get("error")
        assert doc["filesystem"] == fs and doc["tree"]["fstype"] == fs
        assert doc["setup_commands"][0]["argv"][0] == f"mkfs.{fs}"
        # ext4 is made without lazy initialisation (ext2 has none), the case's -b kept
        mkfs_argv = doc["setup_commands"][0]["argv"]
        assert mkfs_argv.count("-E") == 1 and ["-b", "1024"] == mkfs_argv[5:7]
        assert ("lazy_itable_init=0" in mkfs_argv[4]) == (fs == "ext4")
        before, after = (doc[key]["statistics"]["members"] for key in ("array_status_before", "array_status"))
        written[fs] = sum(m["bytes_written"] for m in after) - sum(m["bytes_written"] for m in before)
    assert 0 < written["ext2"] < written["ext4"], written
    _no_leftovers(home)


@pytest.mark.parametrize("how", ["next run", "lab cleanup"])
def test_sigkilled_run_leaves_an_array_the_next_run_or_lab_cleanup_destroys(tmp_path, raidlab_cmd, how):
    """SIGKILL (or a lost session) gives `raidlab run` no chance to destroy its scratch array:
    the daemon, its loops, the mounted ext4 and the member images stay. The next `raidlab run`
    under the same home, or `raidlab lab cleanup NAME`, destroys them, and the host
    directories the run made for them."""
    scenario = _scenario(tmp_path, repeat=1, files=2000, transactions=400000, tiny=False)
    home, results = tmp_path / "home", tmp_path / "results"
    proc = subprocess.Popen(raidlab_cmd + ["run", str(scenario), "--only", "raid0", "--home", str(home),
                                           "--results", str(results)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        seen: set[str] = set()
        while not seen and time.monotonic() < deadline and proc.poll() is None:
            seen = _workload_mounts(home)
            time.sleep(0.2)
        assert seen, "the run never mounted its array"
        time.sleep(2)  # PostMark is running on it
    finally:
        proc.kill()
        proc.wait()
    labs = [p for p in (home / "labs").iterdir()]
    assert len(labs) == 1 and (labs[0] / "run-owner.json").exists()
    assert loops_of(home) and _workload_mounts(home) == seen  # left behind, really
    assert any((labs[0] / "images").iterdir())  # the member images
    scratch = Path(json.loads((labs[0] / "run-owner.json").read_text())["scratch"])
    assert scratch.is_dir()  # the native session's own scratch directory
    if how == "next run":
        (tmp_path / "again").mkdir()
        small = _scenario(tmp_path / "again", repeat=1, files=100, transactions=200, tiny=False)
        again = subprocess.run(raidlab_cmd + ["run", str(small), "--only", "raid0", "--home", str(home),
                                              "--results", str(results)],
                               capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
        said = again.stderr
    else:
        env = dict(os.environ, RAIDLAB_HOME=str(home))
        again = subprocess.run(raidlab_cmd + ["lab", "cleanup", labs[0].name], env=env,
                               capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        said = again.stdout
    assert f"destroyed scratch array {labs[0].name} left by a killed `raidlab run` (pid {proc.pid})" in \
        " ".join(said.split())
    assert not scratch.exists()
    _no_leftovers(home, seen)


COLD_START_SCENARIO = """
[scenario]
id = "live-run-cold-start"
title = "live test: a VC-RAID run starts with its cache-disk log empty"
kind = "live"
runner = "native"
repeat = 1
{extra}

[[arch]]
label = "vcraid"
arch = "vcraid"
disks = 3
disk_model = "none"
disk_size = "48M"
chunk = "64K"
options = {{ config = "scd", ram_buffer = "512K", cache_size = "16M", destage = "off" }}

[workload]
name = "postmark"
params = {{ files = 100, transactions = 200, min_size = 5000, max_size = 10000 }}
mkfs_options = ["-b", "1024"]
"""


@pytest.mark.parametrize("cold_start", [True, False])
def test_a_vcraid_run_starts_with_mkfs_destaged_unless_cold_start_is_off(tmp_path, raidlab_cmd, cold_start):
    """With idle destage off, mkfs's writes stay in VC-RAID's cache-disk log; the cold start
    (the default) destages them home before the workload, so the status taken just before it
    shows an empty log; `cold_start = false` leaves them there."""
    scenario = tmp_path / "cold.toml"
    scenario.write_text(COLD_START_SCENARIO.format(extra="" if cold_start else "cold_start = false"))
    home = tmp_path / "home"
    proc = subprocess.run(raidlab_cmd + ["run", str(scenario), "--home", str(home),
                                         "--results", str(tmp_path / "results")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((Path(proc.stdout.strip()) / "runs" / "vcraid--default--r1.json").read_text())
    assert doc["status"] == "ok", doc.get("error")
    before = doc["array_status_before"]["statistics"]
    argvs = [c["argv"][0] for c in doc["setup_commands"]]
    if cold_start:
        settled = doc["cold_start"]
        assert settled["drained_bytes"] > 1 << 20 and settled["seconds"] >= 0  # mkfs wrote MBs
        assert argvs == ["mkfs.ext4", "mkdir", "mount", "umount", "sync", "sh", "mount", "umount"]
        # only the second mount's own writes (superblock, journal) are cached again
        assert before["cache_disk_used_bytes"] + before["ram_used_bytes"] < 256 << 10, before
    else:
        assert doc["cold_start"] is None
        assert argvs == ["mkfs.ext4", "mkdir", "mount", "umount"]
        assert before["cache_disk_used_bytes"] > 1 << 20, before
    _no_leftovers(home)
