"""Parsers of the workload programs' output, on real captured output (tests/unit/data/workloads/,
produced by running postmark 1.51, bonnie++ 2.00a and fio 3.33 on a loop-device ext4), and
parameter validation of every driver. No device, no root.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import raidlab.workloads as workloads
from raidlab.errors import UsageError
from raidlab.workloads import bonnie, postmark, tps
from raidlab.workloads import fio as fio_workload
from raidlab.tools.fio import extract_json, parse_report

DATA = Path(__file__).parent / "data" / "workloads"


# ------------------------------------------------------------------------- postmark

def test_postmark_verbose_report_figures():
    figures = postmark.parse_report((DATA / "postmark_verbose.txt").read_text())
    assert figures["tps"] == 2000.0
    assert figures["transaction_seconds"] == 1.0
    assert figures["files_created"] == 1211
    # creation alone + mixed with transactions = created, likewise deletion
    assert figures["create_alone"] + figures["create_mixed"] == figures["files_created"]
    assert figures["delete_alone"] + figures["delete_mixed"] == figures["files_deleted"]
    assert figures["files_read"] + figures["files_appended"] <= 2000     # at most one each
    # "6.28 megabytes read": PostMark's megabytes are 1024*1024 bytes
    assert figures["bytes_read"] == pytest.approx(6.28 * 1024 * 1024)
    assert figures["bytes_written"] == pytest.approx(7.68 * 1024 * 1024)


def test_postmark_kilobyte_units_and_small_run():
    figures = postmark.parse_report((DATA / "postmark_tiny.txt").read_text())
    assert figures["tps"] == 20.0
    assert figures["bytes_read"] == pytest.approx(73.79 * 1024)


def test_postmark_report_missing_is_an_error():
    text = (DATA / "postmark_missing_dir.stdout").read_text()
    with pytest.raises(ValueError, match="lacks"):
        postmark.parse_report(text)


def test_postmark_config_carries_every_setting():
    params = postmark.WORKLOAD.resolve(postmark.PAPER_CASES["medium"])
    text = postmark.config_text(params, "/mnt/x/postmark")
    lines = text.splitlines()
    assert lines[0] == "set location /mnt/x/postmark"
    assert "set number 20000" in lines and "set transactions 50000" in lines
    assert "set read 1024" in lines and "set write 1024" in lines
    assert not any(line.startswith("set subdirectories") for line in lines)  # 0 is refused
    assert lines[-2:] == ["run", "quit"]
    with_dirs = postmark.config_text({**params, "subdirectories": 10}, "/m")
    assert "set subdirectories 10" in with_dirs.splitlines()


# ------------------------------------------------------------------------- bonnie++

def test_bonnie_csv_with_too_fast_tests():
    line = (DATA / "bonnie_direct_fast.csv").read_text()
    columns, metrics, too_fast = bonnie.parse_csv(line)
    assert columns["bonnie_version"] == "2.00a" and columns["file_size"] == "100M"
    assert metrics["block_write_kbs"] == (170311.0, "KiB/s")
    assert metrics["block_write_cpu_percent"] == (36.0, "%")
    assert metrics["block_write_latency_us"] == (4002.0, "us")
    # +++++ = not measured: absent from metrics, named as too fast
    assert set(too_fast) == {"rewrite_kbs", "block_read_kbs", "random_seeks_per_s"}
    assert "random_seeks_per_s" not in metrics
    assert "char_write_kbs" not in metrics and "char_write_kbs" not in too_fast  # -f: not run


def test_bonnie_csv_with_seeks_and_file_tests():
    line = (DATA / "bonnie_seeks_measured.csv").read_text()
    columns, metrics, too_fast = bonnie.parse_csv(line)
    assert (columns["seeks"], columns["seek_proc_count"]) == ("100000", "4")
    assert metrics["random_seeks_per_s"] == (134524.0, "1/s")
    assert metrics["random_seeks_latency_us"] == (116_000.0, "us")        # "116ms"
    assert metrics["rewrite_kbs"] == (161776.0, "KiB/s")
    assert metrics["seq_create_per_s"] == (1255.0, "1/s")
    assert "block_read_kbs" in too_fast


def test_bonnie_csv_per_char_tests():
    _columns, metrics, too_fast = bonnie.parse_csv((DATA / "bonnie_n1.csv").read_text())
    assert metrics["char_write_kbs"] == (1417.0, "KiB/s")
    assert metrics["char_read_latency_us"] == (7287.0, "us")
    assert "seq_create_per_s" in too_fast


def test_bonnie_rejects_other_text():
    with pytest.raises(ValueError):
        bonnie.parse_csv("Version 2.00a ------Sequential Output------")
    with pytest.raises(ValueError):
        bonnie.csv_line("no csv here\n")


def test_bonnie_latency_units():
    assert bonnie.parse_latency_us("8491us") == 8491
    assert bonnie.parse_latency_us("116ms") == 116_000
    assert bonnie.parse_latency_us("2s") == 2_000_000
    assert bonnie.parse_latency_us("") is None


def test_bonnie_argv_follows_params():
    params = bonnie.WORKLOAD.resolve({})
    argv = bonnie.Bonnie.argv(params, "/mnt/b")
    assert argv[argv.index("-s") + 1] == "100:8192:200000:4"   # the paper's file and seeks
    assert argv[argv.index("-r") + 1] == "50"
    assert "-f" in argv and "-D" in argv and argv[argv.index("-u") + 1] == "0:0"
    argv = bonnie.Bonnie.argv(bonnie.WORKLOAD.resolve({"direct": False, "per_char": True}), "/b")
    assert "-f" not in argv and "-D" not in argv


# ------------------------------------------------------------------------- fio

def test_fio_report_of_raw_device_jobs():
    report = extract_json((DATA / "fio_raw_randwrite_randread.json").read_text())
    jobs = {j.name: j for j in parse_report(report)}
    assert jobs["randwrite"].write.iops > 0 and jobs["randwrite"].read.ios == 0
    assert jobs["randread"].read.iops > 0 and jobs["randread"].write.ios == 0


def test_fio_job_list_and_argv():
    params = fio_workload.WORKLOAD.resolve({"jobs": ["randwrite", "read"], "runtime": 0})
    jobs = fio_workload.build_jobs(params, "/dev/vda")
    argv = fio_workload.fio_argv(jobs)
    assert argv[:2] == ["fio", "--output-format=json"]
    assert "--bs=4k" in argv and "--bs=1024k" in argv and argv.count("--stonewall") == 1
    assert not any(a.startswith("--runtime") for a in argv)       # runtime 0: size-bound
    with pytest.raises(UsageError, match="jobs"):
        fio_workload.WORKLOAD.validate({"jobs": "randwrite,sideways"})


# ------------------------------------------------------------------------- tps output

def test_tps_output_lines():
    out = ('{"event": "prepare", "version": "1", "bytes": 16777216, "segments": 4, '
           '"seconds": 0.1}\nnoise\n{"event": "done", "failed": false}\n')
    events = tps.parse_output(out)
    assert [e["event"] for e in events] == ["prepare", "done"]


# ------------------------------------------------------------------------- validation

def test_registry_knows_the_eight_workloads():
    assert set(workloads.NAMES) == {"untar_copy_remove", "postmark", "bonnie", "tps", "fio", "seqfile",
                                    "andrew", "replay"}
    with pytest.raises(UsageError, match="unknown workload 'nfsstone'"):
        workloads.get("nfsstone")


@pytest.mark.parametrize("name,params,key", [
    ("postmark", {"file": 10}, "file"),
    ("postmark", {"files": "many"}, "files"),
    ("postmark", {"min_size": 2000, "max_size": 1000}, "min_size"),
    ("postmark", {"transactions": 5}, "transactions"),
    ("untar_copy_remove", {"mode": "fsync"}, "mode"),
    ("untar_copy_remove", {"scale": 0}, "scale"),
    ("bonnie", {"size_mb": 100, "ram_mb": 80}, "ram_mb"),
    ("tps", {"request_size": 1000}, "request_size"),
    ("tps", {"clients": [1, 0]}, "clients"),
    ("tps", {"write_ratio": 1.5}, "write_ratio"),
    ("fio", {"iodepth": 0}, "iodepth"),
])
def test_bad_params_name_the_key(name, params, key):
    with pytest.raises(UsageError) as info:
        workloads.get(name).validate(params)
    assert key in str(info.value)


def test_defaults_are_the_papers():
    assert workloads.get("postmark").resolve({})["read_block"] == 1024
    t = workloads.get("tps").resolve({})
    assert (t["clients"], t["mixes"], t["mix_tx"], t["dataset_mb"], t["segments"]) == \
        ([1, 2, 3, 4], 16, 32, 128, 4)
    assert workloads.get("bonnie").resolve({})["size_mb"] == 100
    assert workloads.get("untar_copy_remove").resolve({"scale": 1})["scale"] == 1.0


def test_sync_mode_asks_the_runner_for_a_sync_mount():
    w = workloads.get("untar_copy_remove")
    assert w.mount_options({"mode": "sync"}) == ["sync"]
    assert w.mount_options({}) == []
    assert workloads.get("fio").needs_mountpoint is False
    assert workloads.get("fio").raw_device_only is True


def test_result_documents_are_json():
    # the parsers return plain numbers and strings only
    _c, metrics, _t = bonnie.parse_csv((DATA / "bonnie_seeks_measured.csv").read_text())
    json.dumps(metrics)
    json.dumps(postmark.parse_report((DATA / "postmark_verbose.txt").read_text()))


def test_seqfile_output_and_its_program_on_a_real_file(tmp_path):
    """The static seqfile program writes, fsyncs and reads back a real file; the parser takes
    both phases. (Dropping the page cache needs root; without it the program is told not to.)"""
    import os
    import subprocess

    from raidlab.workloads import seqfile
    from raidlab.workloads.cprogram import program

    binary = program("seqfile")
    argv = [str(binary), "--path", str(tmp_path / "f"), "--bytes", str(1 << 20), "--block", "4096"]
    if os.geteuid() != 0:
        argv.append("--no-drop-caches")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    phases = seqfile.parse_output(proc.stdout)
    assert phases["write"]["bytes"] == phases["read"]["bytes"] == 1 << 20
    assert phases["read"]["bad_blocks"] == 0 and phases["write"]["seconds"] > 0
    proc = subprocess.run([str(binary), "--path", str(tmp_path / "f"), "--bytes", "1000", "--block", "4096"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage" in proc.stderr
