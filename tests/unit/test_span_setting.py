"""One span for every drive of an array: "full" spreads a drive's image over its whole stroke,
"start" puts it at the drive's first bytes (md's smallest-member rule on larger drives: a
2000 MiB member of an 18.2 GB drive is its first 2000 MiB). The setting travels in the array's
spec, a scenario's [[arch]] and `raidlab sim`; without it each drive is as the plan says."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from raidlab import scenarios, sched
from raidlab.sched import run_virtual
from raidlab.errors import UsageError
from raidlab.export.serve import ServeRequest
from raidlab.runners.virtual import SimSpec, build_virtual
from raidlab.service.spec import SPEC_FILE, ArraySpec

KiB, MiB = 1024, 1 << 20
BIG, IDE = "ibm-dnes-318350", "maxtor-91020d6"  # 18.2 GB, 10.2 GB


def test_the_array_spec_keeps_the_span_and_an_older_spec_has_none(tmp_path):
    spec = ArraySpec("a", "raid5", 4, BIG, 2000 * MiB, 64 * KiB, span="start")
    spec.save(tmp_path)
    assert ArraySpec.load(tmp_path) == spec
    older = dataclasses.asdict(spec)
    del older["span"]
    (tmp_path / SPEC_FILE).write_text(json.dumps(older))
    assert ArraySpec.load(tmp_path).span is None


def test_a_serve_request_refuses_an_unknown_span_in_one_line():
    with pytest.raises(UsageError) as info:
        ServeRequest(disks=1, model=BIG, size=64 * MiB, span="middle").check()
    assert "middle" in str(info.value) and "\n" not in str(info.value)


def _random_reads(spec: SimSpec) -> tuple[float, set]:
    """Mean seconds of 200 random 4 KiB reads over the whole array, and its drives' spans."""
    async def main():
        async with sched.open_nursery() as nursery:
            built = await build_virtual(spec, nursery)
            rng = random.Random(5)
            t0 = sched.current_time()
            for _ in range(200):
                await built.target.read(rng.randrange(built.target.size // (4 * KiB)) * 4 * KiB, 4 * KiB)
            took = (sched.current_time() - t0) / 200
            spans = {m.statistics()["span"] for m in built.members}
            nursery.cancel_scope.cancel()
        return took, spans

    return run_virtual(main)


def test_members_at_the_start_of_large_drives_seek_less_than_spread_over_them():
    base = SimSpec("raid0", BIG, disks=2, chunk=64 * KiB, disk_size=2000 * MiB)
    full, full_spans = _random_reads(base)
    start, start_spans = _random_reads(dataclasses.replace(base, span="start"))
    assert full_spans == {"full"} and start_spans == {"start"}
    assert start < 0.85 * full  # 2000 MiB of an 18.2 GB stroke: short seeks


def test_without_a_span_a_vcraid_replay_keeps_its_planned_cache_drive_at_the_start():
    spec = SimSpec("vcraid", BIG, disks=3, chunk=64 * KiB, disk_size=64 * MiB,
                   options={"cache_model": IDE, "cache_size": 8 * MiB, "ram_buffer": 512 * KiB})

    async def spans(spec):
        async with sched.open_nursery() as nursery:
            built = await build_virtual(spec, nursery)
            out = {m.statistics()["model"]: m.statistics()["span"] for m in built.members}
            nursery.cancel_scope.cancel()
        return out

    assert run_virtual(lambda: spans(spec)) == {IDE: "start", BIG: "full"}
    assert run_virtual(lambda: spans(dataclasses.replace(spec, span="start"))) == {IDE: "start", BIG: "start"}


def test_a_scenario_arch_takes_a_span_and_refuses_another_in_one_line():
    text = """
[scenario]
id = "sp"
title = "span"
kind = "sim"

[[arch]]
label = "v"
arch = "raid5"
disks = 3
disk_model = "ibm-dnes-318350"
{line}

[workload]
name = "trace"
"""
    assert scenarios.loads(text.format(line=""), check_references=False).archs[0].span is None
    assert scenarios.loads(text.format(line='span = "start"'), check_references=False).archs[0].span == "start"
    with pytest.raises(scenarios.ScenarioError) as info:
        scenarios.loads(text.format(line='span = "middle"'), check_references=False)
    assert info.value.key == "arch[0].span" and "\n" not in str(info.value)


def test_a_sim_scenario_replays_with_the_span():
    from raidlab.runners.sim import _sim_spec

    entry = scenarios.ArchEntry("v", "raid0", 2, BIG, 64 * MiB, 64 * KiB, span="start")
    assert _sim_spec(entry, {}).span == "start"
    assert _sim_spec(dataclasses.replace(entry, span=None), {}).span is None
