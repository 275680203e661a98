"""VC-RAID mcd with `cache_models` (§4.1: "two logical partitions, one from each of the IDE
disks, are used as cache disks"): option parsing and validation, member planning (the
cache partitions on separate drives of the given models, the raid5 drives without cache),
the live host's build/assemble/fail/status on in-memory drives, and the replay's layout."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raidlab import archs, sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.archs.caching import arch_options
from raidlab.service.hosts.cache import CacheHost
from raidlab.service.hosts.status import placement_line
from raidlab.service.spec import ArraySpec
from raidlab.sched import run_virtual
from raidlab.errors import UnknownModelError, UsageError

KiB, MiB = 1024, 1 << 20
IDE = ["maxtor-91366u4", "maxtor-91020d6"]  # VC-RAID Table 1's two IDE disks
TABLE1 = ["ibm-dnes-318350", "ibm-dnes-309170", "seagate-st52160n", "seagate-st32151n"]
SIZE = 16 * MiB


def validate(options: dict, disks: int = 4) -> None:
    archs.validate("vcraid", disks, SIZE, 64 * KiB, {"cache_size": "4M", "ram_buffer": "512K", **options})


def plan_members(disks: int, disk_size: int, disk_model: str, options: dict) -> list[tuple[str, int]]:
    """(model, bytes) of each live member image d0, d1, ..."""
    config = archs.Config("vcraid", disks, disk_size, 64 * KiB, options, disk_model)
    return [(drive.model, drive.size) for drive in archs.get("vcraid").plan(config, archs.LIVE)]


# ------------------------------------------------------------------------------ validation


@pytest.mark.parametrize("value", [IDE, tuple(IDE), ",".join(IDE), " maxtor-91366u4 , maxtor-91020d6 "])
def test_a_list_of_models_is_read_from_toml_json_or_the_command_line(value):
    opts = arch_options("vcraid", {"config": "mcd", "cache_models": value})
    assert opts["cache_models"] == tuple(IDE) and opts["cache_disks"] == 2
    validate({"config": "mcd", "cache_models": value})
    # a consistent cache_disks is accepted
    assert arch_options("vcraid", {"config": "mcd", "cache_models": value, "cache_disks": 2})["cache_disks"] == 2
    validate({"config": "mcd", "cache_models": value, "cache_disks": "2"})


def test_three_cache_drives_split_the_cache_in_three():
    opts = arch_options("vcraid", {"config": "mcd", "cache_models": ["ssd"] * 3})
    assert opts["cache_disks"] == 3
    members = plan_members(3, SIZE, "none", {"config": "mcd", "cache_models": ["ssd"] * 3,
                                                        "cache_size": "6M"})
    assert members == [("none", SIZE)] * 3 + [("ssd", 2 * MiB)] * 3


def test_an_unknown_model_is_one_line():
    with pytest.raises(UnknownModelError) as info:
        validate({"config": "mcd", "cache_models": ["maxtor-91366u4", "zip-drive"]})
    assert info.value.fields["model"] == "zip-drive" and "\n" not in str(info.value)


@pytest.mark.parametrize("options, words", [
    ({"config": "mcd", "cache_models": IDE, "cache_disks": 3}, "cache_disks=3 conflicts with cache_models"),
    ({"config": "mcd", "cache_models": ",".join(IDE), "cache_disks": 1}, "cache_disks=1 conflicts"),
    ({"config": "mcd", "cache_models": ["maxtor-91366u4"]}, "at least two disks"),
    ({"config": "mcd", "cache_models": "maxtor-91366u4,,ssd"}, "empty model name"),
    ({"config": "mcd", "cache_models": 5}, "not a list of disk models"),
    ({"config": "mcd", "cache_models": IDE, "cache_model": "ssd"}, "mcd has no cache_model"),
    ({"config": "scd", "cache_models": IDE}, "cache_models is for config=mcd"),
    ({"config": "1c", "cache_models": IDE}, "cache_models is for config=mcd"),
    ({"config": "scd", "cache_disks": 3}, "cache_disks is for config=mcd, not config=scd"),
    ({"config": "1d", "cache_disks": 2}, "cache_disks is for config=mcd, not config=1d"),
])
def test_bad_cache_models_are_one_clear_line(options, words):
    with pytest.raises(UsageError) as info:
        validate(options)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_dcd_has_no_cache_models():
    with pytest.raises(UsageError) as info:
        arch_options("dcd", {"cache_models": IDE})
    assert "dcd has no option 'cache_models'" in str(info.value)


def test_mcd_without_cache_models_is_unchanged():
    opts = arch_options("vcraid", {"config": "mcd"})
    assert opts["cache_models"] is None and opts["cache_disks"] == 2
    members = plan_members(4, SIZE, ",".join(TABLE1), {"config": "mcd", "cache_size": "4M"})
    assert members == [(TABLE1[0], SIZE + 2 * MiB), (TABLE1[1], SIZE + 2 * MiB), (TABLE1[2], SIZE), (TABLE1[3], SIZE)]
    members = plan_members(4, SIZE, "none", {"config": "mcd", "cache_size": "6M", "cache_disks": 3})
    assert [s for _, s in members] == [SIZE + 2 * MiB] * 3 + [SIZE]
    with pytest.raises(UsageError) as info:
        validate({"config": "mcd", "cache_disks": 5})
    assert "cannot put cache partitions on 5 disks of 4" in str(info.value)
    with pytest.raises(UsageError) as info:
        validate({"config": "mcd", "cache_model": "ssd"})
    assert "mcd has no cache_model" in str(info.value)


# ------------------------------------------------------------------------------ planning


def test_cache_partitions_are_separate_drives_of_the_given_models():
    gib = 1 << 30
    members = plan_members(4, gib, ",".join(TABLE1),
                           {"config": "mcd", "cache_models": IDE, "cache_size": "200M"})
    # the raid5 drives d0..d3: their models, S bytes each, no cache partition after them
    assert members[:4] == [(m, gib) for m in TABLE1]
    # d4, d5: one drive per IDE model, each one partition of cache_size / 2
    assert members[4:] == [(IDE[0], 100 * MiB), (IDE[1], 100 * MiB)]


# ------------------------------------------------------------- the live host, in memory


def _host(options: dict, disks: int = 4) -> CacheHost:
    spec = ArraySpec("m", "vcraid", disks, "none", SIZE, 64 * KiB,
                     options={"cache_size": "4M", "ram_buffer": "512K", **options})
    host = CacheHost(SimpleNamespace(spec=spec, status=lambda _m: None, home=None))
    # as raidlab.export.serve.build_disks makes them: one EmulatedDisk dK per planned member
    host.drives = [EmulatedDisk(f"d{k}", model, MemoryBackend(size))
                   for k, (model, size) in enumerate(plan_members(disks, SIZE, "none", spec.options))]
    return host


def _run(host: CacheHost, body):
    async def main():
        async with sched.open_nursery() as nursery:
            host.session = SimpleNamespace(nursery=nursery)
            for d in host.drives:
                d.start(nursery)
            result = await body(nursery)
            nursery.cancel_scope.cancel()
        return result

    return run_virtual(main)


def test_host_serves_mcd_from_the_cache_drives_and_recovers_from_them():
    host = _host({"config": "mcd", "cache_models": IDE, "destage": "off"})
    data = bytes(range(256)) * 64  # 16 KiB

    async def create(nursery):
        await host.build("create")
        for i in range(8):
            await host.target.write(i * 256 * KiB, data)
        await host.target.flush()
        return host.target.statistics()

    stats = _run(host, create)
    assert len(stats["level1_per_disk"]) == 2 and all(n > 0 for n in stats["level1_per_disk"])
    assert stats["cache_disk_used_bytes"] > 0  # destage=off: the data waits on the cache drives
    placement = host.cache_placement()
    assert [(p["drive"], p["model"], p["whole_drive"], p["bytes"]) for p in placement] == [
        ("d4", IDE[0], True, 2 * MiB), ("d5", IDE[1], True, 2 * MiB)]
    assert placement_line(placement).startswith("cache drives: d4 (maxtor-91366u4, 2048 KiB), d5 (maxtor-91020d6")
    # the raid5 is the four whole drives d0..d3 (no partition of them holds cache)
    assert [m.name for m in host.target.array.members] == ["d0", "d1", "d2", "d3"]
    # the log writes went to d4 and d5: with destage off the data is on them, not on d0..d3
    probe = data[:1024]
    on = [any(probe in bytes(c) for c in d.backend._chunks.values()) for d in host.drives]
    assert on == [False] * 4 + [True, True]

    # assemble (crash recovery, §3.4) from the same images: the cached blocks reach the raid5
    images = [d.backend for d in host.drives]
    again = _host({"config": "mcd", "cache_models": IDE, "destage": "off"})
    again.drives = [EmulatedDisk(d.name, d.model.name, backend) for d, backend in zip(host.drives, images)]

    async def assemble(nursery):
        await again.build("assemble")
        return [await again.target.read(i * 256 * KiB, len(data)) for i in range(8)]

    assert _run(again, assemble) == [data] * 8
    assert again.recovered["blocks"] > 0


def test_fail_of_an_array_drive_is_allowed_and_of_a_cache_drive_refused():
    host = _host({"config": "mcd", "cache_models": IDE})

    async def body(nursery):
        await host.build("create")
        out = {}
        with pytest.raises(UsageError) as info:  # an unmirrored cache drive
            await host.op_fail({"disk": 4}, None)
        out["cache"] = str(info.value)
        out["d0"] = await host.op_fail({"disk": 0}, None)  # holds no cache: the raid5 survives it
        return out

    out = _run(host, body)
    assert "not mirrored" in out["cache"]
    assert out["d0"]["raid5_failed_members"] == [0] and out["d0"]["state"] == "degraded"

    # without cache_models d0 holds a cache partition: refused, as before
    plain = _host({"config": "mcd"})

    async def refused(nursery):
        await plain.build("create")
        with pytest.raises(UsageError) as info:
            await plain.op_fail({"disk": 0}, None)
        return str(info.value), plain.cache_placement()

    message, placement = _run(plain, refused)
    assert "holds a cache partition" in message
    assert [(p["cache"], p["drive"], p["whole_drive"], p["offset"]) for p in placement] == [
        ("d0-cache", "d0", False, SIZE), ("d1-cache", "d1", False, SIZE)]
    assert placement_line(placement).startswith("cache partitions: d0-cache on d0 (none) at ")


# ------------------------------------------------------------------------------ replay


def test_replay_puts_the_cache_on_separate_drives():
    from raidlab.runners.virtual import SimSpec, replay_requests
    from raidlab.traces.synth import synth

    reqs = list(synth("snake", 300, 4, device_size=64 * MiB))
    report = replay_requests(SimSpec("vcraid", "hp-c2200a", disks=4, options={"config": "mcd",
                                                                              "cache_models": IDE}), reqs)
    names = [d["name"] for d in report["per_disk"]]
    assert names == ["cache0", "cache1", "d0", "d1", "d2", "d3"]
    assert report["architecture"]["level1_destages"] > 0
    assert all(d["writes"] > 0 for d in report["per_disk"][:2])
    with pytest.raises(UsageError):
        replay_requests(SimSpec("vcraid", "hp-c2200a", disks=4,
                                options={"config": "mcd", "cache_models": IDE, "cache_disks": 3}), reqs)


@pytest.mark.parametrize("config", ["scd", "1c", "1d"])
def test_configs_other_than_mcd_do_not_show_mcds_cache_disks(config):
    # scd's status used to show options.cache_disks = 2, mcd's default, beside one cache disk
    opts = arch_options("vcraid", {"config": config})
    assert opts["cache_disks"] is None
