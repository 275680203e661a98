"""The lab VM boots, runs commands exactly, moves files, and never leaves QEMU behind.

One VM is booted for the module (fixture `vm`); tests that must kill or break a VM boot
their own. Everything is real: the Debian kernel package, the built initramfs, QEMU (TCG
here), host image files as virtio disks. Boot time is recorded (record_property), not
asserted; `raidlab vm bench` measures it.
"""

from __future__ import annotations

import hashlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from raidlab.errors import VMError
from raidlab.vm import LabVM, VMDisk, build_vm_image
from raidlab.vm.cpio import CpioEntry, write_newc
from raidlab.vm.initramfs import VMImage
from raidlab.vm.kernel import vm_cache_dir
from raidlab.vm.qemu import sweep_stale_workdirs

pytestmark = pytest.mark.vm

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def vm_image() -> VMImage:
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
    try:
        return build_vm_image()
    except VMError as exc:
        if exc.fields.get("missing"):
            pytest.skip(f"no lab-VM kernel reachable: {exc}")
        raise


@pytest.fixture(scope="module")
def disk_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("vmdisk") / "d0.img"
    with open(path, "wb") as f:
        f.truncate(16 * 2**20)
    return path


@pytest.fixture(scope="module")
def nbd_export(tmp_path_factory):
    """A host file served by nbdkit on a unix socket (None when nbdkit is not installed)."""
    if shutil.which("nbdkit") is None:
        yield None
        return
    base = tmp_path_factory.mktemp("nbd")
    backing = base / "nbd.img"
    with open(backing, "wb") as f:
        f.truncate(8 * 2**20)
    sock = base / "nbd.sock"
    server = subprocess.Popen(["nbdkit", "--unix", str(sock), "--foreground", "--exit-with-parent",
                               "file", str(backing)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not sock.exists() and server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sock.exists(), server.stderr.read().decode(errors="replace") if server.poll() is not None else "no socket"
    try:
        yield backing, f"nbd+unix:///?socket={sock}"
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture(scope="module")
def vm(vm_image, disk_file, nbd_export):
    disks = [VMDisk(str(disk_file), serial="scratch")]
    if nbd_export is not None:
        disks.append(VMDisk(nbd_export[1], serial="nbd"))
    with LabVM(vm_image, disks) as machine:
        yield machine


def _alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def test_boot_reports_kernel_release_and_boot_time(vm, vm_image, record_property):
    record_property("boot_seconds", round(vm.boot_seconds, 2))
    record_property("accel", vm.accel)
    assert vm.boot_seconds > 0 and vm.guest_uptime_at_ready > 0
    assert vm.guest["kver"] == vm_image.kernel.release
    result = vm.run("uname -r; hostname")
    assert result.rc == 0
    assert result.stdout_text.split() == [vm_image.kernel.release, "raidlab-vm"]
    assert vm.accel in ("tcg", "kvm") and vm.accel_reason


def test_modules_were_loaded_in_the_planned_order(vm, vm_image):
    # /proc/modules lists the most recently loaded module first.
    loaded = [line.split()[0] for line in vm.run("cat /proc/modules", check=True).stdout_text.splitlines()]
    assert list(reversed(loaded)) == vm_image.module_order
    mdstat = vm.run("cat /proc/mdstat", check=True).stdout_text
    for personality in ("[raid0]", "[raid1]", "[raid10]", "[raid5]", "[raid6]"):
        assert personality in mdstat


def test_exit_code_stdout_and_stderr_come_back_separately(vm):
    result = vm.run("printf 'to stdout'; printf 'to stderr' >&2; exit 7")
    assert (result.rc, result.stdout, result.stderr) == (7, b"to stdout", b"to stderr")
    with pytest.raises(VMError, match=r"exit 7.*: to stderr"):
        result.check()
    assert vm.run("false").rc == 1
    assert vm.run("kill -9 $$").rc == 137


def test_binary_and_large_output_is_exact(vm):
    tricky = vm.run(r"printf '\000\377\n@@RAIDLAB DONE 1 0 0 0\n'").stdout
    assert tricky == b"\x00\xff\n@@RAIDLAB DONE 1 0 0 0\n"
    result = vm.run("head -c 3000000 /dev/urandom > /run/big; sha256sum /run/big >&2; cat /run/big",
                    timeout=120, check=True)
    assert len(result.stdout) == 3000000
    assert result.stderr_text.split()[0] == hashlib.sha256(result.stdout).hexdigest()


def test_put_and_get_round_trip_files(vm):
    payload = os.urandom(1 << 20) + b"\n@@RAIDLAB BYE 1\n" + b"\0" * 100
    vm.put("/root/in/payload.bin", payload)
    digest = vm.run("sha256sum /root/in/payload.bin", check=True).stdout_text.split()[0]
    assert digest == hashlib.sha256(payload).hexdigest()
    assert vm.get("/root/in/payload.bin") == payload
    vm.put("/root/hello.sh", "#!/bin/sh\necho hello from $0\n".encode(), mode=0o755)
    assert vm.run("/root/hello.sh", check=True).stdout_text == "hello from /root/hello.sh\n"
    vm.put("/root/empty", b"")
    assert vm.get("/root/empty") == b""
    with pytest.raises(VMError, match="not a readable regular file"):
        vm.get("/root/no-such-file")
    assert vm.run("echo still here").stdout_text == "still here\n"  # channel still in step


def test_fetch_brings_a_result_directory_back(vm, tmp_path):
    vm.run("mkdir -p /root/results/sub && echo 42 > /root/results/a.txt && "
           "head -c 5000 /dev/zero > /root/results/sub/zeros", check=True)
    target = vm.fetch("/root/results", tmp_path / "results")
    assert (target / "a.txt").read_text() == "42\n"
    assert (target / "sub" / "zeros").read_bytes() == b"\0" * 5000
    single = vm.fetch("/root/results/a.txt", tmp_path / "a.txt")
    assert single.read_text() == "42\n"


def test_disk_is_the_host_file_with_direct_io(vm, disk_file):
    drive_options = [vm.argv[i + 1] for i, a in enumerate(vm.argv) if a == "-drive"]
    assert "cache=none" in drive_options[0]  # the tmp dir is on a disk filesystem
    assert vm.run("readlink /dev/raidlab/scratch", check=True).stdout_text.strip() == "/dev/vda"
    size = vm.run("blockdev --getsize64 /dev/vda", check=True).stdout_text.strip()
    assert int(size) == disk_file.stat().st_size
    marker = b"raidlab-marker-" + os.urandom(8).hex().encode()
    vm.put("/run/marker", marker.ljust(4096, b"\0"))
    vm.run("dd if=/run/marker of=/dev/vda bs=4096 seek=3 oflag=direct conv=notrunc", check=True)
    with open(disk_file, "rb") as f:
        f.seek(3 * 4096)
        assert f.read(len(marker)) == marker


def test_nbd_export_is_a_virtio_disk_through_qemus_own_client(vm, nbd_export):
    if nbd_export is None:
        pytest.skip("nbdkit not installed (apt-get install nbdkit)")
    backing, url = nbd_export
    assert any(a.startswith("file=nbd+unix://") for a in vm.argv)
    assert vm.run("readlink /dev/raidlab/nbd", check=True).stdout_text.strip() == "/dev/vdb"
    assert int(vm.run("blockdev --getsize64 /dev/vdb", check=True).stdout_text) == backing.stat().st_size
    marker = b"through-nbd-" + os.urandom(8).hex().encode()
    vm.put("/run/nbd-marker", marker.ljust(4096, b"\0"))
    vm.run("dd if=/run/nbd-marker of=/dev/vdb bs=4096 seek=5 oflag=direct conv=fsync", check=True)
    with open(backing, "rb") as f:
        f.seek(5 * 4096)
        assert f.read(len(marker)) == marker


WORKLOAD_SMOKE = r"""
set -e
truncate -s 96M /run/fs.img
dev=$(losetup -f)
losetup "$dev" /run/fs.img
mkfs.ext4 -q "$dev"
mount -t ext4 "$dev" /mnt
echo "fio: $(fio --name=w --directory=/mnt --rw=randwrite --bs=4k --size=4M --ioengine=psync \
      --output-format=terse | cut -d';' -f1-3)"
printf 'set location /mnt\nset number 100\nset transactions 100\nrun\nquit\n' | postmark > /run/pm
echo "postmark: $(grep -c 'seconds of transactions' /run/pm)"
echo "bonnie: $(bonnie++ -u root -d /mnt -s 0 -n 1 -q 2>/dev/null | tail -1 | cut -d, -f1-3)"
mkdir /mnt/src && cp -r /etc /mnt/src/ && tar -C /mnt -cf /mnt/src.tar src && rm -rf /mnt/src
echo "tar: $(tar -tf /mnt/src.tar | grep -c passwd)"
umount /mnt
e2fsck -fn "$dev" > /dev/null && echo "fsck: clean"
losetup -d "$dev"
"""


def test_workload_programs_run_on_ext4_over_a_guest_loop_device(vm):
    """The host's fio, postmark, bonnie++, GNU tar and e2fsprogs run in the VM (libraries complete)."""
    result = vm.run(WORKLOAD_SMOKE, timeout=300)
    assert result.rc == 0, result.stderr_text
    lines = dict(line.split(": ", 1) for line in result.stdout_text.splitlines())
    assert lines["fio"].startswith("3;fio-") and lines["fio"].endswith(";w")
    assert lines["postmark"] == "1"
    assert lines["bonnie"].split(",")[2] == "raidlab-vm"
    assert lines["tar"] == "1"
    assert lines["fsck"] == "clean"


def test_clean_shutdown_powers_the_guest_off(vm_image):
    machine = LabVM(vm_image)
    machine.boot()
    pid = machine.pid
    machine.close()
    assert not machine.running and _gone_within(pid, 5)
    assert "reboot: Power down" in machine.console_text()  # poweroff, not a kill


def test_hung_command_is_killed_at_its_timeout(vm_image):
    machine = LabVM(vm_image)
    machine.boot()
    pid = machine.pid
    started = time.monotonic()
    with pytest.raises(VMError, match=r"timed out waiting for command 'sleep 600' \(timeout 3 s\); "
                                      r"the VM was killed") as info:
        machine.run("sleep 600", timeout=3)
    waited = time.monotonic() - started
    assert info.value.fields["timed_out"] is True
    assert "\n" not in str(info.value)
    assert 3 <= waited < 60
    assert not machine.running
    assert _gone_within(pid, 5), "QEMU still running after the timeout"
    with pytest.raises(VMError, match="not running"):
        machine.run("true")
    machine.close()  # idempotent after a kill


def test_vm_that_does_not_boot_gives_one_clear_line(vm_image, tmp_path):
    # An initramfs whose /init cannot run: the kernel panics, QEMU exits (-no-reboot).
    broken = tmp_path / "broken.cpio"
    with open(broken, "wb") as f:
        write_newc([CpioEntry("init", "file", 0o755, data=b"#!/bin/sh\nexit 0\n")], f)
    machine = LabVM(VMImage(vm_image.kernel, broken, {}), boot_timeout=120)
    with pytest.raises(VMError) as info:
        machine.boot()
    text = str(info.value)
    assert "\n" not in text and text.startswith("lab VM: ")
    assert "Kernel panic" in info.value.fields["console_tail"]
    assert not machine.running and _gone_within(machine._proc.pid, 5)


def test_qemu_refusing_its_disks_is_reported_with_qemus_reason(vm_image, tmp_path):
    image = tmp_path / "twice.img"
    image.write_bytes(b"\0" * 2**20)
    machine = LabVM(vm_image, [VMDisk(str(image)), VMDisk(str(image))])  # same file twice: lock conflict
    with pytest.raises(VMError) as info:
        machine.boot()
    text = str(info.value)
    assert "\n" not in text and "QEMU says:" in text and "lock" in text
    assert not machine.running


def test_boot_timeout_kills_the_vm(vm_image):
    machine = LabVM(vm_image, boot_timeout=0.5)
    with pytest.raises(VMError, match="timed out waiting for the guest to boot|did not connect its command channel"):
        machine.boot()
    assert _gone_within(machine._proc.pid, 5)


def test_abort_ends_a_boot_that_would_wait_out_its_timeout(vm_image):
    """A guest that never answers (here a shell on the console instead of the agent) keeps
    boot() waiting for the boot timeout; abort() from another thread (a lab being released
    on Ctrl-C or SIGTERM) ends it at once, QEMU killed."""
    import threading

    machine = LabVM(vm_image, kernel_args="rdinit=/bin/sh", boot_timeout=600)
    aborter = threading.Timer(3.0, machine.abort)
    aborter.start()
    started = time.monotonic()
    try:
        with pytest.raises(VMError, match="the boot was stopped"):
            machine.boot()
    finally:
        aborter.cancel()
    assert time.monotonic() - started < 300   # well before the boot timeout
    assert not machine.running and _gone_within(machine._proc.pid, 5)


def test_a_qemu_that_dies_of_a_signal_while_booting_is_booted_again(vm_image):
    """QEMU under TCG on a loaded host was seen to die of SIGSEGV, or to stall, before the
    guest's READY; nothing was written then, so the boot is tried once more."""
    import threading

    machine = LabVM(vm_image)

    def crash_first_qemu():
        deadline = time.monotonic() + 60
        while machine.pid is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)
        os.kill(machine.pid, signal.SIGSEGV)

    crasher = threading.Thread(target=crash_first_qemu)
    crasher.start()
    try:
        machine.boot()
        assert len(machine.boot_retries) == 1 and "status -11" in machine.boot_retries[0], machine.boot_retries
        assert machine.run("true").rc == 0
    finally:
        crasher.join()
        machine.close()


def _copy_cache_for(user_home: Path, image: VMImage) -> None:
    cache = user_home / "cache" / "raidlab" / "vm"
    kernel_dir = image.kernel.root.parent
    target = cache / "kernel" / kernel_dir.name
    target.mkdir(parents=True)
    shutil.copytree(kernel_dir / "tree", target / "tree")
    shutil.copy2(kernel_dir / "tree.json", target / "tree.json")
    (cache / "initramfs").mkdir()
    shutil.copy2(image.initramfs, cache / "initramfs" / image.initramfs.name)
    shutil.copy2(image.initramfs.with_suffix(".json"), cache / "initramfs" / image.initramfs.with_suffix(".json").name)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        os.chown(dirpath, uid, gid)
        for name in filenames:
            os.chown(os.path.join(dirpath, name), uid, gid)


def _raidlab_argv_for(prefix: list[str], raidlab_cmd: list[str]) -> tuple[list[str], dict[str, str]]:
    """A way to start raidlab that the unprivileged user can execute.

    The venv's interpreter may live where `nobody` cannot enter (a pyenv Python under a
    0700 /root); then the system Python of the same version runs raidlab from this source
    tree and the venv's site-packages. Skips, saying why, if neither can.
    """
    probe = "import raidlab.cli"
    if subprocess.run([*prefix, sys.executable, "-c", probe], capture_output=True,
                      cwd="/").returncode == 0:
        return raidlab_cmd, {}
    system = "/usr/bin/python3"
    site = next(p for p in sys.path if p.endswith("site-packages"))
    env = {"PYTHONPATH": f"{REPO}:{site}"}
    same_version = os.path.exists(system) and subprocess.run(
        [system, "-c", f"import sys; sys.exit(sys.version_info[:2] != {tuple(sys.version_info[:2])})"]
    ).returncode == 0
    if same_version and subprocess.run([*prefix, "env", f"PYTHONPATH={env['PYTHONPATH']}", system,
                                        "-c", probe], capture_output=True, cwd="/").returncode == 0:
        return [system, "-c", "import sys; from raidlab.cli import main; sys.exit(main())"], env
    pytest.skip(f"the unprivileged user cannot run this test's Python ({os.path.realpath(sys.executable)} "
                f"is not accessible to it, and {system} is missing or another version)")


def test_vm_exec_works_as_an_unprivileged_user(vm_image, raidlab_cmd):
    """`raidlab vm exec -- uname -r` as nobody, with its own cache and an image it owns."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv not installed (util-linux)")
        import pwd

        nobody = pwd.getpwnam("nobody")
        prefix = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", "--"]
    command, extra_env = _raidlab_argv_for(prefix, raidlab_cmd)
    home = Path(tempfile.mkdtemp(prefix="raidlab-unpriv-"))
    try:
        _copy_cache_for(home, vm_image)
        disk = home / "d0.img"
        with open(disk, "wb") as f:
            f.truncate(4 * 2**20)
        if prefix:
            _chown_tree(home, nobody.pw_uid, nobody.pw_gid)
            os.chmod(home, 0o755)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
               "XDG_CACHE_HOME": str(home / "cache"), "LANG": "C.UTF-8", **extra_env}
        proc = subprocess.run(
            [*prefix, *command, "vm", "exec", "--disk", str(disk), "--",
             "uname -r; echo unprivileged | dd of=/dev/vda oflag=direct conv=sync bs=512 2>/dev/null"],
            env=env, capture_output=True, text=True, timeout=300, cwd=home)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == vm_image.kernel.release
        assert "booted in" in proc.stderr
        assert disk.read_bytes()[:13] == b"unprivileged\n"
        if prefix:
            assert disk.stat().st_uid == nobody.pw_uid
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _qemu_children(parent: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and comm.startswith("qemu-system"):
            pids.append(int(entry.name))
    return pids


def _read_stderr_until(proc: subprocess.Popen, needle: bytes, seconds: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + seconds
    while needle not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.2)
        if ready:
            chunk = os.read(proc.stderr.fileno(), 4096)
            if not chunk:
                break
            seen += chunk
    return seen


@pytest.mark.parametrize("sig, expected_rc", [
    (signal.SIGINT, 130), (signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGKILL, -signal.SIGKILL)])
def test_host_process_signal_takes_the_vm_down(vm_image, raidlab_cmd, sig, expected_rc, terminal_sigint):
    proc = subprocess.Popen([*raidlab_cmd, "vm", "exec", "--", "sleep 600"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=terminal_sigint)
    try:
        seen = _read_stderr_until(proc, b"booted in", 180)
        assert b"booted in" in seen, seen.decode(errors="replace")
        qemus = _qemu_children(proc.pid)
        assert len(qemus) == 1
        cmdline = Path(f"/proc/{qemus[0]}/cmdline").read_bytes().decode()
        workdir = Path(re.search(r"path=(/[^,\0]*/raidlab-vm-[^/,\0]+)/console\.log", cmdline).group(1))
        assert workdir.is_dir()
        os.kill(proc.pid, sig)
        assert proc.wait(30) == expected_rc
        assert _gone_within(qemus[0], 10), f"QEMU {qemus[0]} survived {sig.name} of raidlab"
        if sig == signal.SIGKILL:
            # nobody was left to clean up; the next boot's sweep removes the directory
            assert workdir.is_dir()
            assert workdir in sweep_stale_workdirs()
        assert not workdir.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cache_is_reused_without_rebuilding(vm_image):
    again = build_vm_image()
    assert again.initramfs == vm_image.initramfs
    assert again.manifest["key"] == vm_image.manifest["key"]
    assert str(again.initramfs).startswith(str(vm_cache_dir()))
