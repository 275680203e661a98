"""One write-cache setting for every drive of an array (raidlab.disks.disk.WRITE_CACHE_SETTINGS):
"model" keeps each catalog model's default, "on" and "off" override it on members and cache
disks alike; the setting travels in the array's spec, a scenario's [[arch]] and `raidlab sim`,
and a drive built with it on reports a write before the media."""

from __future__ import annotations

import dataclasses

import pytest

from raidlab import scenarios, sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.disks.disk import write_cache_override
from raidlab.sched import run_virtual
from raidlab.errors import UsageError
from raidlab.runners.virtual import SimSpec, build_virtual
from raidlab.service.hosts.status import write_cache_note
from raidlab.service.spec import SPEC_FILE, ArraySpec

KiB, MiB = 1024, 1 << 20
SCSI, IDE = "ibm-dnes-318350", "maxtor-91020d6"  # VC-RAID Table 1: cache off / on by default


def test_the_setting_is_the_override_of_every_drive():
    assert write_cache_override("model") is None and write_cache_override(None) is None
    assert write_cache_override("on") is True and write_cache_override("off") is False
    with pytest.raises(UsageError) as info:
        write_cache_override("yes")
    assert "yes" in str(info.value) and "\n" not in str(info.value)


def test_the_array_spec_keeps_the_setting_and_an_older_spec_reads_as_model(tmp_path):
    spec = ArraySpec("a", "vcraid", 3, SCSI, 64 * MiB, 64 * KiB, write_cache="off")
    spec.save(tmp_path)
    assert ArraySpec.load(tmp_path) == spec
    older = dataclasses.asdict(spec)
    del older["write_cache"]
    (tmp_path / SPEC_FILE).write_text(__import__("json").dumps(older))
    assert ArraySpec.load(tmp_path).write_cache == "model"


def _write_seconds(setting: str) -> tuple[float, bool]:
    """Seconds a 4 KiB write to a single SCSI drive takes, built by build_virtual with
    `setting`, and the drive's write_cache statistic."""
    async def main():
        async with sched.open_nursery() as nursery:
            built = await build_virtual(SimSpec("disk", SCSI, disk_size=512 * MiB, write_cache=setting), nursery)
            t0 = sched.current_time()
            await built.target.write(300 * MiB, bytes(4 * KiB))
            took = sched.current_time() - t0
            stats = built.members[0].statistics()
            nursery.cancel_scope.cancel()
        return took, stats["write_cache"]

    return run_virtual(main)


def test_a_drive_with_the_cache_on_reports_a_write_before_the_media_and_off_does_not():
    on, on_state = _write_seconds("on")
    off, off_state = _write_seconds("off")
    model, model_state = _write_seconds("model")
    assert on_state and not off_state and not model_state  # the SCSI drive's default is off
    assert on < 1e-3  # bus transfer and command overhead
    assert off > 2e-3 and model == off  # seek and rotation to the media


@pytest.mark.parametrize("setting, members, cache", [("model", False, True), ("on", True, True),
                                                      ("off", False, False)])
def test_a_vcraid_s_members_and_cache_disk_all_follow_the_setting(setting, members, cache):
    async def main():
        async with sched.open_nursery() as nursery:
            built = await build_virtual(SimSpec("vcraid", SCSI, disks=3, chunk=64 * KiB, disk_size=64 * MiB,
                                                options={"cache_model": IDE, "cache_size": 8 * MiB,
                                                         "ram_buffer": 512 * KiB},
                                                write_cache=setting), nursery)
            states = {m.statistics()["model"]: set() for m in built.members}
            for m in built.members:
                states[m.statistics()["model"]].add(m.statistics()["write_cache"])
            nursery.cancel_scope.cancel()
        return states

    assert run_virtual(main) == {SCSI: {members}, IDE: {cache}}


def test_a_scenario_arch_takes_the_setting_and_refuses_another_in_one_line():
    text = """
[scenario]
id = "wc"
title = "write cache"
kind = "sim"

[[arch]]
label = "v"
arch = "vcraid"
disks = 3
disk_model = "ibm-dnes-318350"
{line}

[workload]
name = "trace"
"""
    assert scenarios.loads(text.format(line=""), check_references=False).archs[0].write_cache == "model"
    assert scenarios.loads(text.format(line='write_cache = "on"'), check_references=False).archs[0].write_cache == "on"
    with pytest.raises(scenarios.ScenarioError) as info:
        scenarios.loads(text.format(line='write_cache = "sometimes"'), check_references=False)
    assert info.value.key == "arch[0].write_cache" and "'sometimes'" in str(info.value)
    assert "\n" not in str(info.value) and "model, on, off" in info.value.hint


def test_a_sim_scenario_replays_with_the_setting_and_says_so_in_its_command_line():
    from raidlab.runners.sim import _sim_spec

    entry = scenarios.ArchEntry("v", "raid0", 2, SCSI, 64 * MiB, 64 * KiB, write_cache="on")
    assert _sim_spec(entry, {}).write_cache == "on"
    assert _sim_spec(dataclasses.replace(entry, write_cache="model"), {}).write_cache == "model"


def test_status_says_which_drives_have_the_write_cache_on():
    drives = [EmulatedDisk("d0", SCSI, MemoryBackend(64 * MiB)), EmulatedDisk("d1", SCSI, MemoryBackend(64 * MiB)),
              EmulatedDisk("d2", IDE, MemoryBackend(64 * MiB))]
    same = [EmulatedDisk(f"d{i}", SCSI, MemoryBackend(64 * MiB), write_cache=True) for i in range(2)]
    partition = drives[2].partition(0, MiB, "d2p")
    assert write_cache_note([d.statistics() for d in drives]) == "write cache on d2, off d0 d1"
    assert write_cache_note([d.statistics() for d in same]) == "write cache on"
    assert write_cache_note([partition.statistics()]) == "write cache on"  # its drive's
    assert write_cache_note([EmulatedDisk("n", "none", MemoryBackend(MiB)).statistics()]) == "write cache off"
