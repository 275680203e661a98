"""The host in virtual time (raidlab.disks.host): every charge takes what the model says on
the processor that does it, a busy processor delays the next charge, two processors work at
once, and every catalog number carries its provenance."""

from __future__ import annotations

import pytest

from raidlab import sched
from raidlab.disks import host as hosts
from raidlab.disks.host import Host, HostModel
from raidlab.errors import UnknownModelError, UsageError

MB = 1_000_000


def _run(main):
    """Run `main()` under raidlab's virtual-time kernel; (virtual seconds, its result)."""
    async def timed():
        t0 = sched.current_time()
        result = await main()
        return sched.current_time() - t0, result
    return sched.run_kernel(timed)


def test_a_copy_of_n_bytes_costs_n_over_the_copy_rate():
    h = Host(HostModel("h", copy_mb_s=50.0))
    seconds, end = _run(lambda: h.charge("copy", 10 * MB))
    assert seconds == pytest.approx(0.2)
    stats = h.statistics(elapsed=seconds)
    assert stats["work"]["copy"] == {"count": 1, "bytes": 10 * MB, "seconds": pytest.approx(0.2)}
    assert stats["processors"][0]["busy_s"] == pytest.approx(0.2)
    assert stats["processors"][0]["utilization"] == pytest.approx(1.0)


def test_a_request_costs_its_per_request_and_interrupt_cost():
    h = Host(HostModel("h", request_us=40.0, interrupt_us=10.0))
    seconds, _ = _run(lambda: h.charge("request"))
    assert seconds == pytest.approx(50e-6)


def test_a_message_costs_per_message_and_per_byte():
    model = HostModel("h", message_us=100.0, message_mb_s=4.0)
    assert model.seconds("message", 4 * MB) == pytest.approx(1.0 + 100e-6)


def test_free_work_takes_no_time_but_is_counted():
    h = Host(HostModel("h"))
    seconds, _ = _run(lambda: h.charge("parity", MB))
    assert seconds == 0.0
    assert h.statistics()["work"]["parity"]["count"] == 1


def test_a_busy_processor_delays_the_next_charge():
    h = Host(HostModel("h", copy_mb_s=10.0))
    ends = []

    async def main():
        async with sched.open_nursery() as n:
            for _ in range(3):
                n.start_soon(lambda: _record(h.charge("copy", MB, cpu=0), ends))
    _run(main)
    assert sorted(ends) == pytest.approx([0.1, 0.2, 0.3])
    assert h.statistics()["processors"][0]["wait_s"] == pytest.approx(0.1 + 0.2)


def test_two_processors_work_at_once_and_the_soonest_free_one_is_taken():
    h = Host(HostModel("h", processors=2, copy_mb_s=10.0))
    ends = []

    async def main():
        async with sched.open_nursery() as n:
            for _ in range(4):
                n.start_soon(lambda: _record(h.charge("copy", MB), ends))
    seconds, _ = _run(main)
    assert seconds == pytest.approx(0.2)
    assert sorted(ends) == pytest.approx([0.1, 0.1, 0.2, 0.2])
    busy = [p["busy_s"] for p in h.statistics()["processors"]]
    assert busy == pytest.approx([0.2, 0.2])


def test_a_program_is_sliced_so_kernel_work_waits_at_most_one_slice():
    h = Host(HostModel("h", copy_mb_s=1000.0))
    when = {}

    async def kernel_work():
        await sched.sleep(0.0105)
        started = sched.current_time()
        await h.charge("copy", 1000, cpu=0)
        when["kernel"] = sched.current_time() - started

    async def main():
        async with sched.open_nursery() as n:
            n.start_soon(_program, h)
            n.start_soon(kernel_work)
    seconds, _ = _run(main)
    assert when["kernel"] <= hosts.PROGRAM_SLICE_S + 1e-6 + 1e-9
    assert seconds == pytest.approx(0.05 + 1e-6)


async def _program(h: Host) -> None:
    await h.program(0.05, cpu=0)


def test_cost_scale_multiplies_every_charge():
    model = HostModel("h", copy_mb_s=100.0, request_us=10.0, cost_scale=2.0)
    assert model.seconds("copy", MB) == pytest.approx(0.02)
    assert model.seconds("request") == pytest.approx(20e-6)


async def _record(awaitable, out: list) -> None:
    out.append(await awaitable)


