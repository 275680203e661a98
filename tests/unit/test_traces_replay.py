"""Virtual-time replay: model service time, queueing, compaction, bad input, determinism."""

from __future__ import annotations

import json
import subprocess

import pytest

from raidlab.disks import catalog
from raidlab.disks.mechanisms import make_mechanism as DiskMechanism
from raidlab.errors import UsageError
from raidlab.traces.formats import Request, TraceError, raidlab_text
from raidlab import archs
from raidlab.runners.virtual import SimSpec, replay_requests
from raidlab.traces.synth import synth

MiB = 1 << 20


def test_single_request_on_idle_disk_takes_the_models_service_time():
    spec = catalog.get("hp-c2200a")
    size = spec.media_capacity_bytes // 512 * 512
    # The model's answer for an idle drive at time 0, computed apart from the replay.
    expected = DiskMechanism(spec, size).plan_read(0.0, 64 * MiB, 8192).end
    report = replay_requests(SimSpec("disk", "hp-c2200a"), [Request(0.0, "read", 64 * MiB, 8192)])
    read = report["response"]["read"]
    assert read["count"] == 1
    assert read["mean_ms"] == pytest.approx(expected * 1e3, rel=1e-9)
    assert read["max_ms"] == read["p50_ms"] == read["mean_ms"]
    assert 5 < read["mean_ms"] < 60  # an 8 KB access on a 1992 drive (DCD Table 1: 33.6 ms average)
    disk = report["per_disk"][0]
    assert disk["reads"] == 1 and disk["mean_wait_ms"] == pytest.approx(0, abs=1e-9)


def test_overlapping_requests_queue():
    far = [Request(0.0, "read", (i * 37 % 300) * MiB, 8192) for i in range(8)]
    alone = replay_requests(SimSpec("disk", "hp-c2200a"), far[:1])["response"]["read"]["mean_ms"]
    together = replay_requests(SimSpec("disk", "hp-c2200a"), far)
    resp = together["response"]["read"]
    assert resp["max_ms"] > 4 * alone  # the last one waited for the others
    assert resp["mean_ms"] > 2 * alone
    disk = together["per_disk"][0]
    assert disk["max_queue_length"] == 8
    assert disk["mean_wait_ms"] > 0


def test_spread_requests_do_not_queue_and_compact_squeezes_them():
    spread = [Request(i * 1.0, "write", (i * 37 % 300) * MiB, 4096) for i in range(10)]
    normal = replay_requests(SimSpec("disk", "hp-c2200a"), spread)
    squeezed = replay_requests(SimSpec("disk", "hp-c2200a", compact=1000), spread)
    assert normal["virtual_seconds"] == pytest.approx(9.0, abs=0.1)
    assert squeezed["virtual_seconds"] < 0.5  # 9 s / 1000 + service times
    assert normal["per_disk"][0]["max_queue_length"] == 1
    assert squeezed["per_disk"][0]["max_queue_length"] > 1  # 1 ms apart: they now overlap
    assert squeezed["response"]["write"]["mean_ms"] > normal["response"]["write"]["mean_ms"]


def test_raid5_replay_reports_members_and_architecture():
    reqs = list(synth("cello", 120, seed=5))
    report = replay_requests(SimSpec("raid5", "hp-c2200a", disks=4, chunk=64 * 1024), reqs)
    assert report["trace"]["requests"] == len(reqs)
    assert report["response"]["read"]["count"] + report["response"]["write"]["count"] == len(reqs)
    assert len(report["per_disk"]) == 4
    arch = report["architecture"]
    assert arch["arch"] == "raid5" and arch["writes"] == report["response"]["write"]["count"]
    assert arch["rmw_stripes"] + arch["rcw_stripes"] + arch["full_stripe_writes"] > 0
    # Every member request the array sent was served by its disk, alone or merged into a
    # contiguous one queued with it.
    served = sum(d["reads"] + d["writes"] + d["merged_requests"] for d in report["per_disk"])
    assert served == arch["member_reads"] + arch["member_writes"]
    assert all(0 < d["utilization"] < 1 for d in report["per_disk"])


def test_past_end_of_device_names_the_line():
    reqs = [Request(0.0, "read", 0, 4096, line=3), Request(0.1, "write", 400 * MiB, 4096, line=4)]
    with pytest.raises(TraceError, match="line 4: request .* past the end of the device"):
        replay_requests(SimSpec("disk", "hp-c2200a"), reqs)


