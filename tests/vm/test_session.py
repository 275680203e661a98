"""Runner sessions: the same calls run commands on the host and in the daemon's lab VM.

Native part: real processes (exit codes, stdin, binary-safe put/get, a timeout that kills).
VM part (one array for the module): `raidlab create r5 --arch raid5 --disks 3 --runner vm`,
then through open_session(lab) -> DaemonSession: mkfs.ext4 and e2fsck on the guest device,
stdin, put/get of a file larger than the channel's buffers, a hung command killed by its
timeout while the VM stays usable, and after destroy no QEMU, loop or mount is left.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raidlab.runners.session import DaemonSession, ExecFailed, ExecTimeout, NativeSession, RunnerSession, open_session
from raidlab.vm.protocol import guest_script

from lab_leftovers import loops_of, mounts_of, processes_of


# ---- pure ----

def test_guest_script_quotes_and_bounds_the_command():
    script = guest_script(["sh", "-c", "echo 'a b'; exit 3"], 2.5)
    assert script == "timeout -s KILL 3 sh -c 'echo '\"'\"'a b'\"'\"'; exit 3' < /dev/null"
    assert guest_script(["cat"], 10, "/run/in x").endswith("< '/run/in x'")


# ---- native ----

def test_native_session_runs_commands_exactly(tmp_path):
    with NativeSession("/dev/null") as session:
        assert isinstance(session, RunnerSession)
        assert session.runner == "native" and os.path.isdir(session.scratch)
        ok = session.exec(["sh", "-c", "echo out; echo err >&2; exit 0"], timeout=10)
        assert (ok.rc, ok.stdout, ok.stderr) == (0, b"out\n", b"err\n")
        assert ok.as_record()["argv"] == ["sh", "-c", "echo out; echo err >&2; exit 0"]
        assert session.exec(["cat"], timeout=10, stdin=b"fed in\n").stdout == b"fed in\n"
        failed = session.exec(["sh", "-c", "echo nope >&2; exit 3"], timeout=10, check=False)
        assert failed.rc == 3
        with pytest.raises(ExecFailed) as err:
            session.exec(["sh", "-c", "echo nope >&2; exit 3"], timeout=10)
        assert err.value.fields["returncode"] == 3 and "nope" in str(err.value)
        started = time.monotonic()
        with pytest.raises(ExecTimeout):
            session.exec(["sleep", "30"], timeout=0.5)
        assert time.monotonic() - started < 10
        data = os.urandom(300_000)
        (tmp_path / "src.bin").write_bytes(data)
        remote = os.path.join(session.scratch, "sub", "x.bin")
        session.put(tmp_path / "src.bin", remote)
        session.get(remote, tmp_path / "back" / "x.bin")
        assert (tmp_path / "back" / "x.bin").read_bytes() == data
        scratch = session.scratch
    assert not os.path.exists(scratch)


# ---- the daemon's lab VM ----

@pytest.fixture(scope="module")
def vm_array(raidlab_cmd_module, tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("raidlab create needs root (FUSE mount)")
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
    home = tmp_path_factory.mktemp("session-home")
    # A paper-sized machine: the daemon pins guest RAM until 64 MiB stay available.
    env = {**os.environ, "RAIDLAB_HOME": str(home), "RAIDLAB_VM_AVAILABLE_MIB": "64"}

    def raidlab(*args, check=True, timeout=600):
        proc = subprocess.run([*raidlab_cmd_module, *args], capture_output=True, text=True, env=env,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"raidlab {' '.join(args)} -> {proc.returncode}\n{proc.stderr}")
        return proc

    created = raidlab("create", "r5", "--arch", "raid5", "--disks", "3", "--disk-size", "64M",
                      "--runner", "vm", "--json")
    ready = json.loads(created.stdout)
    from raidlab.lab import Lab

    lab = Lab("r5", home=home)
    try:
        yield lab, ready, raidlab
    finally:
        raidlab("destroy", "r5", check=False)
        lab_dir = home / "labs" / "r5"
        assert not processes_of(lab_dir), "QEMU or another process of the lab survived destroy"
        assert not loops_of(lab_dir) and not mounts_of(lab_dir, "r5")


@pytest.fixture(scope="module")
def raidlab_cmd_module():
    exe = Path(sys.executable).parent / "raidlab"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "raidlab.cli"]


@pytest.mark.vm
@pytest.mark.root
def test_vm_array_ready_record(vm_array):
    lab, ready, _ = vm_array
    assert ready["runner"] == "vm" and ready["guest_device"] == "/dev/vda"
    assert ready["device"] is None  # no host loop device: the volume goes to the VM
    assert ready["vm"]["boot_seconds"] > 0 and ready["vm"]["memory_mib"] >= 384
    assert 0 < ready["capacity"] <= 2 * (64 << 20)  # raid5 over 3: two members' data
    runtime = json.loads((lab.path / "runtime.json").read_text())
    assert runtime["guest_device"] == "/dev/vda"
    # QEMU is recorded as a lab resource, so a SIGKILLed daemon's VM is found by cleanup.
    assert any(r.kind == "process" and "qemu" in r.fields["argv"][0] for r in lab.resources())


@pytest.mark.vm
@pytest.mark.root
def test_daemon_session_mkfs_and_fsck_on_the_guest_device(vm_array):
    lab, ready, _ = vm_array
    session = open_session(lab)
    assert isinstance(session, DaemonSession) and session.runner == "vm"
    assert session.device == "/dev/vda"
    size = session.exec(["blockdev", "--getsize64", session.device], timeout=30)
    assert int(size.stdout) == ready["capacity"]
    made = session.exec(["mkfs.ext4", "-F", "-q", session.device], timeout=300)
    assert made.rc == 0 and made.seconds > 0
    fsck = session.exec(["e2fsck", "-f", "-n", session.device], timeout=300)
    assert fsck.rc == 0, fsck.stdout_text + fsck.stderr_text
    assert "clean" in fsck.stdout_text or "files" in fsck.stdout_text
    # The filesystem is really on the engine's raid5: the FUSE volume carries ext4's magic.
    volume = Path(ready["volume"])
    with open(volume, "rb") as f:
        f.seek(1024 + 56)
        assert f.read(2) == b"\x53\xef"


@pytest.mark.vm
@pytest.mark.root
def test_daemon_session_stdin_files_failures_and_timeouts(vm_array, tmp_path):
    lab, _, _ = vm_array
    session = open_session(lab)
    assert session.exec(["cat"], timeout=30, stdin=b"through stdin\x00\xff").stdout == b"through stdin\x00\xff"
    out = session.exec(["sh", "-c", "echo out; echo err >&2; exit 4"], timeout=30, check=False)
    assert (out.rc, out.stdout, out.stderr) == (4, b"out\n", b"err\n")
    with pytest.raises(ExecFailed):
        session.exec(["false"], timeout=30)

    data = os.urandom(3 * 2**20 + 17)
    (tmp_path / "blob").write_bytes(data)
    remote = f"{session.scratch}/in/blob"
    session.put(tmp_path / "blob", remote)
    digest = session.exec(["sha256sum", remote], timeout=60).stdout_text.split()[0]
    import hashlib

    assert digest == hashlib.sha256(data).hexdigest()
    session.get(remote, tmp_path / "out" / "blob")
    assert (tmp_path / "out" / "blob").read_bytes() == data

    started = time.monotonic()
    with pytest.raises(ExecTimeout):
        session.exec(["sleep", "600"], timeout=3)
    assert time.monotonic() - started < 60
    # The guest killed the command; the VM still answers.
    assert session.exec(["echo", "alive"], timeout=30).stdout == b"alive\n"
    assert not (lab.path / "exec").exists()  # output came back through the client's own files


@pytest.mark.vm
@pytest.mark.root
def test_a_second_client_waits_for_the_running_command(vm_array):
    """The guest takes one command at a time; a second client's command waits its turn and
    runs (it is not refused), and both answers are the right ones."""
    import threading

    lab, _, _ = vm_array
    first: dict = {}

    def slow():
        first["result"] = open_session(lab).exec(["sh", "-c", "sleep 3; echo first"], timeout=60)

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(1)  # the first command is running in the guest
    second = open_session(lab).exec(["echo", "second"], timeout=60)
    thread.join(60)
    assert second.stdout == b"second\n"
    assert first["result"].stdout == b"first\n"


@pytest.mark.vm
@pytest.mark.root
def test_vm_has_room_and_the_workload_programs(vm_array, tmp_path):
    lab, ready, _ = vm_array
    session = open_session(lab)
    meminfo = session.exec(["cat", "/proc/meminfo"], timeout=30).stdout_text
    available_kib = int(next(l for l in meminfo.splitlines() if l.startswith("MemAvailable:")).split()[1])
    # RAIDLAB_VM_AVAILABLE_MIB=64: the ballast leaves the workload about 64 MiB (plus what the
    # kernel frees later), and the ready record says what it pinned.
    assert 56 * 1024 <= available_kib <= 80 * 1024, meminfo
    memory = ready["vm"]["guest_memory_kib"]
    # An engine raid5 gives up what md's raid5 holds in guest RAM: its stripe cache, 256
    # rows of a 4 KiB page per member (3 MiB over 3 members). VC-RAID adds its RAM buffer.
    stripe_cache_kib = 256 * 3 * 4
    assert memory["reserved_by_array_kib"] == stripe_cache_kib
    assert memory["available_target_kib"] == 64 * 1024 - stripe_cache_kib and memory["ballast_kib"] > 0
    assert abs(memory["MemAvailable"] - 64 * 1024) < 8 * 1024
    # Sources larger than that memory (the untar tarball is 122 MB) land on the scratch disk.
    data = os.urandom(1 << 20) * 100
    (tmp_path / "big").write_bytes(data)
    remote = f"{session.scratch}/big"
    session.put(tmp_path / "big", remote)
    import hashlib

    digest = session.exec(["sha256sum", remote], timeout=300).stdout_text.split()[0]
    assert digest == hashlib.sha256(data).hexdigest()
    on = session.exec(["df", "-P", remote], timeout=30).stdout_text.splitlines()[-1].split()[0]
    assert on == "/dev/raidlab/raidlab-scratch", on  # the scratch disk, not the guest's RAM root
    session.exec(["rm", "-f", remote], timeout=60)
    for program in ("tar", "cp", "rm", "sync", "fio", "postmark", "bonnie++", "mkfs.ext4", "e2fsck", "mdadm"):
        assert session.exec(["sh", "-c", f"command -v {program}"], timeout=30, check=False).rc == 0, program
    try:
        from raidlab.workloads.tps import tps_binary

        tps_binary()
    except Exception:
        return  # no TPS program on this host: the image leaves it out
    assert session.exec(["sh", "-c", "command -v tps"], timeout=30).stdout == b"/usr/local/bin/tps\n"


@pytest.mark.vm
@pytest.mark.root
def test_guest_requests_reach_the_array_at_their_own_size(vm_array):
    """A 1 KiB O_DIRECT write in the guest is one 1 KiB write at the engine, with no read:
    QEMU must not pad it to 4 KiB by reading first, which it did with cache=none on a FUSE
    file that accepted I/O of any size (its alignment probe passed at 1 byte and it assumed
    4096); the export refuses O_DIRECT I/O not in whole sectors, so QEMU finds 512."""
    lab, _ready, raidlab = vm_array
    session = open_session(lab)

    def counters() -> dict:
        stats = json.loads(raidlab("status", "r5", "--json").stdout)["statistics"]
        return {k: stats[k] for k in ("reads", "writes", "bytes_read", "bytes_written")}

    def guest_stat() -> list[int]:  # /sys/block/vda/stat: reads, _, sectors read, _, writes, _, sectors written
        return [int(v) for v in session.exec(["cat", "/sys/block/vda/stat"], timeout=30).stdout_text.split()]

    def fio(rw: str) -> None:  # fio, not busybox dd: dd's oflag=direct is not O_DIRECT there
        session.exec(["fio", "--name=one", f"--filename={session.device}", "--direct=1", f"--rw={rw}",
                      "--bs=1k", "--size=1k", "--offset=11k", "--ioengine=psync"], timeout=120)

    session.exec(["sync"], timeout=60)
    before, guest_before = counters(), guest_stat()
    fio("write")
    wrote, guest_wrote = counters(), guest_stat()
    # the guest issued one write of 2 sectors and no read ...
    assert (guest_wrote[4] - guest_before[4], guest_wrote[6] - guest_before[6]) == (1, 2)
    assert guest_wrote[0] == guest_before[0]
    # ... and the array saw exactly that
    assert (wrote["writes"] - before["writes"], wrote["bytes_written"] - before["bytes_written"]) == (1, 1024)
    assert wrote["reads"] == before["reads"], (before, wrote)
    fio("read")
    read = counters()
    assert (read["reads"] - wrote["reads"], read["bytes_read"] - wrote["bytes_read"]) == (1, 1024)


@pytest.mark.vm
@pytest.mark.root
def test_large_guest_writes_reach_the_engine_whole(vm_array):
    """1 MiB O_DIRECT writes in the guest arrive at `volume` as 1 MiB writes. A host loop
    device between QEMU and the file split them at its 128-segment limit into pieces of
    516-596 KiB whenever the guest's buffer pages were scattered."""
    lab, _ready, raidlab = vm_array
    session = open_session(lab)

    def volume() -> dict:
        return json.loads(raidlab("status", "r5", "--json").stdout)["export"]["volume"]

    before = volume()
    session.exec(["fio", "--name=big", f"--filename={session.device}", "--direct=1", "--rw=write",
                  "--bs=1m", "--size=16m", "--iodepth=1", "--ioengine=libaio"], timeout=300)
    after = volume()
    assert after["write_bytes"] - before["write_bytes"] == 16 << 20
    assert after["writes"] - before["writes"] == 16, (before, after)
    assert after["largest_write"] == 1 << 20


