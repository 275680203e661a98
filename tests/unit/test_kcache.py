"""The kernel's caches as architectures, without a VM: their command lines, the parsing of the
kernel's status lines (samples as the lab VM's 6.1 kernel printed them), the drives each
one plans, and the refusals before anything starts."""

from __future__ import annotations

import pytest

from raidlab import archs
from raidlab.archs.base import LIVE, Config
from raidlab.baselines import kcache, mdadm
from raidlab.errors import UsageError

M = 1 << 20


def test_writecache_table_and_status():
    table = kcache.writecache_table(131072, "/dev/vda", "/dev/vdb", 4096, {"high_watermark": 60, "low_watermark": 40})
    assert table == "0 131072 writecache s /dev/vda /dev/vdb 4096 4 high_watermark 60 low_watermark 40"
    assert kcache.writecache_table(8, "o", "c", 512, {}) == "0 8 writecache s o c 512 0"
    status = kcache.parse_writecache_status("0 131072 writecache 0 8160 4455 0 6159 4763 8290 3 6 0 8281 0 14 16385")
    assert status["blocks"] == 8160 and status["free_blocks"] == 4455 and status["write_blocks"] == 8290
    assert status["flushes"] == 14 and status["discarded_blocks"] == 16385 and "extra" not in status
    assert kcache.parse_writecache_status("0 8 writecache 0 10 10 0 1 2 3 4 5 6 7 8 9 10 11")["extra"] == [11]
    with pytest.raises(ValueError):
        kcache.parse_writecache_status("0 8 linear 8:0 0")
    with pytest.raises(UsageError, match="block size"):
        kcache.writecache_table(8, "o", "c", 8192, {})


def test_cache_table_and_status():
    table = kcache.cache_table(258048, "/dev/mapper/raidlab-meta", "/dev/mapper/raidlab-fast", "/dev/md0",
                               64 << 10, "writeback")
    assert table == "0 258048 cache /dev/mapper/raidlab-meta /dev/mapper/raidlab-fast /dev/md0 128 1 writeback smq 0"
    line = ("0 258048 cache 8 7/2048 128 368/368 4937 1629 4921 1772 0 368 6 2 writeback no_discard_passdown "
            "2 migration_threshold 2048 smq 0 rw -")
    status = kcache.parse_cache_status(line)
    assert (status["blocks_used"], status["blocks_total"], status["promotions"], status["dirty"]) == (368, 368, 368, 6)
    assert status["read_hits"] == 4937 and status["write_misses"] == 1772
    assert status["features"] == ["writeback", "no_discard_passdown"]
    assert status["core"] == ["migration_threshold", "2048"] and status["policy"] == "smq"
    for block in (16 << 10, 48 << 10, 2 << 30):
        with pytest.raises(UsageError, match="multiple of 32K"):
            kcache.cache_table(8, "m", "c", "o", block, "writeback")
    with pytest.raises(UsageError, match="mode"):
        kcache.cache_table(8, "m", "c", "o", 64 << 10, "write-back")


def test_bcache_commands_and_sysfs():
    assert kcache.make_bcache("/dev/vda", "/dev/vdb", "writeback", 32 << 10) == [
        "make-bcache", "--writeback", "--bucket", "32k", "-B", "/dev/vda", "-C", "/dev/vdb"]
    assert kcache.make_bcache("/dev/vda", "/dev/vdb", "writethrough") == ["make-bcache", "-B", "/dev/vda", "-C",
                                                                          "/dev/vdb"]
    assert kcache.bcache_register("/dev/vdb") == ["sh", "-c", "echo /dev/vdb > /sys/fs/bcache/register"]
    text = ("state=dirty\ncache_mode=writethrough [writeback] writearound none\ndirty_data=21.6M\n"
            "stats_total/cache_hits=1296\nstats_total/cache_hit_ratio=75\nunknown=1\n")
    assert kcache.parse_bcache(text) == {"state": "dirty", "cache_mode": "writeback", "dirty_data": "21.6M",
                                         "cache_hits": "1296", "cache_hit_ratio": "75"}
    with pytest.raises(UsageError, match="no setting"):
        kcache.bcache_set("bucket_size", "1")


@pytest.mark.parametrize("cache, bucket, ok", [(32 * M, None, False), (32 * M, 32 << 10, True),
                                               (32 * M, 64 << 10, False), (257 * M, None, True),
                                               (16 * M, 16 << 10, True), (16 * M, 24 << 10, False)])
def test_bcache_needs_more_than_512_buckets(cache, bucket, ok):
    if ok:
        kcache.check_bcache_buckets(cache, bucket)
    else:
        with pytest.raises(UsageError) as caught:
            kcache.check_bcache_buckets(cache, bucket)
        if bucket is None or not bucket & (bucket - 1):  # the hint's values are taken
            hint = caught.value.hint
            suggested = int(hint.split("bucket=")[1].split("K")[0]) << 10
            kcache.check_bcache_buckets(cache, suggested)


