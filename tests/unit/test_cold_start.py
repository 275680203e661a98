"""The cold start of a live run (raidlab.runners.live): the daemon's `settle` op on each
host family, and the order in which run_case unmounts, settles, drops the page cache and
mounts again before the workload. No root, no daemon: the hosts run over memory disks on
the virtual clock; run_case over a recording session and control channel."""

from __future__ import annotations

import contextlib
import types

import pytest

from raidlab import scenarios, sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine.caches import create_vcraid
from raidlab.sched import run_virtual
from raidlab.runners import live, speed
from raidlab.service.daemon import Daemon
from raidlab.service.hosts.cache import CacheHost
from raidlab.service.hosts.md import MdHost
from raidlab.service.spec import ArraySpec
from raidlab.tools.base import CommandResult

KiB, MiB = 1024, 1 << 20


def _daemon(arch: str, disks: int) -> Daemon:
    return Daemon(ArraySpec("t", arch, disks, "none", 8 * MiB, 64 * KiB), "create", None, None)


async def _no_send(_message) -> None:
    pass


def test_settle_of_a_vcraid_drains_its_log_home_and_reports_the_bytes():
    members = [EmulatedDisk(f"d{i}", "none", MemoryBackend(8 * MiB)) for i in range(4)]
    cache_disk = EmulatedDisk("cache", "none", MemoryBackend(1 * MiB))

    async def main():
        async with sched.open_nursery() as nursery:
            for disk in [*members, cache_disk]:
                disk.start(nursery)
            vc = await create_vcraid("v", members, [cache_disk], ram_buffer=64 * KiB, idle_threshold=10.0)
            vc.start(nursery)
            for i in range(40):  # beyond the RAM buffer: on the cache disk and in RAM
                await vc.write(i * 4 * KiB, bytes([i + 1]) * (4 * KiB))
            daemon = _daemon("vcraid", 4)
            daemon.host = CacheHost(daemon)
            daemon.host.target = vc
            daemon.host.busy = sched.Lock()  # the daemon's repair lock, for this kernel run
            before = vc.statistics()
            settled = await daemon.handler_for("settle")({"op": "settle"}, _no_send)
            after = vc.statistics()
            home = await vc.array.read(0, 40 * 4 * KiB)
            nursery.cancel_scope.cancel()
        return before, settled, after, home

    before, settled, after, home = run_virtual(main)
    assert before["cache_disk_used_bytes"] + before["ram_used_bytes"] > 0
    assert settled["drained_bytes"] == 40 * 4 * KiB and settled["seconds"] >= 0
    assert after["ram_used_bytes"] == 0 and after["cache_disk_used_bytes"] == 0
    assert after["cache_disk_blocks_mapped"] == 0
    assert home == b"".join(bytes([i + 1]) * (4 * KiB) for i in range(40))


def test_settle_of_an_md_array_drains_nothing_and_empties_the_drives_write_caches():
    drives = [EmulatedDisk(f"d{i}", "hdd-7200", MemoryBackend(64 * MiB), write_cache=True) for i in range(2)]

    async def main():
        async with sched.open_nursery() as nursery:
            for disk in drives:
                disk.start(nursery)
                await disk.write(0, bytes(64 * KiB))
            daemon = _daemon("md-raid1", 2)
            daemon.host = MdHost(daemon)
            daemon.host.disks = drives
            dirty = [d.statistics()["dirty_bytes"] for d in drives]
            settled = await daemon.handler_for("settle")({"op": "settle"}, _no_send)
            nursery.cancel_scope.cancel()
        return dirty, settled, [d.statistics()["dirty_bytes"] for d in drives]

    dirty, settled, after = run_virtual(main)
    assert all(n > 0 for n in dirty) and after == [0, 0]
    assert settled["drained_bytes"] == 0


# -- run_case's order of steps, over a recording session -----------------------------------

SCENARIO = """
[scenario]
id = "cold"
title = "cold start"
kind = "live"
runner = "vm"
{extra}

[[arch]]
label = "v"
arch = "vcraid"
disks = 3
disk_size = "16M"

[workload]
name = "postmark"
"""


