"""TSS policies (raidlab.policies) against a device in virtual time, through the same
control interface a live policy process reaches over the socket (TSSControl)."""

from __future__ import annotations

import random

import pytest

from raidlab import sched
from raidlab.engine.tss.control import TSSControl
from raidlab.engine.tss.maptable import CRAID5, INVALID, RAID1, RAID5
from raidlab.errors import UsageError
from raidlab.policies import FiveMinutePolicy, WatermarkPolicy
from raidlab.policies.five_minute import break_even_interval
from raidlab.policies.watermark import check_watermarks

from test_tss_device import make_device, payload, run, check_redundancy


async def filled(nursery, stripes=64, logical=40, used=30):
    device = make_device(nursery, stripes=stripes, logical=logical)
    rng = random.Random(4)
    reference = bytearray(device.size)
    size = device.geometry.data_bytes
    for ls in range(used):
        data = payload(rng, size, 0.8)
        await device.write(ls * size, data)
        reference[ls * size:(ls + 1) * size] = data
    return device, reference


def shares(device) -> dict[str, float]:
    counts = device.table.counts
    valid = sum(n for kind, n in counts.items() if kind != INVALID)
    return {kind: counts[kind] / valid for kind in (RAID1, RAID5, CRAID5)}


def test_the_watermark_policy_brings_every_personality_within_its_marks():
    async def body(nursery):
        device, reference = await filled(nursery)
        assert device.table.counts[RAID1] == 30  # all RAID1 while space lasted
        policy = WatermarkPolicy()
        made = await policy.check(TSSControl(device))
        assert made
        for kind, share in shares(device).items():
            lower, upper = policy.watermarks[kind]
            assert lower - 1 / 30 <= share <= upper + 1 / 30, (kind, share)
        again = await policy.check(TSSControl(device))
        assert again == {}  # conforming: the static policy does nothing more
        assert await device.read(0, device.size) == reference
        check_redundancy(device)

    run(body)


def test_the_five_minute_policy_moves_idle_stripes_down_and_busy_ones_up():
    async def body(nursery):
        device, reference = await filled(nursery)
        control = TSSControl(device)
        policy = FiveMinutePolicy(raid1_raid5=20, raid5_craid5=350)
        size = device.geometry.data_bytes
        await control.age()
        await control.degrade()  # a fresh window for both fields
        for ls in range(5):      # five stripes stay busy
            await device.read(ls * size, 512)
        await policy.upper_turn(control)
        assert [device.table[ls].kind for ls in range(5)] == [RAID1] * 5
        assert all(device.table[ls].kind == RAID5 for ls in range(5, 30))
        for ls in (5, 6):       # two RAID5 stripes come back to life
            await device.read(ls * size, 512)
        await policy.lower_turn(control)
        assert device.table[5].kind == RAID5 and device.table[6].kind == RAID5
        assert all(device.table[ls].kind == CRAID5 for ls in range(7, 30))
        for ls in (5, 6, 7):               # 7, a cRAID5 stripe, is read too ...
            await device.read(ls * size, 512)
        await policy.lower_turn(control)   # ... and promoted at the next turn
        assert device.table[7].kind == RAID5
        assert device.table[5].kind == RAID5 and device.table[6].kind == RAID5
        await policy.upper_turn(control)   # 5 and 6 were accessed since the last aging,
        assert device.table[5].kind == RAID1 and device.table[6].kind == RAID1
        assert [device.table[ls].kind for ls in range(5)] == [RAID5] * 5  # 0-4 no longer
        assert await device.read(0, device.size) == reference
        check_redundancy(device)
        return policy.moves

    moves = run(body)
    assert moves == {"raid1->raid5": 30, "raid5->craid5": 23, "craid5->raid5": 1, "raid5->raid1": 2}