def test_each_descendant_plans_its_drives():
    wc = Config("dm-writecache", 1, 64 * M, None, {"cache_size": "32M", "cache_model": "hp-c2200a"}, "hp-c2200a")
    assert [(d.name, d.model, d.size) for d in archs.get("dm-writecache").plan(wc, LIVE)] == [
        ("d0", "hp-c2200a", 64 * M), ("d1", "hp-c2200a", 32 * M)]
    dc = Config("dm-cache", 3, 64 * M, 64 << 10, {"cache_size": "32M"})
    assert [(d.name, d.size) for d in archs.get("dm-cache").plan(dc, LIVE)] == [
        ("d0", 64 * M), ("d1", 64 * M), ("d2", 64 * M), ("d3", 32 * M), ("d4", 32 * M)]
    assert [o.name for o in archs.get("bcache").options][:2] == ["cache_size", "cache_model"]
    assert archs.get("bcache").runners == ("vm",) and archs.family("kcache").doctor_runners == {"vm": "vm"}


@pytest.mark.parametrize("arch, disks, options, words", [
    ("dm-writecache", 2, {}, "one data disk"),
    ("dm-writecache", 1, {"cache_size": "8M"}, "too small"),
    ("dm-writecache", 1, {"high_watermark": 120}, "percent"),
    ("dm-writecache", 1, {"bucket": "16K"}, "no option 'bucket'"),
    ("bcache", 1, {"cache_mode": "write-back"}, "cache_mode"),
    ("bcache", 1, {"cache_size": "32M"}, "more than 512"),
    ("dm-cache", 2, {}, "at least 3 disks"),
    ("dm-cache", 3, {"block": "40K"}, "multiple of 32K"),
    ("dm-cache", 3, {"metadata": "40M"}, "more than half"),
    ("dm-cache", 3, {"cache_model": "no-such-drive"}, "no-such-drive"),
])
def test_impossible_descendants_are_refused_before_anything_starts(arch, disks, options, words):
    with pytest.raises(Exception, match=words):
        archs.validate(arch, disks, 64 * M, 64 << 10, options, runner="vm")


def test_descendants_run_in_the_lab_vm_only():
    with pytest.raises(UsageError, match="runs on: vm"):
        archs.validate("dm-writecache", 1, 64 * M, None, {}, runner="native")


@pytest.mark.parametrize("arch, options, words", [
    ("md-raid5-wb", {"journal": "off"}, "leaves it none"),
    ("md-raid5-wb", {"journal_mode": "write-through"}, "another array"),
    ("md-raid5-ppl", {"journal": "4M"}, "another array|not both"),
    ("md-raid5-ppl", {"consistency_policy": "resync"}, "another array"),
    ("md-raid5", {"journal_mode": "write-back"}, "there is none"),
    ("md-raid5", {"consistency_policy": "bitmap"}, "not one md raid5 takes"),
    ("md-raid1", {"consistency_policy": "ppl"}, "not one md raid5 takes"),
    ("md-raid5", {"journal": "4M", "consistency_policy": "ppl"}, "not both"),
    ("md-raid5", {"journal": "4M", "journal_model": "no-such-drive"}, "no-such-drive"),
    ("md-raid5", {"stripe_cache_size": 16}, "from 17 to 32768"),
    ("md-raid5-wb", {"stripe_cache_size": "lots"}, "from 17 to 32768"),
    ("md-raid10", {"stripe_cache_size": 1024}, "no stripe cache"),
])
def test_md_descendants_refuse_what_contradicts_them(arch, options, words):
    with pytest.raises(Exception, match=words):
        archs.validate(arch, 4, 64 * M, 64 << 10, options, runner="vm")


def test_md_descendants_command_lines():
    options = archs.md.options_of("md-raid5-wb", {})
    assert options == {"journal": "16M", "journal_mode": "write-back"}
    archs.validate("md-raid5-wb", 4, 64 * M, 64 << 10, {"journal": "64M", "journal_model": "hp-c2200a"}, runner="vm")
    ppl = archs.md.options_of("md-raid5-ppl", {"assume_clean": True})
    assert mdadm.create_argv("md-raid5-ppl", "/dev/md0", ["/dev/vda", "/dev/vdb", "/dev/vdc"], 64 << 10, ppl) == [
        "mdadm", "--create", "/dev/md0", "--run", "--level=5", "--raid-devices=3", "--chunk=64K", "--assume-clean",
        "--consistency-policy=ppl", "/dev/vda", "/dev/vdb", "/dev/vdc"]
    assert mdadm.md_attributes("journal_mode=[write-through] write-back\nconsistency_policy=ppl\njournal_mode2=x\n"
                               "stripe_cache_active=\n") == {"journal_mode": "write-through",
                                                             "consistency_policy": "ppl"}
