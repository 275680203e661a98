"""md baselines through the CLI, as a user runs them: `raidlab create --arch md-raidN --runner vm`,
status, a filesystem through the runner session, destroy -- and the refusals.

This host's kernel has no md, so the native runner must refuse in one line (and leave no lab
behind); with --runner vm md runs in the lab VM over the lab's emulated disks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from raidlab.baselines.mdadm import kernel_has_md
from raidlab.runners.session import open_session

from lab_leftovers import loops_of, mounts_of, processes_of

pytestmark = [pytest.mark.root, pytest.mark.vm, pytest.mark.md]


class Raidlab:
    def __init__(self, cmd, home: Path):
        self.cmd, self.home = cmd, home
        self.env = {**os.environ, "RAIDLAB_HOME": str(home), "COLUMNS": "400"}

    def __call__(self, *args, check=True):
        proc = subprocess.run([*self.cmd, *args], capture_output=True, text=True, env=self.env, timeout=900)
        if check and proc.returncode != 0:
            raise AssertionError(f"raidlab {' '.join(args)} -> {proc.returncode}\n{proc.stderr}")
        return proc

    def nothing_left(self, name: str) -> None:
        lab_dir = self.home / "labs" / name
        assert not processes_of(lab_dir), "a process (QEMU?) of the lab survived"
        assert not loops_of(lab_dir) and not mounts_of(lab_dir, name)
        assert not lab_dir.exists() or not any(lab_dir.glob("images/*.img"))


@pytest.fixture
def rl(raidlab_cmd, tmp_path):
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
    r = Raidlab(raidlab_cmd, tmp_path / "home")
    yield r
    for entry in (tmp_path / "home" / "labs").glob("*"):
        r("destroy", entry.name, check=False)


@pytest.mark.long
def test_md_raid5_in_the_lab_vm(rl):
    ready = json.loads(rl("create", "m5", "--arch", "md-raid5", "--disks", "3", "--disk-size", "48M",
                          "--runner", "vm", "--json").stdout)
    assert ready["guest_device"] == "/dev/md0" and ready["device"] is None
    assert ready["md"] == {"level": "raid5", "chunk": "512K", "layout": "left-symmetric",
                           "resync": ready["md"]["resync"], "consistency_policy": "resync"}
    assert ready["md"]["resync"].startswith("waited")
    lab_dir = rl.home / "labs" / "m5"
    commands = [json.loads(l) for l in (lab_dir / "mdadm-commands.log").read_text().splitlines()]
    assert commands[0]["cmd"] == "mdadm --create /dev/md0 --run --level=5 --raid-devices=3 /dev/vda /dev/vdb /dev/vdc"
    assert commands[0]["where"] == "vm" and commands[0]["rc"] == 0
    assert json.loads((lab_dir / "md.json").read_text())["resync"].startswith("waited")

    status = rl("status", "m5")
    assert "Raid Level : raid5" in status.stdout and "md0 : active raid5" in status.stdout
    assert "[3/3] [UUU]" in status.stdout
    doc = json.loads(rl("status", "m5", "--json").stdout)
    assert doc["kind"] == "md" and doc["detail"]["State"].startswith(("clean", "active"))

    from raidlab.lab import Lab

    session = open_session(Lab("m5", home=rl.home))
    assert session.device == "/dev/md0"
    session.exec(["mkfs.ext4", "-F", "-q", session.device], timeout=300)
    session.exec(["mount", session.device, "/mnt"], timeout=60)
    session.exec(["sh", "-c", "dd if=/dev/urandom of=/mnt/f bs=1M count=4 2>/dev/null && sync"], timeout=120)
    session.exec(["umount", "/mnt"], timeout=60)
    assert session.exec(["e2fsck", "-f", "-n", session.device], timeout=300).rc == 0

    # The emulated members' own account, as an engine array reports it: 4 MiB of file data
    # plus its parity reached them, spread over all three (model "none": no busy time).
    doc = json.loads(rl("status", "m5", "--json").stdout)
    members = doc["statistics"]["members"]
    assert [m["name"] for m in members] == ["d0", "d1", "d2"] and doc["vm_busy"] is None
    assert sum(m["bytes_written"] for m in members) >= 6 << 20
    assert all(m["writes"] > 0 and m["model"] == "none" for m in members)

    # A status asked while a guest command runs reports that command instead of waiting
    # behind it (a workload may run for an hour); mdadm's view comes once it has ended.
    import threading

    slow = threading.Thread(target=lambda: session.exec(["sleep", "20"], timeout=60))
    slow.start()
    time.sleep(2)
    doc = json.loads(rl("status", "m5", "--json").stdout)
    assert slow.is_alive(), "status waited for the guest command"
    assert "sleep 20" in doc["vm_busy"]["command"] and doc["detail"] == {} and doc["mdstat"] == ""
    assert "the lab VM is running a command" in "\n".join(doc["report"])
    assert len(doc["statistics"]["members"]) == 3
    slow.join(60)
    assert "Raid Level : raid5" in rl("status", "m5").stdout

    rl("destroy", "m5")
    rl.nothing_left("m5")


def test_md_raid1_assume_clean_and_chunk_md_raid10_layout(rl):
    ready = json.loads(rl("create", "m1", "--arch", "md-raid1", "--disks", "2", "--disk-size", "32M",
                          "--disk-model", "hdd-7200", "--write-cache", "off",
                          "--runner", "vm", "-o", "assume_clean=true", "--json").stdout)
    assert ready["md"]["resync"] == "skipped (--assume-clean)"
    log = (rl.home / "labs" / "m1" / "mdadm-commands.log").read_text()
    assert "--assume-clean" in log and "--chunk" not in log  # raid1 has no chunk
    # md's drives are the host's emulated drives: the array's write-cache setting is theirs
    # (hdd-7200 ships with it on)
    status = json.loads(rl("status", "m1", "--json").stdout)
    assert [m["write_cache"] for m in status["statistics"]["members"]] == [False, False]
    assert "drives: write cache off" in status["report"][0]
    rl("destroy", "m1")
    rl.nothing_left("m1")


def test_native_md_refused_in_one_line_without_md(rl):
    if kernel_has_md():
        pytest.skip("this kernel has md: the native runner would work")
    proc = rl("create", "n5", "--arch", "md-raid5", "--disks", "3", "--disk-size", "32M", check=False)
    assert proc.returncode == 2
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "no md driver" in lines[0] and "--runner vm" in lines[0]
    assert not (rl.home / "labs" / "n5").exists()


def test_md_refusing_the_geometry_leaves_nothing(rl):
    # A 32 MiB chunk over 16 MiB members: passes raidlab's checks, md refuses it.
    proc = rl("create", "g0", "--arch", "md-raid0", "--disks", "2", "--disk-size", "16M", "--chunk", "32M",
              "--runner", "vm", check=False)
    assert proc.returncode == 2
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    # Progress lines (stderr is not a terminal: timestamped lines) until mdadm refuses; the
    # error itself is one line, the last.
    errors = [l for l in lines if l.startswith("raidlab: error")]
    assert errors == [lines[-1]] and "mdadm refused md-raid0" in lines[-1] and "mdadm --create" in lines[-1]
    rl.nothing_left("g0")
    assert not (rl.home / "labs" / "g0").exists()


@pytest.mark.parametrize("args,words", [
    (["--arch", "md-raid5", "--disks", "2"], "at least 3 disks"),
    (["--arch", "md-raid5", "--disks", "3", "-o", "layout=diagonal"], "no layout 'diagonal'"),
    (["--arch", "md-raid10", "--disks", "2", "-o", "layout=n3"], "only 2 disks"),
    (["--arch", "md-raid0", "--disks", "2", "--chunk", "12K"], "power of two"),
    (["--arch", "md-raid1", "--disks", "2", "-o", "color=red"], "no option 'color'"),
])
def test_bad_md_configurations_refused_before_anything_starts(rl, args, words):
    proc = rl("create", "bad", *args, "--runner", "vm", check=False)
    assert proc.returncode == 2 and words in proc.stderr
    assert not (rl.home / "labs" / "bad").exists()


@pytest.mark.parametrize("world, span", [("dropped", "start"), ("honoured", None)])
def test_md_drives_live_in_the_durability_world_the_array_sets(rl, world, span):
    """md's drives are the lab's emulated drives: with --flushes dropped the flushes md sends
    for the guest's syncs never reach them; with honoured every member gets them. They lie
    where the array says (--span), as an engine array's drives do: a scenario that puts every
    member at the start of its drive puts md's there too."""
    rl("create", "mw", "--arch", "md-raid5", "--disks", "3", "--disk-size", "48M", "--runner", "vm",
       "--disk-model", "ibm-dnes-318350", "--flushes", world, *(["--span", span] if span else []))
    from raidlab.lab import Lab

    session = open_session(Lab("mw", home=rl.home))
    before = json.loads(rl("status", "mw", "--json").stdout)["statistics"]["members"]
    session.exec(["mkfs.ext4", "-F", "-q", session.device], timeout=300)
    session.exec(["mount", session.device, "/mnt"], timeout=60)
    session.exec(["sh", "-c", "for i in 1 2 3 4; do dd if=/dev/urandom of=/mnt/f$i bs=64k count=4 2>/dev/null "
                              "&& sync; done"], timeout=300)
    session.exec(["umount", "/mnt"], timeout=60)
    after = json.loads(rl("status", "mw", "--json").stdout)["statistics"]["members"]
    assert all(m["flushes_setting"] == world for m in after)
    assert [m["span"] for m in after] == [span or "full"] * 3, after
    if world == "dropped":
        assert all(m["flushes"] == 0 and m["fua_writes"] == 0 for m in after), after
        assert all(a["flushes_dropped"] + a["fua_dropped"] > b["flushes_dropped"] + b["fua_dropped"]
                   for a, b in zip(after, before)), after
    else:
        assert all(a["flushes"] + a["fua_writes"] > b["flushes"] + b["fua_writes"] for a, b in zip(after, before))
        assert all(m["flushes_dropped"] == 0 and m["fua_dropped"] == 0 for m in after)
    rl("destroy", "mw")


