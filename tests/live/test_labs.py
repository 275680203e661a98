"""Every lab in labs/ runs as written: its `sh` blocks, in order, in one bash with `set -e`, as
a student would type them (a fresh HOME, the venv's raidlab on PATH, from the repository's
directory). Then the observations the lab tells the student to make, where a counter or an
ordering can check them, are checked on the output each block printed. A lab that stops
matching raidlab fails here; nothing it made is left behind.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lab_leftovers import leftovers

REPO = Path(__file__).resolve().parents[2]
LABS = REPO / "labs"
VENV_BIN = Path(sys.executable).parent
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
MARK = "@@lab-block "

pytestmark = [pytest.mark.root, pytest.mark.live]


def lab_blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text())


def run_lab(path: Path, home: Path, timeout: float) -> list[str]:
    """The output of each `sh` block of lab `path`, run in order in one bash."""
    script = ["set -euo pipefail", f"cd {REPO}"]
    for k, block in enumerate(lab_blocks(path)):
        script += [f"echo '{MARK}{k}'", block]
    script.append(f"echo '{MARK}end'")
    env = {k: v for k, v in os.environ.items() if k != "RAIDLAB_HOME"}
    env.update(HOME=str(home), PATH=f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}", COLUMNS="200")
    home.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(["bash", "-c", "\n".join(script)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
    finally:
        labs = home / "raidlab-labs" / "labs"
        left = sorted(labs.glob("*")) if labs.exists() else []
        # a failed step leaves its array, then its cluster (down refuses while an array runs)
        for command in ("destroy", "cluster down"):
            for lab in left:
                subprocess.run([str(VENV_BIN / "raidlab"), *command.split(), lab.name],
                               env={**env, "RAIDLAB_HOME": str(home / "raidlab-labs")}, capture_output=True,
                               timeout=300)
    assert proc.returncode == 0 and f"{MARK}end" in proc.stdout, \
        f"{path.name} stopped (rc {proc.returncode}):\n{proc.stdout[-5000:]}"
    parts = proc.stdout.split(MARK)[1:]
    outputs = [part.split("\n", 1)[1] if "\n" in part else "" for part in parts[:-1]]
    assert len(outputs) == len(lab_blocks(path))
    assert not leftovers(home / "raidlab-labs"), leftovers(home / "raidlab-labs")
    return outputs


def number(pattern: str, text: str) -> float:
    """The first match's number; `last(...)` for a block that prints the status twice."""
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in:\n{text[-2000:]}"
    return float(m.group(1).replace(",", ""))


def last(pattern: str, text: str) -> float:
    found = re.findall(pattern, text)
    assert found, f"{pattern!r} not in:\n{text[-2000:]}"
    return float(found[-1].replace(",", ""))


def test_every_lab_is_listed_and_has_commands_and_an_instructor_file():
    labs = sorted(LABS.glob("[0-9][0-9]-*.md"))
    readme = (LABS / "README.md").read_text()
    assert len(labs) >= 6
    for lab in labs:
        assert f"]({lab.name})" in readme, lab.name
        assert lab_blocks(lab), lab.name
        assert (LABS / "instructor" / lab.name).exists(), lab.name
        text = lab.read_text()
        for section in ("## Steps", "## Questions", "## Extensions"):
            assert section in text, (lab.name, section)


def test_lab_01_raid5_small_writes(tmp_path):
    out = run_lab(LABS / "01-raid5-small-writes.md", tmp_path / "home", timeout=900)
    assert number(r"RMW (\d+)", out[1]) == 1                      # step 1: read-modify-write
    assert number(r"full-stripe (\d+)", out[2]) == 1              # step 2: no reads
    assert number(r"RMW (\d+)", out[3]) == 2 and number(r"RCW (\d+)", out[3]) == 0  # step 3: one chunk
    assert last(r"RMW (\d+)", out[3]) == 2 and last(r"RCW (\d+)", out[3]) == 1      # three chunks
    assert number(r"degraded reads (\d+)", out[4]) > 0 and "refused" in out[4]     # step 4
    assert "no mismatch" in out[5], out[5][-1500:]                 # step 5: the scrub


def test_lab_02_tss_temperatures(tmp_path):
    out = run_lab(LABS / "02-tss-temperatures.md", tmp_path / "home", timeout=900)
    assert "refused" in out[4] or "raidlab: error" in out[4]       # step 4: no tier beyond


