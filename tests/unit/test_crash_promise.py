"""The crash campaign's cells: where a point cuts, what its mode promises, what counts as a
loss the promise allows, and why a power cell cut no write (raidlab.campaigns.crash), and the
cache's hook that lets a point cut between a destage's writes home and their flush."""

from __future__ import annotations

import pytest

from raidlab import sched
from raidlab.campaigns.crash import (PRESETS, PROMISES, PointResult, check_point, config_for, kill_moment,
                                     promise_of, writes_cut_reason)
from raidlab.errors import RaidlabError
from raidlab.campaigns.document import crash_section
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine.caches import create_dcd, create_vcraid
from raidlab.sched import run_virtual

KiB, MiB = 1024, 1 << 20


def test_every_third_point_of_a_caching_preset_cuts_inside_a_destage():
    kinds = [kill_moment(1000 + p, p, 120, in_destage=True)[2] for p in range(9)]
    assert kinds == ["after-fsync", "during-untar", "in-destage", "during-untar", "after-fsync", "in-destage",
                     "after-fsync", "during-untar", "in-destage"]
    after, delay, _ = kill_moment(1002, 2, 120, in_destage=True)
    assert 60 <= after < 119 and delay == 0  # the second half: the cache has filled by then
    assert "in-destage" not in [kill_moment(p, p, 120)[2] for p in range(9)]


def test_caching_presets_cut_inside_destage_and_run_both_durability_modes():
    for name in ("dcd-immediate", "dcd-after-complete", "vcraid-scd", "vcraid-mcd", "vcraid-1c", "vcraid-1d",
                 "vcraid-scd-paper", "vcraid-mcd-paper"):
        assert PRESETS[name].get("in_destage") is True, name
        config = config_for(name, disks=None, options={}, disk_model="none", disk_size=64 * MiB, chunk=64 * KiB,
                            files=120, mode="power")
        assert config.in_destage
    assert {PRESETS[n]["options"]["durability"] for n in ("vcraid-scd", "vcraid-scd-paper")} == {"strict", "paper"}
    assert not config_for("raid5", disks=None, options={}, disk_model="none", disk_size=64 * MiB,
                          chunk=64 * KiB, files=120).in_destage


@pytest.mark.parametrize("arch, options, mode, promise", [
    ("vcraid", {"durability": "paper"}, "power", "report"),
    ("vcraid", {"durability": "paper"}, "power-random", "report"),
    ("vcraid", {"durability": "paper"}, "kill", "flush"),    # the drive's cache keeps power
    ("vcraid", {"durability": "strict"}, "power", "flush"),
    ("dcd", {}, "power", "flush"),
    ("raid5", {}, "power", "flush"),
])
def test_the_promise_of_a_point(arch, options, mode, promise):
    assert promise_of(arch, options, mode) == promise
    assert promise in PROMISES


@pytest.mark.parametrize("mode, promise", [("power", "report"), ("power-random", "report"), ("kill", "flush")])
def test_in_the_papers_world_every_architecture_is_held_to_the_drives_report(mode, promise):
    for arch in ("raid5", "md-raid0", "md-raid5", "vcraid"):
        assert promise_of(arch, {}, mode, "dropped") == promise
    for name in ("raid5-paper-world", "md-raid0-paper-world", "md-raid5-paper-world", "vcraid-scd-paper",
                 "vcraid-mcd-paper"):
        assert PRESETS[name]["flushes"] == "dropped"
    config = config_for("raid5-paper-world", disks=None, options={}, disk_model="none", disk_size=64 * MiB,
                        chunk=64 * KiB, files=120, mode=mode)
    assert config.flushes == "dropped" and config.promise == promise


def _point(promise: str, **kw) -> PointResult:
    base = dict(point=0, seed=0, kill_after_files=4, kill_delay_ms=0.0, kill_moment="after-fsync",
                fsynced=4, intact=2, damaged=["a", "b"], fsck_clean=False, promise=promise)
    return PointResult(**{**base, **kw})


def test_a_loss_the_promise_allows_is_counted_apart_but_an_error_still_fails():
    assert not _point("flush").ok and _point("flush").lost == 2
    assert _point("report").ok and _point("report").allowed
    assert not _point("report", error="LabError: assemble refused").ok
    assert not _point("report", leaks=["loop /dev/loop3"]).ok
    assert not _point("report", fsck_clean=None).ok  # the check never ran
    assert _point("flush", intact=4, damaged=[], fsck_clean=True).ok