# Writes that decide RMW or RCW row by row, each in a stripe of its own (md's stripe cache
# then holds nothing they read): (block inside the stripe, blocks). 5 disks, 16 KiB chunks,
# 4 KiB blocks: 4 rows a stripe, 16 blocks. (0, 6): rows 0-1 RCW and rows 2-3 RMW, 8 blocks
# read where one method for the stripe reads 10; the others one method throughout.
ROW_WRITES = [(0, 6), (2, 6), (0, 1), (2, 3), (8, 8), (2, 10), (0, 16), (6, 2)]


# Writes of part of a page, each in a stripe nothing has touched: (KiB into the stripe, KiB),
# each starting at a multiple of its length (busybox dd seeks in units of its block size). 5
# disks, 16 KiB chunks: chunk c of a stripe is member pages 0-3 of its data member. (15, 3)
# ends one chunk's last page and starts the next chunk's first; (30, 6) covers part of one
# page and the whole of the next, on two members.
PAGE_WRITES = [(1, 1), (6, 2), (15, 3), (21, 3), (30, 6), (63, 1)]


def _engine_reads(layout, start: int, writes) -> list[list[int]]:
    """Each write's bytes read from each member by the engine's raid5 array (its stripe
    cache and whole-page writes), the writes one after another, in virtual time."""
    from raidlab import sched
    from raidlab.disks import EmulatedDisk, MemoryBackend
    from raidlab.engine.array import Array
    from raidlab.sched import virtual

    async def main():
        out = []
        async with sched.open_nursery() as nursery:
            disks = [EmulatedDisk(f"d{i}", "none", MemoryBackend(layout.disk_size)) for i in range(layout.n_disks)]
            for disk in disks:
                disk.start(nursery)
            array = Array("oracle", layout, disks)
            for offset, length in writes:
                before = [d.statistics()["bytes_read"] for d in disks]
                await array.write(start + offset, bytes(length))
                out.append([d.statistics()["bytes_read"] - b for d, b in zip(disks, before)])
            nursery.cancel_scope.cancel()
        return out

    return virtual.run_virtual(main)


