"""`raidlab disk models` and `raidlab disk bench`, run as a user runs them (the console
script in a subprocess): output shape, JSON contents, and bad input -> one line, exit 2.

COLUMNS is set wide for the bad-input checks: raidlab.cli.main prints errors through a rich
Console that wraps at the terminal width (80 columns when not a terminal), which splits a
long message over lines; the message itself is one line.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from raidlab.disks import catalog


def run(cmd, *args, columns=None):
    env = dict(os.environ)
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300, env=env)


def test_models_json_lists_every_drive_with_sources(raidlab_cmd):
    proc = run(raidlab_cmd, "disk", "models", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["name"] for r in rows] == catalog.names()
    hp = next(r for r in rows if r["name"] == "hp-c2200a")
    assert hp["rpm"] == 4002 and hp["cylinders"] == 1449
    assert "DCD Table 1" in hp["sources"]["controller_read_ms"]
    assert set(hp["assumed"]) == {"head_switch_ms", "track_skew"}
    lzx = next(r for r in rows if r["name"] == "ibm-ultrastar-9lzx")
    assert lzx["zones"] == 16


def test_models_table(raidlab_cmd):
    proc = run(raidlab_cmd, "disk", "models")
    assert proc.returncode == 0, proc.stderr
    for name in ("hp-c2200a", "ibm-ultrastar-9lzx", "quantum-fireball-1280s", "hdd-7200", "ssd", "none"):
        assert name in proc.stdout


def test_bench_virtual_json(raidlab_cmd):
    proc = run(raidlab_cmd, "disk", "bench", "hp-c2200a", "--json", "--samples", "300")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["model"] == "hp-c2200a" and r["clock"] == "virtual"
    for key in ("random_read_4k", "random_read_8k", "random_write_4k"):
        assert r[key]["samples"] == 300
        assert 10 < r[key]["mean_ms"] < r[key]["p99_ms"] < 80
    # 8 KB random access, DCD Table 1: 33.6 ms
    assert r["random_read_8k"]["mean_ms"] == pytest.approx(33.6, rel=0.08)
    seq = r["sequential"]
    assert set(seq) == {"read_outer_mb_s", "write_outer_mb_s", "read_inner_mb_s", "write_inner_mb_s"}
    assert all(0 < v < 1.0 for v in seq.values())
    assert "lateness_qd1" not in r


def test_bench_zoned_drive_outer_faster_than_inner(raidlab_cmd):
    proc = run(raidlab_cmd, "disk", "bench", "ibm-ultrastar-9lzx", "--json", "--samples", "100", "--size", "2G")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["size"] == 2 << 30
    assert r["sequential"]["read_outer_mb_s"] > 1.25 * r["sequential"]["read_inner_mb_s"]


def test_bench_table_output(raidlab_cmd):
    proc = run(raidlab_cmd, "disk", "bench", "ssd", "--samples", "50")
    assert proc.returncode == 0, proc.stderr
    assert "random read 4 KiB QD1" in proc.stdout and "outer" in proc.stdout


def test_bench_live_reports_lateness(raidlab_cmd, tmp_path):
    proc = run(raidlab_cmd, "disk", "bench", "none", "--clock", "live", "--size", "16M", "--samples", "20",
               "--image-dir", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    for key in ("lateness_qd1", "lateness_qd16"):
        assert r[key]["samples"] > 0
        assert r[key]["p50_ms"] <= r[key]["p99_ms"] <= r[key]["max_ms"]
    assert list(tmp_path.iterdir()) == []  # the scratch image is removed


@pytest.mark.parametrize("args,needle", [
    (["bench", "hp-c2201x"], "unknown disk model 'hp-c2201x'"),
    (["bench", "hp-c2200a", "--size", "1000"], "not a positive multiple of 512"),
    (["bench", "none", "--clock", "live", "--image-dir", "/proc/raidlab-nowhere"], "cannot open disk image"),
    (["bench", "none", "--image-dir", "/tmp"], "only used with --clock live"),
])
def test_bad_input_is_one_line_exit_2(raidlab_cmd, args, needle):
    proc = run(raidlab_cmd, "disk", *args, columns=400)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert needle in lines[0]
