"""`raidlab power-cut`: the RAID 5 write hole on a live degraded array.

A raid5 over four drives whose write caches are volatile (`create --power-loss`) loses
member 1; a 4 KiB write (O_DIRECT, no fsync) to stripe 0 updates member 0's chunk and the
parity chunk, both still in their drives' caches. The power cut takes the parity write and
leaves the data write (the parity drive alone loses its cache): after `assemble`, member
1's chunk, which nobody wrote, is rebuilt from the new data and the old parity and comes
back wrong. Lost together, the stripe stays consistent and the chunk reads back right.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import random
import subprocess

import pytest

from lab_leftovers import leftovers

pytestmark = [pytest.mark.root, pytest.mark.live]

CHUNK = 64 * 1024


class Raidlab:
    def __init__(self, cmd, home):
        self.cmd, self.home = cmd, home

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, "RAIDLAB_HOME": str(self.home), "COLUMNS": "200"}
        proc = subprocess.run([*self.cmd, *args], capture_output=True, text=True, env=env, timeout=300)
        if check:
            assert proc.returncode == 0, (args, proc.stderr[-3000:])
        return proc


def direct_write(device: str, offset: int, data: bytes, *, sync: bool) -> None:
    buf = mmap.mmap(-1, len(data))  # page-aligned, as O_DIRECT wants
    buf.write(data)
    fd = os.open(device, os.O_WRONLY | os.O_DIRECT)
    try:
        os.pwrite(fd, buf, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def direct_read(device: str, offset: int, length: int) -> bytes:
    buf = mmap.mmap(-1, length)
    fd = os.open(device, os.O_RDONLY | os.O_DIRECT)
    try:
        os.preadv(fd, [buf], offset)
    finally:
        os.close(fd)
    return bytes(buf)


@pytest.mark.parametrize("parity_only, journal", [(True, False), pytest.param(False, False, marks=pytest.mark.slow),
                                                  (True, True)],
                         ids=["parity lost, data kept", "both lost", "parity lost, with a write journal"])
def test_the_write_hole_of_a_degraded_raid5(raidlab_cmd, tmp_path, parity_only, journal):
    """... The array is dirty and degraded: `assemble` refuses it in one line (md's "cannot
    start dirty degraded array"), `assemble --force` starts it. With a write journal
    (-o journal=4M, md's --write-journal) assembly starts it and writes the journalled data
    and parity again: member 1's chunk comes back right."""
    rl = Raidlab(raidlab_cmd, tmp_path / "home")
    device = rl("create", "w", "--arch", "raid5", "--disks", "4", "--disk-size", "32M", "--chunk", "64K",
                "--power-loss", *(["-o", "journal=4M"] if journal else [])).stdout.strip()
    try:
        stripes = bytes(random.Random(3).randbytes(4 * 3 * CHUNK))
        direct_write(device, 0, stripes, sync=True)  # on the media: the flush emptied every cache
        rl("fail", "w", "--disk", "1")
        direct_write(device, 0, b"N" * 4096, sync=False)  # member 0's chunk and the parity, both cached
        images = tmp_path / "home" / "labs" / "w" / "images"
        pending = sorted(p.name[:-len(".img.volatile")] for p in images.glob("*.img.volatile") if p.stat().st_size)
        assert len(pending) == 2 and "d0" in pending and "d1" not in pending, pending
        parity = next(name for name in pending if name != "d0")
        cut = rl("power-cut", "w", *(["--only", parity] if parity_only else []))
        assert f"{parity}: lost 1 write(s)" in cut.stderr, cut.stderr
        if journal:
            device = rl("assemble", "w").stdout.strip()   # the journal's replay makes it whole: started
        else:   # dirty and degraded: not started, as md does not start one; --force starts it
            refused = rl("assemble", "w", check=False)
            assert refused.returncode == 2 and "not stopped cleanly and is degraded" in refused.stderr, refused.stderr
            errors = [line for line in refused.stderr.splitlines() if line.startswith("raidlab: error:")]
            assert len(errors) == 1 and "--force" in errors[0] and "Traceback" not in refused.stderr, refused.stderr
            assert leftovers(tmp_path / "home" / "labs" / "w", "w") == {}
            device = rl("assemble", "w", "--force").stdout.strip()
        status = json.loads(rl("status", "w", "--json").stdout)
        assert 1 in status["statistics"]["failed_members"], status["statistics"]
        chunk1 = direct_read(device, CHUNK, CHUNK)  # member 1's chunk of stripe 0: nobody wrote it
        head = direct_read(device, 0, 4096)
        if journal:
            assert chunk1 == stripes[CHUNK:2 * CHUNK]  # closed: data and parity written again from the journal
            assert head == b"N" * 4096 and status["statistics"]["journal"]["replayed_records"] > 0
        elif parity_only:
            assert chunk1 != stripes[CHUNK:2 * CHUNK]  # the hole: wrong data where nothing was written
            assert head == b"N" * 4096
        else:
            assert chunk1 == stripes[CHUNK:2 * CHUNK]
            assert head == stripes[:4096]  # the unflushed write is gone, as it may be
    finally:
        rl("destroy", "w", check=False)
    assert leftovers(tmp_path / "home" / "labs" / "w", "w") == {}


def test_power_cut_refuses_an_array_without_volatile_caches(raidlab_cmd, tmp_path):
    rl = Raidlab(raidlab_cmd, tmp_path / "home")
    rl("create", "p", "--arch", "raid1", "--disks", "2", "--disk-size", "16M")
    try:
        proc = rl("power-cut", "p", check=False)
        assert proc.returncode == 2 and "--power-loss" in proc.stderr and "Traceback" not in proc.stderr
        assert json.loads(rl("status", "p", "--json").stdout)["statistics"]["state"] == "optimal"  # still running
    finally:
        rl("destroy", "p", check=False)


def test_stale_parity_after_a_power_cut_is_found_by_check_and_repaired_by_resync(raidlab_cmd, tmp_path):
    """All four members in service: partial-stripe writes reach data members' caches and the
    parity drive's; the cut takes the parity drive's alone. Assembled without its resync,
    `check` finds the stale parity, `check --repair` rewrites every stripe from its data and
    checks again: clean, and the data reads back as it was (the writes the cut kept)."""
    rl = Raidlab(raidlab_cmd, tmp_path / "home")
    device = rl("create", "s", "--arch", "raid5", "--disks", "4", "--disk-size", "32M", "--chunk", "64K",
                "--power-loss").stdout.strip()
    try:
        direct_write(device, 0, bytes(random.Random(4).randbytes(8 * 3 * CHUNK)), sync=True)
        direct_write(device, 0, b"S" * 4096, sync=False)   # stripe 0: member 0 and stripe 0's parity drive
        images = tmp_path / "home" / "labs" / "s" / "images"
        pending = sorted(p.name[:-len(".img.volatile")] for p in images.glob("*.img.volatile") if p.stat().st_size)
        parity = next(name for name in pending if name != "d0")
        rl("power-cut", "s", "--only", parity)
        device = rl("assemble", "s", "--no-resync").stdout.strip()
        before = direct_read(device, 0, 8 * 3 * CHUNK)
        found = rl("check", "s", "--json", check=False)
        assert found.returncode == 1 and json.loads(found.stdout)["mismatches"], found.stdout[-500:]
        repaired = json.loads(rl("check", "s", "--repair", "--json").stdout)
        assert repaired["found"] and repaired["mismatches"] == [] and repaired["repaired_bytes"] > 0, repaired
        assert direct_read(device, 0, 8 * 3 * CHUNK) == before and before[:4096] == b"S" * 4096
        assert rl("check", "s").returncode == 0
    finally:
        rl("destroy", "s", check=False)
    assert leftovers(tmp_path / "home" / "labs" / "s", "s") == {}


def test_an_array_assembled_after_an_unclean_stop_resyncs_itself(raidlab_cmd, tmp_path):
    """As md does: the superblock says the last run did not end cleanly, so assembly starts a
    resync while the array serves; once it is done the check finds nothing, and a clean
    stop is followed by an assembly without one."""
    rl = Raidlab(raidlab_cmd, tmp_path / "home")
    device = rl("create", "u", "--arch", "raid5", "--disks", "4", "--disk-size", "32M", "--chunk", "64K",
                "--power-loss").stdout.strip()
    try:
        direct_write(device, 0, bytes(random.Random(5).randbytes(8 * 3 * CHUNK)), sync=True)
        direct_write(device, 0, b"U" * 4096, sync=False)
        images = tmp_path / "home" / "labs" / "u" / "images"
        pending = sorted(p.name[:-len(".img.volatile")] for p in images.glob("*.img.volatile") if p.stat().st_size)
        rl("power-cut", "u", "--only", next(name for name in pending if name != "d0"))
        ready = json.loads(rl("assemble", "u", "--json").stdout)
        assert ready.get("resync") == "started", ready
        assert rl("check", "u").returncode == 0  # the check waits for the resync, then finds nothing
        assert json.loads(rl("status", "u", "--json").stdout)["resyncing"] is False
        rl("destroy", "u", "--keep-images")
        ready = json.loads(rl("assemble", "u", "--json").stdout)
        assert "resync" not in ready, ready  # stopped cleanly this time
    finally:
        rl("destroy", "u", check=False)
    assert leftovers(tmp_path / "home" / "labs" / "u", "u") == {}


@pytest.mark.parametrize("mode", ["vanish", pytest.param("write-eio", marks=pytest.mark.slow)])
def test_a_failed_journal_drive_refuses_writes_as_md_does_and_reads_go_on(raidlab_cmd, tmp_path, mode):
    """The write journal's drive (d4 after four members) fails: the array refuses every
    write with EIO from then on (it can no longer be journalled), reads and flushes go on,
    status says so, the daemon stays; after a restart the journal serves again."""
    rl = Raidlab(raidlab_cmd, tmp_path / "home")
    device = rl("create", "j", "--arch", "raid5", "--disks", "4", "--disk-size", "32M", "--chunk", "64K",
                "-o", "journal=4M").stdout.strip()
    try:
        data = bytes(random.Random(5).randbytes(3 * CHUNK))
        direct_write(device, 0, data, sync=True)
        said = rl("fail", "j", "--disk", "4", "--mode", mode).stderr
        assert "write journal's drive 4" in said, said
        with pytest.raises(OSError) as refused:
            direct_write(device, 4 * 3 * CHUNK, b"X" * 4096, sync=False)
        assert refused.value.errno == errno.EIO
        assert direct_read(device, 0, 3 * CHUNK) == data
        fd = os.open(device, os.O_RDONLY)
        try:
            os.fsync(fd)   # a flush: the members are flushed, the failed journal not checkpointed
        finally:
            os.close(fd)
        status = json.loads(rl("status", "j", "--json").stdout)
        journal = status["statistics"]["journal"]
        assert journal["failed"] and journal["writes_refused"] >= 1, journal
        text = rl("status", "j").stdout
        assert "write journal (drive d4): failed" in text, text
        again = rl("fail", "j", "--disk", "4", check=False)
        assert again.returncode == 2 and "failed already" in again.stderr, again.stderr
        rl("destroy", "j", "--keep-images")
        device = rl("assemble", "j").stdout.strip()   # clean stop: the journal drive serves again
        direct_write(device, 4 * 3 * CHUNK, b"Y" * 4096, sync=True)
        assert direct_read(device, 0, 3 * CHUNK) == data
    finally:
        rl("destroy", "j", check=False)
    assert leftovers(tmp_path / "home" / "labs" / "j", "j") == {}


def test_vcraid_raid5_after_an_unclean_stop_is_resynced_or_refused_degraded(raidlab_cmd, tmp_path):
    """The raid5 under VC-RAID is treated as md treats its own: after a power cut with every
    member in service, assembly writes the log to it and resyncs it in the background
    (`check` afterwards finds nothing); with a member failed, assembly refuses before the
    log is written to it, and `--force` starts it and writes the log (every synced byte back)."""
    rl = Raidlab(raidlab_cmd, tmp_path / "home")
    opts = ["-o", "config=scd", "-o", "cache_size=8M", "-o", "ram_buffer=1M"]
    device = rl("create", "v", "--arch", "vcraid", "--disks", "3", "--disk-size", "32M", "--chunk", "64K",
                "--power-loss", *opts).stdout.strip()
    try:
        data = bytes(random.Random(6).randbytes(16 * CHUNK))
        direct_write(device, 0, data, sync=True)
        rl("power-cut", "v")
        assembled = rl("assemble", "v")
        assert "resyncing after an unclean stop" in assembled.stderr, assembled.stderr
        device = assembled.stdout.strip()
        checked = json.loads(rl("check", "v", "--json").stdout)   # waits for the resync
        assert checked["mismatches"] == [] and direct_read(device, 0, len(data)) == data, checked
        rl("fail", "v", "--disk", "1")
        more = bytes(random.Random(7).randbytes(4 * CHUNK))
        direct_write(device, 16 * CHUNK, more, sync=True)   # into the log, the raid5 degraded
        rl("power-cut", "v")
        refused = rl("assemble", "v", check=False)
        assert refused.returncode == 2 and "v's raid5 was not stopped cleanly and is degraded" in refused.stderr, \
            refused.stderr
        assert leftovers(tmp_path / "home" / "labs" / "v", "v") == {}
        device = rl("assemble", "v", "--force").stdout.strip()
        assert direct_read(device, 0, len(data) + len(more)) == data + more
    finally:
        rl("destroy", "v", check=False)
    assert leftovers(tmp_path / "home" / "labs" / "v", "v") == {}