@pytest.mark.long
def test_md_raid5_reads_each_member_what_the_engine_s_per_row_plan_reads(rl):
    """md raid5 in the lab VM (5 disks, 16 KiB chunks, no resync) takes one O_DIRECT write
    at a time; each member's bytes read over that write equal what the engine's raid5 plans
    to read from it for the same write: RMW or RCW chosen per row, a tie to RCW. Writes of
    part of a page read what the engine's array reads for them (whole pages, the pages its
    stripe cache holds not again). Then member
    1 fails (mdadm --fail) and the same writes go to other stripes: each row's only method
    that avoids it, and where member 1 held the parity, the reads reconstruct-write makes."""
    from raidlab.engine.layouts.raid5 import Raid5Layout
    from raidlab.lab import Lab
    from raidlab.vm import guest_device

    kib, block, disks = 1024, 4096, 5
    rl("create", "r5", "--arch", "md-raid5", "--disks", str(disks), "--disk-size", "48M", "--chunk", "16K",
       "-o", "assume_clean=true", "--runner", "vm", "--json")
    session = open_session(Lab("r5", home=rl.home))
    layout = Raid5Layout(n_disks=disks, disk_size=64 * 16 * kib * 64, chunk_bytes=16 * kib)
    stripe_blocks = (disks - 1) * 16 * kib // block

    def member_reads() -> list[int]:
        doc = json.loads(rl("status", "r5", "--json").stdout)
        return [m["bytes_read"] for m in doc["statistics"]["members"]]

    # `status` itself reads the array's first block through md (member 0): measured by two
    # looks with nothing between them, and taken off every write's count.
    first, second = member_reads(), member_reads()
    looking = [b - a for a, b in zip(first, second)]
    assert sum(looking) <= block, looking

    # Part of a page at a time (ext2's 1 KiB blocks under mount -o sync), each in a fresh
    # stripe: md reads whole pages, from the members the engine's array reads them from.
    got_pages, wanted_pages = [], []
    for index, (offset_k, length_k) in enumerate(PAGE_WRITES):
        start = (40 + index) * stripe_blocks * block
        before = member_reads()
        session.exec(["dd", "if=/dev/urandom", f"of={session.device}", f"bs={length_k * kib}", "count=1",
                      f"seek={(start // kib + offset_k) // length_k}", "oflag=direct", "conv=notrunc"], timeout=120)
        got_pages.append([after - was - look for after, was, look in zip(member_reads(), before, looking)])
        wanted_pages.extend(_engine_reads(layout, start, [(offset_k * kib, length_k * kib)]))
    assert all(n % block == 0 for reads in got_pages for n in reads), got_pages  # whole pages only
    # The same members: the written pages and the parity (RMW where the page is written in
    # part), never RCW's other data pages. md reads a written data page twice on its first
    # write (8 KiB where the engine reads 4 KiB), which these sets do not weigh.
    assert [[d for d, n in enumerate(r) if n] for r in got_pages] == \
           [[d for d, n in enumerate(r) if n] for r in wanted_pages], list(zip(PAGE_WRITES, got_pages, wanted_pages))

    stripe = 1
    results = []
    methods: set[str] = set()
    for failed in (None, 1):
        if failed is not None:
            session.exec(["mdadm", session.device, "--fail", guest_device(failed)], timeout=60)
        for first, count in ROW_WRITES:
            # busybox dd seeks in units of its block size: the next stripe where the write
            # starts on a multiple of it (every case here has one within `count` stripes)
            stripe = next(s for s in range(stripe, stripe + count) if (s * stripe_blocks + first) % count == 0)
            start = stripe * stripe_blocks + first
            before = member_reads()
            session.exec(["dd", "if=/dev/urandom", f"of={session.device}", f"bs={count * block}", "count=1",
                          f"seek={start // count}", "oflag=direct", "conv=notrunc"], timeout=120)
            got = [after - was - look for after, was, look in zip(member_reads(), before, looking)]
            plan = layout.write_plan(start * block, count * block, () if failed is None else (failed,))
            wanted = [sum(r.length for r in plan.reads if r.disk == d) for d in range(disks)]
            results.append((failed, first, count, stripe, got, wanted))
            methods.update(s.method for s in plan.stripes)
            stripe += 1
    assert all(got == wanted for *_case, got, wanted in results), results
    assert {"rmw+rcw", "no-parity"} <= methods, methods  # rows mixed, and a failed parity, were both met