def test_every_catalog_number_has_its_provenance():
    for name in hosts.names():
        model = hosts.get(name)
        sources = dict(model.sources)
        for key in hosts.FIELDS:
            if key == "cost_scale":
                continue
            assert sources.get(key), f"{name}.{key} has no source or assumption"


def test_catalog_hosts_of_the_papers():
    assert hosts.get("sa-raid-dual-pentium").processors == 2
    tss = hosts.get("tss-pentium-75")
    assert (tss.processors, tss.compress_mb_s, tss.decompress_mb_s) == (1, 7.7, 25.0)
    node = hosts.get("raidx-pentium-node")
    # one remote 32 KiB request: a message each way at both ends, as the RAID-x scenarios state
    per_request = 2 * node.seconds("message", 0) + node.seconds("message", 32 * 1024) - node.message_us * 1e-6
    assert 32 * 1024 / per_request / MB == pytest.approx(3.95, abs=0.01)


def test_a_scenario_replaces_values_and_says_why():
    model = hosts.resolve({"model": "sa-raid-dual-pentium", "copy_mb_s": 65,
                           "calibrated": "raid0 b1-c1-d1-e1 256 MB read"})
    assert model.copy_mb_s == 65.0
    assert dict(model.sources)["copy_mb_s"] == "raid0 b1-c1-d1-e1 256 MB read"
    assert hosts.resolve(None) is None


def test_bad_host_tables_are_refused():
    with pytest.raises(UnknownModelError):
        hosts.resolve({"model": "pentium-9000"})
    with pytest.raises(UsageError, match="no parameter"):
        hosts.resolve({"model": "none", "copy_rate": 3})
    with pytest.raises(UsageError, match="model"):
        hosts.resolve({"copy_mb_s": 3})
    with pytest.raises(UsageError, match="negative"):
        hosts.resolve({"model": "none", "copy_mb_s": -1})
    with pytest.raises(UsageError, match="not a number"):
        hosts.resolve({"model": "none", "copy_mb_s": "fast"})


def test_a_message_that_holds_no_processor_is_a_delay_many_take_at_once():
    h = Host(HostModel("h", message_us=1000.0, message_holds_cpu=False))
    ends = []

    async def main():
        async with sched.open_nursery() as n:
            for _ in range(3):
                n.start_soon(lambda: _record(h.charge("message", 0, cpu=0), ends))
    seconds, _ = _run(main)
    assert seconds == pytest.approx(1e-3) and ends == pytest.approx([1e-3] * 3)
    stats = h.statistics()
    assert stats["processors"][0]["busy_s"] == 0.0 and stats["message_delay_s"] == pytest.approx(3e-3)
    with pytest.raises(UsageError, match="true or false"):
        hosts.resolve({"model": "none", "message_holds_cpu": "no"})


def test_a_replay_charges_every_request_on_the_host_and_a_free_host_changes_nothing():
    from raidlab.runners.virtual import SimSpec, replay_requests
    from raidlab.traces.synth import synth

    def run(model):
        spec = SimSpec(arch="disk", disk_model="hp-c2200a", host=model)
        return replay_requests(spec, synth("hplajw", 60, 1))

    bare, free = run(None), run(hosts.get("dcd-simulator"))
    assert free["response"] == bare["response"] and bare["host"] is None
    requests = free["trace"]["requests"]
    assert free["host"]["work"]["request"]["count"] == requests
    dear = run(HostModel("h", request_us=500.0))
    assert dear["host"]["processors"][0]["busy_s"] == pytest.approx(requests * 500e-6)
    assert dear["response"]["write"]["mean_ms"] > bare["response"]["write"]["mean_ms"] + 0.4


def test_raidlab_sim_takes_a_host_and_its_values(tmp_path, capsys):
    import json

    from raidlab.cli import main
    from raidlab.traces.formats import write_raidlab
    from raidlab.traces.synth import synth

    trace = tmp_path / "t.trace"
    with trace.open("w") as out:
        write_raidlab(synth("hplajw", 120, 1), out)
    argv = ["sim", "--arch", "disk", "--disk-model", "hp-c2200a", "--trace", str(trace), "--json"]
    assert main(argv + ["--host", "dcd-simulator", "--host-option", "request_us=500"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["host"]["model"]["request_us"] == 500
    assert report["host"]["processors"][0]["busy_s"] == pytest.approx(report["trace"]["requests"] * 500e-6)
    assert main(argv + ["--host-option", "request_us=500"]) == 2
    assert "--host-option without --host" in capsys.readouterr().err
