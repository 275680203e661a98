"""Every workload driver end to end on a real loop device over a plain image file, real ext4,
through raidlab.runners.session.NativeSession, with small parameters (seconds each). Checks
what each driver did (files made and removed, transactions served, figures parsed, commands
recorded), never how fast.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

import pytest

import raidlab.workloads as workloads
from raidlab.errors import WorkloadError
from raidlab.runners.session import NativeSession
from raidlab.tools import losetup, mkfs
from raidlab.tools import mount as mount_tool

from lab_leftovers import loops_of, mounts_of

pytestmark = [pytest.mark.root, pytest.mark.live]

MiB = 1 << 20


@contextlib.contextmanager
def loop_device(tmp_path: Path, size: int = 384 * MiB):
    image = tmp_path / "disk.img"
    with open(image, "wb") as fh:
        fh.truncate(size)
    loop = losetup.attach(image, direct_io=False)
    try:
        yield loop.device
    finally:
        losetup.detach_and_wait(loop.device, backing=str(image))


@contextlib.contextmanager
def ext4_session(tmp_path: Path, options: list[str] | tuple[str, ...] = ()):
    """(session, mountpoint) on a fresh ext4; everything released after, checked."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with loop_device(tmp_path) as device:
        mkfs.mkfs_ext4(device)
        mount_tool.mount(device, mnt, fstype="ext4", options=list(options))
        try:
            with NativeSession(device, scratch=scratch) as session:
                yield session, str(mnt)
        finally:
            mount_tool.umount(mnt)
        assert mkfs.e2fsck(device).clean
    assert not loops_of(tmp_path) and not mounts_of(tmp_path)


def _entries(path: str) -> list[str]:
    return sorted(os.listdir(path))


def _labels(doc: dict) -> list[str]:
    return [c.get("label", "") for c in doc["commands"]]


def test_untar_copy_remove_async(tmp_path):
    w = workloads.get("untar_copy_remove")
    with ext4_session(tmp_path, w.mount_options({"scale": 0.02})) as (session, mnt):
        messages: list[str] = []
        doc = w.run(session, mnt, {"scale": 0.02, "seed": 4}, progress=messages.append)
        assert _entries(mnt) == ["lost+found"]                 # tree and copy removed
        assert os.listdir(session.scratch) == []                # tar file removed
    assert doc["tree"]["directories"] == 19 and doc["tree"]["files"] == 246
    assert doc["tree"]["bytes"] == 246 * 9_900 and doc["tree"]["fstype"] == "ext4"
    m = doc["metrics"]
    for phase in ("untar", "copy", "remove"):
        assert m[f"{phase}_seconds"]["unit"] == "s" and m[f"{phase}_seconds"]["value"] > 0
        assert m[f"{phase}_seconds"]["value"] == pytest.approx(
            m[f"{phase}_program_seconds"]["value"] + m[f"{phase}_sync_seconds"]["value"],
            abs=2e-6)
    labels = _labels(doc)
    timed = [l for l in labels if l in ("untar", "untar sync", "copy", "copy sync", "remove",
                                        "remove sync")]
    assert timed == ["untar", "untar sync", "copy", "copy sync", "remove", "remove sync"]
    assert labels.count("after untar: count (untimed)") == 1
    argv = {c.get("label"): c["argv"] for c in doc["commands"]}
    assert argv["copy"] == ["cp", "-r", f"{mnt}/tree", f"{mnt}/tree.copy"]
    assert argv["remove"] == ["rm", "-rf", f"{mnt}/tree"]
    assert any("untar" in msg for msg in messages)
    assert not [l for l in labels if "idle" in l]               # idle_s defaults to 0


def test_untar_idles_before_each_phase(tmp_path):
    w = workloads.get("untar_copy_remove")
    with ext4_session(tmp_path) as (session, mnt):
        doc = w.run(session, mnt, {"scale": 0.01, "idle_s": 0.3})
        assert _entries(mnt) == ["lost+found"]
    records = doc["commands"]
    labels = _labels(doc)
    for phase in ("untar", "copy", "remove"):
        i = labels.index(phase)
        idle = records[i - 1]
        assert idle["label"] == f"before {phase}: idle (untimed)"
        assert idle["argv"] == ["sleep", "0.3"] and idle["rc"] == 0 and idle["seconds"] >= 0.3
        assert labels[i - 2] == f"before {phase}: sync, drop caches (untimed)"
    assert doc["params"]["idle_s"] == 0.3


