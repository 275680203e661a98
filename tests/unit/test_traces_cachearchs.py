"""DCD and VC-RAID in the replayer (`raidlab sim --arch dcd|vcraid -o ...`): layouts, report
modes, destage on/off, option errors, and byte-identical output for the same inputs."""

from __future__ import annotations

import json
import subprocess

import pytest

from raidlab import archs
from raidlab.errors import UsageError
from raidlab.archs.caching import DCD_CACHE_SIZE
from raidlab.archs.dcd import dcd_volume_size
from raidlab.traces.formats import Request, raidlab_text
from raidlab.runners.virtual import SimSpec, replay_requests
from raidlab.traces.synth import HP_C2200A_BYTES, synth

KiB, MiB = 1024, 1 << 20
VOLUME = HP_C2200A_BYTES - DCD_CACHE_SIZE  # what a logical DCD leaves of the drive


def _trace(profile="hplajw", seconds=6 * 3600, seed=2):
    return list(synth(profile, seconds, seed, device_size=VOLUME))


def test_logical_dcd_volume_is_the_drive_minus_the_cache_disk():
    assert dcd_volume_size(HP_C2200A_BYTES, {"cache": "logical"}) == VOLUME
    assert dcd_volume_size(HP_C2200A_BYTES, {"cache": "physical"}) == HP_C2200A_BYTES
    report = replay_requests(SimSpec("dcd", "hp-c2200a", options={"cache": "logical"}),
                             [Request(0.0, "write", 0, 4096)])
    assert report["device_size"] == VOLUME
    assert [d["name"] for d in report["per_disk"]] == ["cache", "data"]


def test_dcd_immediate_report_writes_are_far_faster_than_a_traditional_disk():
    reqs = _trace()
    disk = replay_requests(SimSpec("disk", "hp-c2200a"), reqs)
    dcd = replay_requests(SimSpec("dcd", "hp-c2200a", options={"cache": "logical", "report": "immediate"}), reqs)
    assert dcd["response"]["write"]["count"] == disk["response"]["write"]["count"] > 100
    # RAM-buffer acknowledgements versus disk accesses of tens of milliseconds (DCD Table 2).
    assert dcd["response"]["write"]["mean_ms"] * 10 < disk["response"]["write"]["mean_ms"]
    arch = dcd["architecture"]
    assert arch["log_writes"] > 0 and arch["destages"] > 0 and arch["cache"] == "logical"
    # Every write of the trace went through the RAM buffer (hplajw's are <= 8 KB).
    assert arch["writes"] == dcd["response"]["write"]["count"] and arch["large_writes_to_data_disk"] == 0
    cache, data = dcd["per_disk"]
    # The cache-disk saw every log write (plus blank markers and tombstones); the data disk
    # only destage writes (no write of the trace went there directly).
    assert cache["writes"] >= arch["log_writes"] + arch["tombstones"]
    assert data["writes"] > 0 and arch["destaged_bytes"] > 0
    assert 0 < cache["utilization"] < 1 and 0 < data["utilization"] < 1


def test_report_after_complete_waits_for_the_log_write():
    reqs = _trace()
    immediate = replay_requests(SimSpec("dcd", "hp-c2200a", options={"report": "immediate"}), reqs)
    after = replay_requests(SimSpec("dcd", "hp-c2200a", options={"report": "after-complete"}), reqs)
    # A log write on the HP C2200A costs at least part of a revolution (15 ms at 4002 rpm).
    assert after["response"]["write"]["mean_ms"] > 5 * immediate["response"]["write"]["mean_ms"]
    assert after["architecture"]["report"] == "after-complete"


def test_destage_off_never_destages_on_idle():
    reqs = _trace(seconds=3600)
    on = replay_requests(SimSpec("dcd", "hp-c2200a", options={"destage": "on"}), reqs)
    off = replay_requests(SimSpec("dcd", "hp-c2200a", options={"destage": "off"}), reqs)
    assert on["architecture"]["idle_periods_found"] > 0 and on["architecture"]["destages"] > 0
    assert off["architecture"]["idle_periods_found"] == 0
    assert off["architecture"]["destages"] == off["architecture"]["forced_destages"] == 0
    assert off["architecture"]["cache_disk_used_bytes"] > on["architecture"]["cache_disk_used_bytes"]


def test_vcraid_scd_and_mcd_replay():
    reqs = list(synth("snake", 600, 4, device_size=256 * MiB))
    for config, n_disks in (("scd", 5), ("mcd", 6)):
        report = replay_requests(SimSpec("vcraid", "hp-c2200a", disks=4, options={"config": config}), reqs)
        assert report["architecture"]["config"] == config
        assert len(report["per_disk"]) == n_disks
        assert report["response"]["write"]["count"] > 0
        assert report["architecture"]["level1_destages"] > 0