def test_unknown_arch_and_registry_hook():
    with pytest.raises(UsageError, match="unknown architecture 'nosuch'"):
        replay_requests(SimSpec("nosuch", "hp-c2200a"), [Request(0, "read", 0, 512)])
    assert {"disk", "raid0", "raid5", "dcd", "vcraid"} <= set(archs.names("sim"))


def _sim(raidlab_cmd, trace, *extra):
    return subprocess.run([*raidlab_cmd, "sim", "--arch", "raid5", "--disks", "3", "--chunk", "64K",
                           "--disk-model", "hp-c2200a", "--trace", str(trace), "--format", "raidlab",
                           "--json", *extra], capture_output=True, text=True, timeout=120)


def test_sim_json_is_byte_identical_across_runs(tmp_path, raidlab_cmd):
    trace = tmp_path / "cello.trace"
    trace.write_text(raidlab_text(synth("cello", 300, seed=9)))
    first = _sim(raidlab_cmd, trace)
    second = _sim(raidlab_cmd, trace)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    report = json.loads(first.stdout)
    assert report["trace"]["requests"] > 500 and "speed" not in report
    assert "replay speed:" in first.stderr


def test_sim_bad_input_is_one_line_exit_2(tmp_path, raidlab_cmd):
    trace = tmp_path / "bad.trace"
    trace.write_text("raidlab-trace v1\ntime,op,offset,length,device\n0,read,0,512,\n0.1,jump,0,512,\n")
    bad = _sim(raidlab_cmd, trace)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"raidlab: error: {trace}: line 4: op must be one of read, write, flush, trim, not 'jump' "
        f"(format raidlab); fix the trace, or pass --skip-bad to skip such lines"]
    skipped = _sim(raidlab_cmd, trace, "--skip-bad")
    assert skipped.returncode == 0
    assert json.loads(skipped.stdout)["trace"]["skipped_lines"] == 1
    unknown = subprocess.run([*raidlab_cmd, "sim", "--arch", "raid5", "--disk-model", "hp-c2200a", "--trace",
                              str(trace), "--format", "csv"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and unknown.stderr.startswith("raidlab: error: unknown trace format 'csv'")


def test_trace_cli_synth_then_stats(tmp_path, raidlab_cmd):
    out = tmp_path / "h.trace"
    made = subprocess.run([*raidlab_cmd, "trace", "synth", "--profile", "hplajw", "--duration", "1d",
                           "--seed", "3", "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert out.read_text().startswith("raidlab-trace v1\n# synthetic trace: profile=hplajw")
    stats = subprocess.run([*raidlab_cmd, "trace", "stats", str(out), "--format", "raidlab", "--json"],
                           capture_output=True, text=True, timeout=60)
    s = json.loads(stats.stdout)
    assert s["rate_per_s"] == pytest.approx(0.076, rel=0.3)
    assert s["idle"]["fraction"] > 0.7


def test_a_closed_loop_replay_issues_the_next_request_when_one_completes():
    """outstanding=1: requests that arrive together are served one after another, each
    timed from its own issue, so each takes about one service time; the open-loop replay
    times them from their arrival and queues them. Per-block figures weight by size."""
    reqs = [Request(0.0, "write", i * 16 * 1024 * 1024, 8192, line=i) for i in range(20)]
    opened = replay_requests(SimSpec("disk", "hp-c2200a"), reqs)
    closed = replay_requests(SimSpec("disk", "hp-c2200a", outstanding=1), reqs)
    assert closed["outstanding"] == 1 and closed["max_in_flight"] == 1
    assert opened["response"]["write"]["mean_ms"] > 5 * closed["response"]["write"]["mean_ms"]
    # every request is 8 KiB: the block-weighted mean is the mean, the time per KiB an eighth
    assert closed["per_block"]["write"] == pytest.approx(closed["response"]["write"]["mean_ms"])
    assert closed["per_block"]["ms_per_kib"]["write"] == pytest.approx(closed["response"]["write"]["mean_ms"] / 8)
    with pytest.raises(UsageError):
        replay_requests(SimSpec("disk", "hp-c2200a", outstanding=0), reqs)