class _Recorder:
    def __init__(self):
        self.steps: list[str] = []


class _Session:
    runner = "vm"
    device = "/dev/vda"
    scratch = "/scratch"

    def __init__(self, recorder: _Recorder):
        self.recorder = recorder

    def exec(self, argv, *, timeout, stdin=None, check=True):
        argv = [str(a) for a in argv]
        if argv[:3] == ["sh", "-c", speed.RUNNER_SCRIPT]:  # the speed probe: 0.5 s of the guest's clock
            self.recorder.steps.append("speed")
            return CommandResult(argv, 0, b"10.00 10.50\n", b"", 0.6)
        if argv[0] != "uname":
            self.recorder.steps.append(argv[-1] if argv[:2] == ["sh", "-c"] else argv[0])
        return CommandResult(argv, 0, b"6.1\n", b"", 0.01)


@pytest.fixture
def recorded(monkeypatch):
    recorder = _Recorder()

    @contextlib.contextmanager
    def scratch_array(entry, runner, **kw):
        yield types.SimpleNamespace(name="cold", path=None), {"arch": entry.arch, "capacity": 1}

    def request(lab, op, **fields):
        recorder.steps.append(op)
        return {"drained_bytes": 12345, "seconds": 0.5, "note": "drained"} if op == "settle" else {"kind": "cache"}

    def run(session, mountpoint, params, progress):
        recorder.steps.append("workload")
        return {"metrics": {}}

    monkeypatch.setattr(live, "scratch_array", scratch_array)
    monkeypatch.setattr(live, "open_session", lambda lab: _Session(recorder))
    monkeypatch.setattr(live, "control", types.SimpleNamespace(request=request))
    monkeypatch.setattr(live, "workloads", types.SimpleNamespace(get=lambda name: types.SimpleNamespace(run=run)))
    return recorder


def _run(extra: str) -> dict:
    scenario = scenarios.loads(SCENARIO.format(extra=extra), check_references=False)
    (planned,) = scenarios.plan_runs(scenario)
    return live.run_case(planned, scenario, "vm", home=None, status=lambda s: None)


def test_run_case_unmounts_settles_drops_the_page_cache_and_mounts_again_before_the_workload(recorded):
    doc = _run("")
    assert recorded.steps == ["mkfs.ext4", "mkdir", "mount", "umount", "settle", "sync", live.DROP_CACHES,
                              "mount",
                              *["speed"] * speed.RUNNER_REPEATS, "status", "workload", "umount", "status"]
    assert doc["cold_start"]["drained_bytes"] == 12345 and doc["cold_start"]["seconds"] == 0.5
    assert "drop_caches_seconds" in doc["cold_start"]
    # the speed probe ran before the workload: 0.5 s of the guest's clock over the VM's loop count
    assert doc["speed"]["runner"] == "vm" and doc["speed"]["runner_loops"] == speed.RUNNER_LOOPS["vm"]
    assert doc["speed"]["runner_us_per_loop"] == round(0.5 / speed.RUNNER_LOOPS["vm"] * 1e6, 3)
    assert doc["speed"]["host_us_per_loop"] > 0
    # the host's steal over the workload replaces the counters taken before it
    share = doc["speed"]["host_steal_share"]  # None when no clock tick passed during the fake workload
    assert "host_cpu_ticks" not in doc["speed"] and (share is None or 0 <= share <= 1)
    assert [c["argv"][0] for c in doc["setup_commands"]] == ["mkfs.ext4", "mkdir", "mount", "umount", "sync",
                                                             "sh", "mount", "umount"]


def test_cold_start_false_keeps_mkfs_mount_workload(recorded):
    doc = _run("cold_start = false")
    assert recorded.steps == ["mkfs.ext4", "mkdir", "mount", *["speed"] * speed.RUNNER_REPEATS, "status", "workload",
                              "umount", "status"]
    assert doc["cold_start"] is None


def test_cold_start_must_be_a_boolean():
    with pytest.raises(scenarios.ScenarioError) as info:
        scenarios.loads(SCENARIO.format(extra='cold_start = "yes"'), check_references=False)
    assert "scenario.cold_start" in str(info.value) and "\n" not in str(info.value)