@pytest.mark.vm
@pytest.mark.root
def test_concurrent_guest_writes_are_in_flight_at_the_engine_together(vm_array):
    """fio at iodepth 8 in the guest has several writes in flight at `volume` at once. QEMU
    writing the FUSE file with synchronous pwritev (aio=threads) held the file's inode lock
    across every write, so exactly one was (and md's raid5, over four files, was not held
    back the same way)."""
    lab, _ready, raidlab = vm_array
    session = open_session(lab)
    session.exec(["fio", "--name=par", f"--filename={session.device}", "--direct=1", "--rw=randwrite",
                  "--bs=4k", "--size=8m", "--number_ios=512", "--iodepth=8", "--ioengine=libaio",
                  "--randseed=1"], timeout=300)
    volume = json.loads(raidlab("status", "r5", "--json").stdout)["export"]["volume"]
    # every byte arrives; the guest's block layer may merge two neighbouring random writes
    assert volume["write_bytes"] >= 512 * 4096 and volume["writes"] >= 256, volume
    assert volume["writes_in_flight_max"] > 1, volume


@pytest.mark.vm
@pytest.mark.root
def test_another_user_reaches_neither_the_vm_nor_its_files(vm_array):
    """The lab VM's work directory (QEMU's sockets and its initramfs copy) is the daemon's
    own, 0700; the scratch image and the lab are closed to another user."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "live"))
    from second_uid import as_nobody, available

    if available() is not None:
        pytest.skip(available())
    lab, ready, _raidlab = vm_array
    pid = ready["pid"]
    workdirs = [p for p in Path("/tmp").glob("raidlab-vm-*")
                if (p / "owner").is_file() and (p / "owner").read_text().split()[0] == str(pid)]
    assert workdirs, "the daemon's VM work directory"
    for workdir in workdirs:
        assert workdir.stat().st_mode & 0o777 == 0o700
        assert as_nobody(["ls", str(workdir)]).returncode != 0
    scratch = lab.path / "vm-scratch.img"
    assert scratch.stat().st_mode & 0o077 == 0
    assert as_nobody(["cat", str(scratch)]).returncode != 0
    assert as_nobody(["ls", str(lab.path)]).returncode != 0