def test_the_per_disk_configurations_and_the_mirrored_cache_disk_replay():
    reqs = list(synth("snake", 300, 4, device_size=120 * MiB))
    for options, names in (({"config": "1c"}, ["cache0", "cache1", "cache2", "d0", "d1", "d2"]),
                           ({"config": "1d"}, ["cache0", "cache1", "cache2", "d0", "d1", "d2"]),
                           ({"mirrored_cache": "on"}, ["cache", "cache-backup", "d0", "d1", "d2"])):
        spec = SimSpec("vcraid", "hp-c2200a", disks=3, disk_size=64 * MiB, options={"cache_size": "24M", **options})
        report = replay_requests(spec, reqs)
        assert [d["name"] for d in report["per_disk"]] == names
        assert report["response"]["write"]["count"] > 0 and report["architecture"]["level1_destages"] > 0
    mirrored = report["per_disk"]
    assert mirrored[0]["writes"] == mirrored[1]["writes"] > 0  # the backup takes every write of the cache disk


def test_drives_are_laid_out_by_the_clock():
    """Live images d0..dK spanning their drives; in virtual time the paper simulator's
    names, cache drives first and using the start of their drive."""
    def drives(arch, clock, disks, options):
        config = archs.Config(arch, disks, 64 * MiB, 64 * KiB, options, "hp-c2200a")
        return [(d.name, d.span) for d in archs.get(arch).plan(config, clock)]

    assert drives("dcd", archs.LIVE, 1, {}) == [("d0", "full"), ("d1", "full")]
    assert drives("dcd", archs.VIRTUAL, 1, {}) == [("cache", "start"), ("data", "full")]
    assert drives("dcd", archs.VIRTUAL, 1, {"cache": "logical"}) == [("drive", "full")]
    assert drives("vcraid", archs.LIVE, 3, {}) == [("d0", "full"), ("d1", "full"), ("d2", "full"), ("d3", "full")]
    assert drives("vcraid", archs.VIRTUAL, 3, {}) == [("cache", "start"), ("d0", "full"), ("d1", "full"),
                                                      ("d2", "full")]
    assert [name for name, _ in drives("vcraid", archs.VIRTUAL, 3, {"config": "mcd"})] == ["drive0", "drive1", "d2"]


@pytest.mark.parametrize("options, message", [
    ({"cache": "nvram"}, "option cache='nvram': use one of physical, logical"),
    ({"colour": "red"}, "dcd has no option 'colour'"),
    ({"ram_buffer": "12x"}, "option ram_buffer=12x is not a size"),
    ({"destage": "maybe"}, "option destage='maybe': use one of on, off"),
])
def test_bad_dcd_options_are_usage_errors(options, message):
    with pytest.raises(UsageError) as info:
        replay_requests(SimSpec("dcd", "hp-c2200a", options=options), [Request(0.0, "read", 0, 512)])
    assert str(info.value).startswith(message)


def _sim(raidlab_cmd, trace, *options):
    return subprocess.run([*raidlab_cmd, "sim", "--arch", "dcd", "--disk-model", "hp-c2200a", "--trace", str(trace),
                           "--format", "raidlab", "--json", *options], capture_output=True, text=True, timeout=300)


def test_dcd_sim_cli_is_byte_identical_across_runs(tmp_path, raidlab_cmd):
    trace = tmp_path / "snake.trace"
    trace.write_text(raidlab_text(synth("snake", 900, seed=11, device_size=VOLUME)))
    options = ("-o", "cache=logical", "-o", "report=after-complete", "--seed", "3")
    first, second = _sim(raidlab_cmd, trace, *options), _sim(raidlab_cmd, trace, *options)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    report = json.loads(first.stdout)
    assert report["architecture"]["cache"] == "logical" and report["architecture"]["log_writes"] > 0
    # The same replay inside this process (not a fresh one) gives the same numbers.
    from raidlab.traces.formats import TraceReader
    from raidlab.runners.virtual import replay

    here = replay(SimSpec("dcd", "hp-c2200a", seed=3, options={"cache": "logical", "report": "after-complete"}),
                  TraceReader(trace, "raidlab"))
    here.pop("speed")
    assert json.dumps(here, indent=2, sort_keys=True) == first.stdout.strip()


def test_dcd_sim_cli_bad_option_is_one_line_exit_2(tmp_path, raidlab_cmd):
    trace = tmp_path / "t.trace"
    trace.write_text(raidlab_text([Request(0.0, "write", 0, 4096)]))
    bad = _sim(raidlab_cmd, trace, "-o", "cache")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["raidlab: error: -o 'cache' is not KEY=VALUE; e.g. -o cache=logical"]


def test_reads_go_to_the_data_disk_with_destage_running():
    # DCD §2.2: "more than 99% of read requests are sent to the data disk" (destage running);
    # a property of the synthetic profile and the mechanism together.
    report = replay_requests(SimSpec("dcd", "hp-c2200a", options={"cache": "physical"}), _trace(seconds=12 * 3600))
    arch = report["architecture"]
    read_sectors = arch["read_hits_ram_sectors"] + arch["read_hits_cache_disk_sectors"] + arch["read_hits_data_disk_sectors"]
    assert read_sectors > 1000
    assert arch["read_hits_data_disk_sectors"] / read_sectors > 0.99
