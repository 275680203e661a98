"""The seqfile workload in virtual time (raidlab.runners.stream): deterministic, the file's bytes
reach the members as the layout maps them, the host model adds what it says, a shared bus is
accounted, and a sim scenario runs it with the paper's metrics."""

from __future__ import annotations

import pytest

from raidlab import scenarios
from raidlab.errors import UsageError
from raidlab.runners import sim
from raidlab.runners.stream import run_stream
from raidlab.workloads.seqfile import resolve_sim as resolve
from raidlab.runners.virtual import SimSpec
from raidlab.disks.host import HostModel

MODEL = "ibm-ultrastar-9lzx"
KiB = 1024


def _spec(arch: str = "raid0", parts: str = "b1-c1-d1-e1", **kw) -> SimSpec:
    return SimSpec(arch=arch, disk_model=MODEL, chunk=4096, partitions=parts, **kw)


def test_deterministic_and_every_byte_written_and_read_once():
    first, again = run_stream(_spec(), {"file_kb": 2048}), run_stream(_spec(), {"file_kb": 2048})
    for key in ("write_seconds", "read_seconds", "members_write", "members_read"):
        assert first[key] == again[key], key
    written = sum(m["bytes_written"] for m in first["members_write"])
    read = sum(m["bytes_read"] for m in first["members_read"])
    assert written == 2048 * KiB + 4 * KiB        # the file, then its inode block
    assert read == 2048 * KiB + 4 * KiB
    # raid0 with 4 KiB chunks spreads the file evenly
    assert {m["bytes_written"] // KiB for m in first["members_write"]} <= {512, 516}


def test_sa3_puts_less_of_the_file_on_the_slow_partition():
    """SA3's probe measures the slow partition (b8) lower, so it gets fewer of the 100 array
    entries and fewer of the file's bytes than each fast one."""
    report = run_stream(_spec("sa3", "b8-c1-d1-e1"), {"file_kb": 4096, "metadata": False})
    probe = report["arch_state"]["probe"]
    assert probe[0]["bandwidth"] < min(p["bandwidth"] for p in probe[1:])
    shares = [m["bytes_written"] for m in report["members_write"]]
    assert shares[0] < min(shares[1:])
    assert sum(shares) == 4096 * KiB


def test_the_host_adds_the_copy_before_fsync_and_slows_reads():
    plain = run_stream(_spec(), {"file_kb": 4096})
    host = run_stream(_spec(host=HostModel("h", copy_mb_s=50.0)), {"file_kb": 4096})
    copy = 4096 * KiB / 50e6
    assert host["write_copy_seconds"] == pytest.approx(copy)
    # the fsync after the copy starts at another angle of the platters: about the same time
    assert host["write_seconds"] == pytest.approx(plain["write_seconds"] + copy, rel=0.02)
    assert host["read_seconds"] >= copy                       # every block copied on the program's processor
    assert host["read_seconds"] > plain["read_seconds"]
    work = host["host"]["work"]
    assert work["copy"]["bytes"] == 2 * 4096 * KiB           # into the buffer cache, then out to the user
    assert work["copy"]["seconds"] == pytest.approx(2 * copy)
    assert work["request"]["count"] == 2 * (1024 + 1)         # every block and the inode, written and read
    assert plain["host"] is None


def test_a_per_request_cost_takes_a_free_processor():
    one = run_stream(_spec(host=HostModel("h", request_us=500.0)), {"file_kb": 1024})
    two = run_stream(_spec(host=HostModel("h", processors=2, request_us=500.0)), {"file_kb": 1024})
    busy = [p["busy_s"] for p in two["host"]["processors"]]
    assert sum(busy) == pytest.approx(2 * 257 * 500e-6)       # 256 blocks and the inode, each way
    assert min(busy) > 0                                       # both processors took requests
    assert two["write_seconds"] < one["write_seconds"]


def test_a_shared_bus_is_reported():
    report = run_stream(_spec(bus="shared"), {"file_kb": 4096})
    bus = report["bus"]
    assert bus["rate_mb_s"] == 80 and bus["mode"] == "overlap"
    assert bus["bytes"] == 2 * (4096 * KiB + 4 * KiB)            # the file and the inode, written and read
    assert bus["transfers"] > 0 and 0 < bus["utilization"] < 1


@pytest.mark.parametrize("params,words", [
    ({"file_kb": 10, "block_kb": 4}, "whole number"),
    ({"fiel_kb": 4}, "no parameter"),
    ({"read_depth": 0}, "read_depth. must be >= 1"),
])
def test_bad_parameters_are_refused(params, words):
    with pytest.raises(UsageError, match=words):
        resolve(params)


def test_a_file_that_does_not_fit_is_refused():
    with pytest.raises(UsageError, match="does not fit"):
        run_stream(_spec(), {"file_kb": 1024 * 1024})


def test_the_shipped_scenarios_run_it_with_the_papers_metrics(tmp_path):
    scn = scenarios.load("scenarios/sa-raid-figures.toml")
    entry = scn.arch("sa3-b8c1d1e1")
    doc = sim.run_case(scn, entry, scn.case("64k"), repetition=2)
    assert doc["workload"] == "seqfile" and doc["params"]["seed"] == 1
    metrics = doc["metrics"]
    for name in ("write_mb_s", "read_mb_s", "write_read_mb_s", "bus_utilization", "probe_mb_s_d0"):
        assert metrics[name]["value"] > 0, name
    assert metrics["probe_mb_s_d0"]["value"] < metrics["probe_mb_s_d1"]["value"]
    raw = scenarios.load("scenarios/sa-raid-raw-partitions.toml")
    assert [a.partitions for a in raw.archs] == [str(k) for k in range(1, 9)]


def test_random_reads_after_the_file_are_seeded_and_counted():
    # 24 MiB: more than the four drives' 4 MB buffers hold after the sequential read
    params = {"file_kb": 24576, "random_reads": 200, "random_kb": 8}
    one = run_stream(_spec(), params)
    assert run_stream(_spec(), params)["random_seconds"] == one["random_seconds"]
    other = run_stream(_spec(), {**params, "seed": 1})
    assert other["random_seconds"] != one["random_seconds"]
    assert sum(m["bytes_read"] for m in one["members_random"]) == 200 * 8 * KiB
    assert one["random_mb_s"] == pytest.approx(200 * 8 * KiB / one["random_seconds"] / 1e6)
    assert one["random_mean_ms"] > 1                                    # mostly seeks, not buffer hits
    assert "random_seconds" not in run_stream(_spec(), {"file_kb": 1024})


def _without_host(path: str) -> str:
    """A scenario's text without its [host] table (the table ends at the next blank line)."""
    text = scenarios.load(path).text
    start = text.index("\n[host]\n")
    return text[:start] + text[text.index("\n\n", start + 1):]


def test_a_scenarios_host_table_is_charged_and_recorded(tmp_path):
    text = _without_host("scenarios/sa-raid-figures.toml")
    hosted = scenarios.loads(text + '\n[host]\nmodel = "sa-raid-dual-pentium"\ncopy_mb_s = 40\n'
                                    'calibrated = "a test\'s value"\n', tmp_path / "hosted.toml")
    entry, case = hosted.arch("raid0-b1c1d1e1"), hosted.case("1m")
    doc = sim.run_case(hosted, entry, case)
    host = doc["raw"]["stream"]["host"]
    assert host["model"]["name"] == "sa-raid-dual-pentium" and host["model"]["copy_mb_s"] == 40
    assert host["model"]["sources"]["copy_mb_s"] == "a test's value"
    assert doc["metrics"]["host_copy_s"]["value"] == pytest.approx(2 * 1024 * KiB / 40e6)
    assert doc["metrics"]["read_mb_s"]["value"] < 40
    with pytest.raises(scenarios.ScenarioError, match="no parameter"):
        scenarios.loads(text + '\n[host]\nmodel = "none"\ncopy_rate = 3\n', tmp_path / "bad.toml")
    with pytest.raises(scenarios.ScenarioError, match="unknown host"):
        scenarios.loads(text + '\n[host]\nmodel = "pentium-9000"\n', tmp_path / "bad.toml")


def test_a_claim_the_host_was_calibrated_on_is_shown_not_judged(tmp_path):
    from raidlab.report import claims as claimsmod
    from raidlab.report.results import Stat

    text = _without_host("scenarios/sa-raid-figures.toml")
    hosted = scenarios.loads(text + '\n[host]\nmodel = "sa-raid-dual-pentium"\ncopy_mb_s = 65\n'
                                    'calibrated = "the read ceiling"\ncalibrated_on = ["read-ceiling"]\n',
                             tmp_path / "hosted.toml")
    claim = next(c for c in hosted.claims if c.id == "read-ceiling")
    stats = {("raid0-b1c1d1e1", "256m", "read_mb_s"): Stat(n=1, mean=64.8, sd=None, min=64.8, max=64.8, unit="MB/s")}
    verdict = claimsmod.evaluate(claim, stats, calibration=set(hosted.host["calibrated_on"]))
    assert verdict.verdict == claimsmod.CALIBRATION and "64.8" in verdict.measured
    assert claimsmod.evaluate(claim, stats).verdict == claimsmod.HOLDS
    with pytest.raises(scenarios.ScenarioError, match="no claim"):
        scenarios.loads(text + '\n[host]\nmodel = "none"\ncalibrated = "x"\ncalibrated_on = ["nope"]\n',
                        tmp_path / "bad.toml")