def test_untar_sync_mode_on_a_sync_mount(tmp_path):
    w = workloads.get("untar_copy_remove")
    params = {"scale": 0.005, "mode": "sync", "drop_caches": False}
    assert w.mount_options(params) == ["sync"]
    with ext4_session(tmp_path, w.mount_options(params)) as (session, mnt):
        doc = w.run(session, mnt, params)
        assert _entries(mnt) == ["lost+found"]
    assert "sync" in doc["tree"]["mount_options"]
    assert "untar_sync_seconds" not in doc["metrics"]           # -o sync: no trailing sync
    assert doc["metrics"]["remove_seconds"]["value"] > 0
    assert "untar sync" not in _labels(doc)


def test_untar_refuses_a_mount_that_does_not_match_the_mode(tmp_path):
    w = workloads.get("untar_copy_remove")
    with ext4_session(tmp_path) as (session, mnt):
        with pytest.raises(WorkloadError, match="mode=sync"):
            w.run(session, mnt, {"scale": 0.005, "mode": "sync"})
        with pytest.raises(WorkloadError, match="not a mount point"):
            w.run(session, str(tmp_path / "scratch"), {"scale": 0.005})
        assert _entries(mnt) == ["lost+found"]                 # nothing was started


def test_postmark(tmp_path):
    w = workloads.get("postmark")
    with ext4_session(tmp_path) as (session, mnt):
        doc = w.run(session, mnt, {"files": 100, "transactions": 1500, "seed": 3})
        assert _entries(mnt) == ["lost+found"]
        # a leftover working directory is refused, not overwritten
        os.mkdir(os.path.join(mnt, "postmark"))
        with pytest.raises(WorkloadError, match="already exists"):
            w.run(session, mnt, {"files": 10, "transactions": 10})
        os.rmdir(os.path.join(mnt, "postmark"))
        # a working directory PostMark 1.51 would crash on is refused before it runs
        deep = os.path.join(mnt, "d" * 80)
        os.mkdir(deep)
        with pytest.raises(WorkloadError, match="shorter path"):
            w.run(session, deep, {"files": 10, "transactions": 10})
        os.rmdir(deep)
        # far more transactions than files: PostMark gives up, and the error says why
        with pytest.raises(WorkloadError, match="out of files"):
            w.run(session, mnt, {"files": 10, "transactions": 100_000})
        assert _entries(mnt) == ["lost+found"]
    m = doc["metrics"]
    assert m["tps"]["value"] > 0 and m["tps"]["unit"] == "tx/s"
    assert 0 < m["files_read"]["value"] + m["files_appended"]["value"] <= 1500
    assert m["create_alone"]["value"] == 100
    assert "set location " + mnt + "/postmark" in doc["raw"]["config"]
    assert any(c["argv"] == ["postmark"] and c["rc"] == 0 for c in doc["commands"])


def test_bonnie(tmp_path):
    w = workloads.get("bonnie")
    with ext4_session(tmp_path) as (session, mnt):
        doc = w.run(session, mnt, {"size_mb": 32, "seeks": 2000, "seekers": 2})
        assert _entries(mnt) == ["lost+found"]
    for figure in ("block_write_kbs", "rewrite_kbs", "block_read_kbs", "random_seeks_per_s"):
        measured = figure in doc["metrics"]
        noted = any(n.startswith(figure + ":") for n in doc["notes"])
        assert measured != noted, figure                        # one or the other, never both
    assert doc["bonnie"]["file_size"] == "32M" and doc["bonnie"]["seeks"] == "2000"
    assert "<table" in doc["raw"]["html"] and doc["raw"]["csv"].startswith("1.98,")
    assert doc["commands"][-1]["where"] == "host"


def test_tps_over_loopback_with_direct_io(tmp_path):
    w = workloads.get("tps")
    params = {"clients": [1, 2], "dataset_mb": 8, "mixes": 2, "mix_tx": 16,
              "request_size": 512, "write_ratio": 0.5}
    with ext4_session(tmp_path) as (session, mnt):
        doc = w.run(session, mnt, params)
        assert _entries(mnt) == ["lost+found"]                 # data set removed
        assert os.listdir(session.scratch) == []                # binary removed
    m = doc["metrics"]
    assert m["tps_c1"]["value"] > 0 and m["tps_c2"]["value"] > 0
    assert [s["transactions"] for s in doc["sets"]] == [32, 64]
    for s in doc["sets"]:
        assert (s["server_reads"], s["server_writes"]) == (s["reads"], s["writes"])
        assert s["verify_errors"] == 0
    tps_argv = next(c["argv"] for c in doc["commands"] if c.get("label") == "tps")
    assert tps_argv[tps_argv.index("--io") + 1] == "direct"