def _cut(lost: int, kept: int) -> dict:
    return {"d0.img": {"writes_lost": lost, "writes_kept": kept, "bytes_lost": 0, "bytes_restored": 0}}


def test_a_power_cell_that_cut_nothing_says_why():
    ok = _point("flush", intact=4, damaged=[], fsck_clean=True)
    assert writes_cut_reason("kill", [ok]) is None
    assert writes_cut_reason("power", [_point("flush", power_cut=_cut(3, 0))]) is None
    assert "made all it held durable" in writes_cut_reason("power", [_point("flush", power_cut=_cut(0, 0))])
    assert "kept by the drawn cut" in writes_cut_reason("power-random", [_point("flush", power_cut=_cut(0, 5))])
    assert writes_cut_reason("power", [ok]) == "no point reached its cut"


def test_the_document_shows_the_promise_the_allowed_losses_and_the_reason():
    summary = {"target": "vcraid-scd-paper", "mode": "power", "promise": "report", "arch": "vcraid",
               "options": {"durability": "paper"}, "disks": 3, "points": 3, "passed": 3,
               "fsynced_files_checked": 60, "fsynced_files_lost": 0, "fsynced_files_lost_allowed": 26,
               "writes_lost_to_power_cuts": 0, "writes_cut_reason": "because", "in_destage_cuts": 1,
               "fsck_unclean": 0, "fsck_unclean_allowed": 1, "forced": 2, "unmountable": 1, "errors": 0, "leaks": 0, "seed": 0,
               "seconds": 30.0, "results": []}
    section = crash_section([summary])
    row = next(line for line in section if line.startswith("| vcraid-scd-paper"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    header = [c.strip() for c in next(line for line in section if line.startswith("| target")).strip("|").split("|")]
    assert len(cells) == len(header)
    assert cells[2] == "report" and cells[10] == "26" and cells[11] == "0 (because)" and cells[12] == "1"
    assert cells[14] == "1" and header[15] == "forced" and cells[15] == "2"
    assert header[16] == "unmountable" and cells[16] == "1"


def test_a_failed_point_names_what_md_s_journal_recovery_will_read():
    journal = {"summary": "tail 0: not a meta block; recovery starts an empty log"}
    failed = _point("flush", journal=journal).as_json()
    summary = {"target": "md-raid5-wb", "mode": "power", "promise": "flush", "arch": "md-raid5-wb", "options": {},
               "disks": 4, "points": 1, "passed": 0, "fsynced_files_checked": 4, "fsynced_files_lost": 2,
               "writes_lost_to_power_cuts": 9, "in_destage_cuts": 0, "fsck_unclean": 1, "errors": 0, "leaks": 0,
               "seed": 0, "seconds": 1.0, "results": [failed]}
    line = next(line for line in crash_section([summary]) if line.startswith("* md-raid5-wb"))
    assert line.endswith("; md's journal after the cut: tail 0: not a meta block; recovery starts an empty log")
    assert "journal" not in next(line for line in crash_section([{**summary, "results": [
        _point("flush").as_json()]}]) if line.startswith("* md-raid5-wb"))


def test_a_forced_assembly_passes_under_the_drives_report_and_is_kept_in_the_record():
    forced = "DaemonError: mdadm refused md-raid5 over 4 disks: not clean"
    assert _point("report", forced=forced).ok
    assert _point("report", forced=forced).as_json()["forced"] == forced


class _Unmountable:
    """A file system side whose mount fails with EIO; e2fsck -fy mends it only if `mends`."""

    def __init__(self, mends: bool):
        self.mends, self.repaired = mends, False

    def check_fs(self):
        raise RaidlabError("mount: mounting /dev/md0 on /mnt/crashtest failed: Input/output error")

    def repair_fs(self):
        self.repaired = True
        return "e2fsck -fy exit 1\nFILE SYSTEM WAS MODIFIED"

    def digests(self, rels):
        if not self.mends:
            raise RaidlabError("mount: mounting /dev/md0 on /mnt/crashtest failed: Input/output error")
        return {rel: ("aa", "1 bytes") for rel in rels}


@pytest.mark.parametrize("mends", [True, False])
def test_a_file_system_that_no_longer_mounts_is_repaired_and_allowed_only_in_the_papers_world(mends):
    synced = {"t/f1": "aa", "t/f2": "bb"}
    side = _Unmountable(mends)
    result = PointResult(point=0, seed=0, kill_after_files=4, kill_delay_ms=0.0, kill_moment="during-untar",
                         promise="report")
    check_point(side, result, synced)
    assert side.repaired and result.unmountable.endswith("Input/output error")
    assert result.fsck_clean is False and "FILE SYSTEM WAS MODIFIED" in result.fsck_output
    assert (result.intact, result.lost) == ((1, 1) if mends else (0, 2))
    assert result.ok and result.as_json()["unmountable"] == result.unmountable

    flush = PointResult(point=0, seed=0, kill_after_files=4, kill_delay_ms=0.0, kill_moment="during-untar",
                        promise="flush")
    with pytest.raises(RaidlabError):
        check_point(_Unmountable(mends), flush, synced)
    assert flush.unmountable is None


@pytest.mark.parametrize("kind", ["vcraid", "dcd"])
def test_the_hook_runs_between_a_destages_writes_home_and_their_flush(kind):
    """At the hook the destaged blocks have reached the home drives, and the flush that makes
    them durable comes after it."""
    seen: list[tuple[int, int]] = []

    async def main():
        async with sched.open_nursery() as nursery:
            home = [EmulatedDisk(f"d{i}", "none", MemoryBackend(8 * MiB)) for i in range(4 if kind == "vcraid" else 1)]
            cache = EmulatedDisk("cache", "none", MemoryBackend(1 * MiB))
            for d in (*home, cache):
                d.start(nursery)
            if kind == "vcraid":
                target = await create_vcraid("v", home, [cache], ram_buffer=64 * KiB, idle_threshold=0.05)
            else:
                target = await create_dcd("t", cache, home[0], ram_buffer=64 * KiB, idle_threshold=0.05)

            def hook():
                stats = [d.statistics() for d in home]
                seen.append((sum(s["writes"] for s in stats), sum(s["flushes"] for s in stats)))

            target.before_home_flush = hook
            target.start(nursery)
            for i in range(32):  # small writes: a DCD sends a large one straight home
                await target.write(i * 8 * KiB, b"a" * (4 * KiB))
            await target.flush()
            await target.drain()
            flushes_after = sum(d.statistics()["flushes"] for d in home)
            nursery.cancel_scope.cancel()
        return flushes_after

    flushes_after = run_virtual(main)
    assert seen, "a destage ran and called the hook"
    writes, flushes = seen[0]
    assert writes > 0
    assert flushes_after > flushes


def test_the_damage_section_counts_outcomes_and_names_failed_trials():
    from raidlab.campaigns.document import damage_section

    summary = {"target": "vcraid-scd", "arch": "vcraid", "options": {"config": "scd"}, "trials": 3, "passed": 2,
               "refused": 1, "recovered": 1, "wrong": 1, "errors": 0, "leaks": 0, "seed": 1, "seconds": 12.0,
               "results": [{"trial": 2, "seed": 1002, "kind": "torn", "drive": "d3.img", "stop": "kill",
                            "outcome": "wrong", "message": "differs at byte 4096", "leaks": [], "ok": False}]}
    lines = damage_section([summary])
    row = next(line for line in lines if line.startswith("| vcraid-scd"))
    assert [c.strip() for c in row.strip("|").split("|")][3:9] == ["3", "2", "1", "1", "1", "0"]
    assert "2 of 3 trials passed, 1 read back wrong." in lines
    assert any("trial 2" in line and "differs at byte 4096" in line for line in lines)


def test_kept_images_are_sparse_copies(tmp_path):
    from raidlab.campaigns.crash import keep_images

    image = tmp_path / "d0.img"
    with open(image, "wb") as f:
        f.truncate(64 << 20)
        f.seek(1 << 20)
        f.write(b"written" * 100)
    dest = keep_images([image], tmp_path / "kept" / "point-0")
    copy = dest / "d0.img"
    assert copy.read_bytes() == image.read_bytes()
    assert copy.stat().st_blocks * 512 < 1 << 20    # the holes stayed holes
    with pytest.raises(FileExistsError):
        keep_images([image], dest)