def test_lab_03_vcraid(tmp_path):
    out = run_lab(LABS / "03-vcraid-log-and-destage.md", tmp_path / "home", timeout=900)
    step1, step2, step3, step4 = out[1:5]
    assert number(r"level-1 destage: (\d+) log writes", step1) >= 5
    assert number(r"level-2 destage: (\d+) segments", step1) == 0      # nothing home yet
    assert number(r"level-2 destage: (\d+) segments", step2) >= 1      # the idle period
    assert number(r"idle periods found (\d+)", step2) >= 1
    assert number(r"cache disk (\d+), array", step3) >= 4              # the log read
    assert number(r"array (\d+)\b", step3) >= 4                        # the block destaged
    assert number(r"RCW (\d+)", step4) == 100                          # plain RAID5's small writes


def test_lab_04_dcd_in_virtual_time(tmp_path):
    out = run_lab(LABS / "04-dcd-trace-replay.md", tmp_path / "home", timeout=900)
    write_mean = [number(r"\nwrite +\d+ +([\d.]+)", text) for text in out[1:6]]
    disk, immediate, after, logical, off = write_mean
    assert immediate < 2 < after < logical < disk                      # Tables 2 and 3
    assert off > after and number(r"forced_destages=(\d+)", out[5]) > 0  # Table 4: destage off
    assert number(r"read_hits_cache_disk_sectors=(\d+)", out[5]) > 10 * number(
        r"read_hits_cache_disk_sectors=(\d+)", out[3])


def test_lab_05_saraid(tmp_path):
    out = run_lab(LABS / "05-saraid-fast-and-slow.md", tmp_path / "home", timeout=900)
    assert re.search(r"read +\[disk 0, offset 0\] x2", out[0])  # step 1: the slow disk gets half
    entries = re.search(r"entries per member d0 (\d+), d1 (\d+), d2 (\d+), d3 (\d+)", out[1])
    assert entries and int(entries.group(1)) < min(int(entries.group(k)) for k in (2, 3, 4))
    busy = [float(x) for x in re.findall(r"│ \d │ \S+ +│ ok +│ \d+ +│ \d+ +│ \d+ +│ \d+ +│ ([\d.]+)", out[3])]
    assert len(busy) == 4 and busy[0] == max(busy)                     # RAID0 waits for member 0


def test_lab_06_raidx_cluster(tmp_path):
    out = run_lab(LABS / "06-raidx-cluster.md", tmp_path / "home", timeout=900)
    draw, raidx_write, chained_write = out[0].split("LOGICAL WRITE")[0], *out[0].split("LOGICAL WRITE")[1:]
    assert re.search(r"write +\[disk 3, offset 8\] x3 +image", raidx_write)     # one disk, three images
    assert len(re.findall(r"mirror copy", chained_write)) == 3                    # three disks
    assert number(r"images pending: (\d+)", out[2]) == 0                          # step 3: written home
    assert number(r"│ 0 +│ up +│ ([\d.]+) MiB", out[2]) > 30                       # data, log, home: 3 x 12 MiB
    assert "read back: same bytes" in out[3] and "state degraded" in out[3]        # step 4
    assert number(r"degraded reads (\d+)", out[3]) > 0
    assert "state optimal" in out[3] and "no mismatch" in out[3]
    bw = {m.group(1): float(m.group(2)) for m in re.finditer(r"ok: (\S+)--r1 \([^)]*\): aggregate_mb_s ([\d.]+)", out[4])}
    assert bw["raidx-mem--sw-c1"] > 1.2 * bw["chained--sw-c1"] > bw["raidx-log--sw-c1"]  # W against 2W
    assert 0.9 < bw["raidx-mem--lw-c16"] / bw["chained--lw-c16"] < 1.1              # processor-bound


def test_lab_07_power_loss_and_the_write_hole(tmp_path):
    out = run_lab(LABS / "07-power-loss-and-the-write-hole.md", tmp_path / "home", timeout=900)

    def unflushed(text: str) -> list[int]:  # the members table's last column, one row per member
        rows = re.findall(r"^│ (\d) .*│ (\d+)\s+│$", text, re.M)
        return [int(n) for _member, n in rows]

    assert unflushed(out[0]) == [0, 0, 0, 0], out[0][-1500:]          # step 0: the fsync emptied the caches
    assert unflushed(out[1]) == [1, 0, 0, 1], out[1][-1500:]          # step 1: data on 0, parity on 3
    sums = re.findall(r"^([0-9a-f]{64})  -$", out[2], re.M)
    assert "assemble refused" in out[2] and "--force" in out[2], out[2][-1500:]  # step 2: dirty degraded
    assert len(sums) == 2 and sums[0] != sums[1], out[2]               # step 2: the write hole
    assert "check found mismatches" in out[3] and "no mismatch" in out[3], out[3][-1500:]  # step 3
    assert "resync rewrote" in out[3]
    assert number(r"│ raid5\s+│ 3\s+│ (\d+)", out[4]) == 3, out[4][-1500:]  # step 4: 3 of 3 points passed