def test_tps_idles_between_the_data_set_and_the_clients(tmp_path):
    w = workloads.get("tps")
    params = {"clients": [1], "dataset_mb": 4, "mixes": 2, "mix_tx": 8, "request_size": 512,
              "write_ratio": 0.5, "idle_s": 0.3}
    with ext4_session(tmp_path) as (session, mnt):
        doc = w.run(session, mnt, params)
        assert _entries(mnt) == ["lost+found"]
    steps = [(c.get("label"), c["argv"]) for c in doc["commands"]
             if c.get("label") in ("tps prepare", "after the data set: idle (untimed)", "tps")]
    assert [label for label, _ in steps] == ["tps prepare", "after the data set: idle (untimed)",
                                             "tps"]
    prepare_argv, sleep_argv, run_argv = (argv for _, argv in steps)
    assert "--prepare" in prepare_argv and "--run" not in prepare_argv
    assert sleep_argv == ["sleep", "0.3"]
    assert "--run" in run_argv and "--prepare" not in run_argv
    assert doc["metrics"]["prepare_seconds"]["value"] > 0      # the prepare step's own report
    [s] = doc["sets"]
    assert s["transactions"] == 16 and s["verify_errors"] == 0  # reads the prepared data set
    assert (s["server_reads"], s["server_writes"]) == (s["reads"], s["writes"])


def test_fio_on_the_raw_device(tmp_path):
    w = workloads.get("fio")
    with loop_device(tmp_path, 64 * MiB) as device:
        with NativeSession(device) as session:
            doc = w.run(session, None, {"jobs": "randwrite,read", "size_mb": 8, "runtime": 1})
    m = doc["metrics"]
    assert m["randwrite_iops"]["value"] > 0 and m["read_bw"]["value"] > 0
    assert "read_iops" in m and "randwrite_lat_mean_ms" in m
    fio_argv = next(c["argv"] for c in doc["commands"] if c.get("label") == "fio")
    assert f"--filename={device}" in fio_argv
    assert doc["raw"]["fio"]["jobs"][0]["jobname"] == "randwrite"
    assert not loops_of(tmp_path)


def test_andrew_phases_build_the_copy_and_leave_nothing(tmp_path):
    w = workloads.get("andrew")
    with ext4_session(tmp_path) as (session, mnt):
        doc = w.run(session, mnt, {"seed": 3, "kb": 60, "sync": True})
        assert _entries(mnt) == ["lost+found"]                 # the copy removed
        assert os.listdir(session.scratch) == []                # the source removed
    assert doc["tree"]["files"] == 72 and doc["tree"]["c_files"] == 66
    m = doc["metrics"]
    phases = ("mkdir", "copy", "stat", "read", "compile")
    assert all(m[f"{p}_seconds"]["value"] > 0 for p in phases)
    assert m["total_seconds"]["value"] == pytest.approx(sum(m[f"{p}_seconds"]["value"] for p in phases), abs=1e-5)
    labels = _labels(doc)
    assert labels.index("mkdir") < labels.index("copy") < labels.index("stat") < labels.index("read") \
        < labels.index("compile") < labels.index("run the program (untimed)")
    assert [c["rc"] for c in doc["commands"] if c.get("label") in phases] == [0] * 5
    assert labels.count("compile sync") == 1
    # the phases' own processor time, and what each phase's sync put on the loop device
    assert m["compile_cpu_seconds"]["value"] > 0
    assert all(0 <= m[f"{p}_cpu_seconds"]["value"] <= 1.1 * m[f"{p}_seconds"]["value"] + 0.1 for p in phases)
    assert m["copy_device_write_kb"]["value"] >= 60       # the 60 KiB tree, at least
    assert m["compile_device_write_kb"]["value"] > 0       # objects and the program
    assert m["stat_device_write_kb"]["value"] <= m["copy_device_write_kb"]["value"]


def test_andrew_refuses_a_copy_that_does_not_build_the_sources_program(tmp_path, monkeypatch):
    """A copy that differs from the source (here: the expected sum is not the tree's) is an
    error, not a time."""
    import raidlab.workloads.andrew as andrew

    real = andrew.tree
    monkeypatch.setattr(andrew, "tree", lambda *a, **k: dataclasses.replace(real(*a, **k), expected=1))
    with ext4_session(tmp_path) as (session, mnt):
        with pytest.raises(WorkloadError, match="the copy on the array is not the source"):
            andrew.WORKLOAD.run(session, mnt, {"kb": 20})
        assert _entries(mnt) == ["lost+found"]