def test_policies_run_on_the_virtual_clock_beside_a_workload():
    async def body(nursery):
        device, reference = await filled(nursery, stripes=96, logical=60, used=40)
        rng = random.Random(9)
        size = device.geometry.data_bytes
        async with sched.open_nursery() as work:
            work.start_soon(FiveMinutePolicy(raid1_raid5=2, raid5_craid5=7).run, TSSControl(device))
            for _ in range(300):
                ls = rng.choice(range(8)) if rng.random() < 0.8 else rng.randrange(40)
                if rng.random() < 0.5:
                    data = payload(rng, 1024, 0.8)
                    offset = ls * size + rng.randrange(0, size // 512 - 2) * 512
                    await device.write(offset, data)
                    reference[offset:offset + len(data)] = data
                else:
                    assert await device.read(ls * size, size) == reference[ls * size:(ls + 1) * size]
                await sched.sleep(0.1)
            work.cancel_scope.cancel()
        check_redundancy(device)
        return device.table.counts

    counts = run(body)
    assert counts[CRAID5] > 0 and counts[RAID1] > 0


@pytest.mark.parametrize("marks", [
    {RAID1: (0.6, 0.5), RAID5: (0.3, 0.6), CRAID5: (0.05, 0.2)},    # lower above upper
    {RAID1: (0.2, 1.2), RAID5: (0.3, 0.6), CRAID5: (0.05, 0.2)},    # over 100%
    {RAID1: (0.5, 0.6), RAID5: (0.4, 0.6), CRAID5: (0.2, 0.3)},     # lowers add up past 100%
    {RAID1: (0.1, 0.3), RAID5: (0.1, 0.3), CRAID5: (0.05, 0.2)},    # uppers cannot hold everything
])
def test_impossible_watermarks_are_refused(marks):
    with pytest.raises(UsageError):
        check_watermarks(marks)


def test_break_even_interval():
    # Table 3's /var figures, a 48 KiB stripe, a 1.28 GB drive: about two minutes for RAID1
    t = break_even_interval(2.5, 1.25, 7.04e-3, 13.47e-3, 48 * 1024, 1_281_736_704)
    assert 130 < t < 140
    with pytest.raises(UsageError):
        break_even_interval(1.0, 1.25, 7.04e-3, 13.47e-3, 48 * 1024, 10**9)
    with pytest.raises(UsageError):
        FiveMinutePolicy(raid1_raid5=0)


# ---- in a trace replay (raidlab sim) ----------------------------------------------------

def test_a_replay_runs_a_policy_beside_the_trace_and_writes_data_of_the_stated_compressibility():
    from raidlab.runners.virtual import Payload, SimSpec, replay_requests
    from raidlab.traces.synth import synth

    requests = list(synth("cello", 300, seed=3, device_size=40 << 20))
    common = dict(disks=3, chunk=16 * 1024, disk_size=64 << 20, compact=10.0,
                  options={"mode": "craid5", "logical_stripes": 1300})
    dense = replay_requests(SimSpec("tss", "quantum-fireball-1280s", compressibility=0.0, **common), requests)
    sparse = replay_requests(SimSpec("tss", "quantum-fireball-1280s", compressibility=0.8, **common), requests)
    used = [r["architecture"]["space"]["physical_craid5"] for r in (dense, sparse)]
    assert used[1] < used[0] / 2  # well-compressible data take far fewer sub-stripes
    assert sparse["compressibility"] == 0.8 and sparse["policy"] is None

    managed = replay_requests(SimSpec("tss", "quantum-fireball-1280s", disks=3, chunk=16 * 1024,
                                      disk_size=64 << 20, compact=10.0, compressibility=0.5,
                                      policy="five-minute", policy_options={"raid1_raid5": 2, "raid5_craid5": 5}),
                              requests)
    moves = managed["policy"]["moves"]
    assert moves.get("raid1->raid5", 0) > 0 and managed["architecture"]["personalities"]["craid5"] > 0

    payload = Payload(0.5, seed=1)
    assert payload(4096, 8192) == Payload(0.5, seed=1)(4096, 8192)   # same place, same bytes
    assert payload(0, 8192) != payload(8192, 8192)
    zero_sectors = sum(payload(0, 512 * 1000)[i:i + 512] == bytes(512) for i in range(0, 512 * 1000, 512))
    assert 400 < zero_sectors < 600


def test_a_replay_refuses_a_policy_where_there_is_no_tss_and_bad_policy_options():
    from raidlab.policies import make_policy
    from raidlab.runners.virtual import SimSpec, replay_requests
    from raidlab.traces.formats import Request

    with pytest.raises(UsageError, match="no control interface"):
        replay_requests(SimSpec("raid5", "none", disks=3, policy="watermark"), [Request(0, "read", 0, 512)])
    with pytest.raises(UsageError):
        make_policy("sometimes")
    with pytest.raises(UsageError):
        make_policy("watermark", {"raid1": "60:50"})
    with pytest.raises(UsageError):
        make_policy("five-minute", {"bogus": 1})
    assert make_policy("watermark", {"raid1": "20:50", "period": "2"}).period == 2.0


def test_a_sim_scenario_names_a_policy_per_arch_and_the_data_per_case(tmp_path):
    from raidlab import scenarios
    from raidlab.runners.sim import run_case

    text = """
[scenario]
id = "tss-policy-check"
title = "policy per arch"
kind = "sim"
runner = "native"

[[arch]]
label = "tss-5min"
arch = "tss"
disks = 3
disk_model = "quantum-fireball-1280s"
disk_size = "64M"
chunk = "16K"
options = { log = "on", writes = "async" }
policy = "five-minute"
policy_options = { raid1_raid5 = 2, raid5_craid5 = 5 }

[workload]
name = "trace"
params = { compressibility = 0.4, compact = 10 }

[[case]]
name = "cello"
params = { profile = "cello", duration = "5m" }
"""
    def load(body: str):
        path = tmp_path / "tss.toml"
        path.write_text(body)
        return scenarios.load(path)

    scenario = load(text)
    [arch] = scenario.archs
    assert arch.policy == "five-minute"
    result = run_case(scenario, arch, scenario.cases[0])
    metrics = {k: v["value"] for k, v in result["metrics"].items()}
    assert metrics["migrations"] > 0 and metrics["space_overhead"] > 1
    replay = result["raw"]["replay"]
    assert replay["policy"]["moves"] and replay["compressibility"] == 0.4
    assert "--policy" in result["raw"]["equivalent_commands"][-1]
    with pytest.raises(UsageError, match="no option 'bogus'"):
        load(text.replace("raid5_craid5 = 5", "bogus = 5"))
    with pytest.raises(UsageError, match="compressibility"):
        load(text.replace("compressibility = 0.4", "compressibility = 1.4"))
    with pytest.raises(UsageError, match="need the data log"):
        load(text.replace('log = "on", ', ""))


LIVE = """
[scenario]
id = "tss-live-policy"
title = "a live policy"
kind = "live"
runner = "native"

[[arch]]
label = "tss"
arch = "ARCH"
disks = 3
disk_size = "48M"
chunk = "16K"
policy = "five-minute"
policy_options = { raid1_raid5 = 1, raid5_craid5 = 2 }

[workload]
name = "replay"
params = { profile = "cello-var", duration = "20s" }
filesystem = "none"

[[case]]
name = "var"
"""


def test_a_live_scenario_runs_a_policy_only_beside_an_array_with_the_control_interface(tmp_path):
    from raidlab import scenarios

    path = tmp_path / "live.toml"
    path.write_text(LIVE.replace("ARCH", "tss"))
    [arch] = scenarios.load(path).archs
    assert arch.policy == "five-minute" and arch.policy_options == {"raid1_raid5": 1, "raid5_craid5": 2}
    path.write_text(LIVE.replace("ARCH", "raid5"))
    with pytest.raises(UsageError, match="raid5 has no control interface for a policy"):
        scenarios.load(path)
    path.write_text(LIVE.replace("ARCH", "tss").replace("raid1_raid5 = 1", "bogus = 1"))
    with pytest.raises(UsageError, match="bogus"):
        scenarios.load(path)
