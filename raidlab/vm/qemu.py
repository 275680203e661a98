"""Boot the lab VM, run commands in it, bring results back, and never leave QEMU behind.

Why this design (docs/vm-runner.md):
* One QEMU process per LabVM, started by `boot()` and always ended by `close()`: a clean
  `poweroff` when the guest answers, SIGKILL otherwise. Every failure (boot timeout, command
  timeout, QEMU exiting, the channel breaking) kills the VM first and then raises VMError
  with the tail of the guest console, so a caller never holds a half-dead VM.
* Host-process death is covered three ways: the context manager / atexit close the VM;
  while a VM runs in the main thread a SIGTERM is turned into SystemExit so that cleanup
  runs; and QEMU is started with PR_SET_PDEATHSIG=SIGKILL, so even a SIGKILLed raidlab
  takes its VM with it. QEMU runs in its own session, so a terminal's Ctrl-C reaches only
  raidlab, which then shuts the VM down itself.
* Accelerator: KVM only when /dev/kvm is usable *and* a probe boot of this kernel finishes
  (on the development machines /dev/kvm exists but a KVM guest hangs before its first
  console line); the probe result is cached per host kernel, QEMU version and guest kernel.
  TCG otherwise.
* Disks are virtio-blk from host files or block devices with cache=none when they accept
  O_DIRECT (the emulated disk then sees every guest write when it happens, which the timing
  models need), writeback otherwise (tmpfs), or as VMDisk.cache says; cache=none drives use
  Linux AIO (aio=native). An array daemon gives its FUSE files (raidlab.export says why
  not loop devices over them). NBD exports use QEMU's own NBD client.
* The API is blocking and thread-safe only per VM. From trio code, call it through
  `trio.to_thread.run_sync`; the engine serving the disk files must not run in the same
  thread, or QEMU's first read would wait for it.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import errno
import json
import mmap
import os
import platform
import select
import shutil
import signal
import socket
import tempfile
import threading
import time
import weakref
from pathlib import Path

from raidlab.errors import VMError
from raidlab.vm import protocol
from raidlab.vm.initramfs import CHANNEL_NAME, VMImage
from raidlab.vm.kernel import vm_cache_dir
from raidlab.tools import qemu as qemu_tool
from raidlab.tools.base import CommandResult

ACCEL_ENV = "RAIDLAB_VM_ACCEL"          # auto | tcg | kvm
KVM_PROBE_SECONDS = 20.0
DEFAULT_BOOT_TIMEOUT = 180.0
# A guest whose console says nothing for this long before READY has stalled (a boot takes
# about 10 s under TCG and writes its console all along); the boot is tried once more then,
# as after QEMU dying of a signal it did not get from us. Both were seen under TCG on a
# two-core host running three test workers: before READY the guest has written nothing.
BOOT_STALL_SECONDS = 60.0
BOOT_ATTEMPTS = 2
CONSOLE_TAIL_LINES = 15


# ---- disks ----

def direct_io_supported(path: str | os.PathLike) -> bool:
    """Can `path` be read with O_DIRECT? (QEMU's cache=none needs it; tmpfs says no.)"""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return False
        raise
    try:
        buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT requires
        try:
            os.preadv(fd, [buf], 0)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                return False
            raise
        finally:
            buf.close()
        return True
    finally:
        os.close(fd)


@dataclasses.dataclass(frozen=True)
class VMDisk:
    """A disk for the VM: a host file (path) or an NBD export (nbd:// or nbd+unix:// URL).

    The guest sees the i-th disk as /dev/vd<a+i> and also as /dev/raidlab/<serial>.
    """

    source: str
    read_only: bool = False
    serial: str | None = None
    cache: str | None = None  # none | writeback; None: none when the file accepts O_DIRECT

    def drive(self, index: int) -> qemu_tool.QemuDrive:
        serial = self.serial or f"raidlab-d{index}"
        if self.source.startswith(("nbd:", "nbd+")):
            return qemu_tool.QemuDrive(self.source, serial, cache="writeback", read_only=self.read_only)
        path = os.path.abspath(self.source)
        if not os.path.exists(path):
            raise VMError(f"disk image {path} does not exist")
        if not (os.path.isfile(path) or Path(path).is_block_device()):
            raise VMError(f"disk {path} is neither a regular file nor a block device")
        mode = os.R_OK if self.read_only else os.R_OK | os.W_OK
        if not os.access(path, mode):
            raise VMError(f"disk image {path} is not {'readable' if self.read_only else 'read-write'} "
                          f"for this user")
        cache = self.cache or ("none" if direct_io_supported(path) else "writeback")
        return qemu_tool.QemuDrive(path, serial, cache=cache, read_only=self.read_only)


def guest_device(index: int) -> str:
    """/dev/vda for disk 0, /dev/vdb for disk 1, ... (virtio-blk naming, up to 26 disks)."""
    if not 0 <= index < 26:
        raise ValueError("the lab VM supports up to 26 disks")
    return "/dev/vd" + chr(ord("a") + index)


# ---- results ----

def _guest_failure(result: CommandResult) -> VMError:
    """A guest script exited non-zero: its exit code, the script and its last line of stderr
    (of stdout if stderr is empty)."""
    script = result.argv[-1]
    last = result.stderr_text.strip().splitlines()[-1:] or result.stdout_text.strip().splitlines()[-1:]
    return VMError(f"command in the lab VM failed (exit {result.rc}): "
                   f"{script.strip()[:200]}" + (f": {last[0]}" if last else ""),
                   command=script, returncode=result.rc,
                   stdout=result.stdout_text, stderr=result.stderr_text)


# ---- accelerator choice ----

def _probe_key(image: VMImage) -> str:
    return f"{platform.release()}|{qemu_tool.version()}|{image.kernel.release}"


def _probe_cache() -> Path:
    return vm_cache_dir() / "kvm-probe.json"


def cached_kvm_probe(image: VMImage) -> dict | None:
    try:
        data = json.loads(_probe_cache().read_text())
    except (OSError, ValueError):
        return None
    return data if data.get("key") == _probe_key(image) else None


def probe_kvm(image: VMImage, timeout: float = KVM_PROBE_SECONDS) -> dict:
    """Boot the kernel under KVM with no initramfs; it works if the kernel reaches its panic.

    A working KVM guest reaches "Kernel panic - not syncing: VFS: Unable to mount root fs"
    in about a second and QEMU exits (-no-reboot). The result is cached.
    """
    with tempfile.TemporaryDirectory(prefix="raidlab-kvm-probe-") as tmp:
        console = os.path.join(tmp, "console.log")
        machine = qemu_tool.QemuMachine(
            kernel=str(image.boot_image), initrd=None, accel="kvm", memory_mib=256, cpus=1,
            append="console=ttyS0 panic=-1 loglevel=4", console_log=console)
        started = time.monotonic()
        proc = qemu_tool.spawn(qemu_tool.build_argv(machine), stderr_path=os.path.join(tmp, "stderr"))
        try:
            proc.wait(timeout)
            exited = True
        except Exception:  # subprocess.TimeoutExpired
            exited = False
        finally:
            proc.kill()
        seconds = time.monotonic() - started
        text = Path(console).read_text(errors="replace") if os.path.exists(console) else ""
        qemu_said = Path(tmp, "stderr").read_text(errors="replace").strip().splitlines()
        works = exited and "Kernel panic" in text
        reason = ("KVM guest reached the kernel's end of boot" if works else
                  f"KVM guest did not finish booting within {timeout:g} s" if not exited else
                  "KVM guest exited before the kernel finished booting")
        if not works and qemu_said:
            reason += f"; QEMU: {qemu_said[0][:160]}"
    result = {"key": _probe_key(image), "kvm_works": works, "reason": reason,
              "seconds": round(seconds, 2)}
    with contextlib.suppress(OSError):
        _probe_cache().parent.mkdir(parents=True, exist_ok=True)
        _probe_cache().write_text(json.dumps(result) + "\n")
    return result


def choose_accelerator(image: VMImage, requested: str | None = None) -> tuple[str, str]:
    """('kvm'|'tcg', why). `requested` (or RAIDLAB_VM_ACCEL) may force one."""
    requested = requested or os.environ.get(ACCEL_ENV) or "auto"
    if requested not in ("auto", "tcg", "kvm"):
        raise VMError(f"unknown accelerator {requested!r}", hint="use auto, tcg or kvm")
    if requested == "tcg":
        return "tcg", "requested"
    if not qemu_tool.kvm_accessible():
        if requested == "kvm":
            raise VMError("KVM requested but /dev/kvm is missing or not accessible to this user")
        return "tcg", "/dev/kvm missing or not accessible"
    if requested == "kvm":
        return "kvm", "requested"
    probe = cached_kvm_probe(image) or probe_kvm(image)
    if probe["kvm_works"]:
        return "kvm", "KVM probe booted"
    return "tcg", "KVM probe failed; `raidlab vm info` says why"


# ---- per-VM working directories ----

WORKDIR_PREFIX = "raidlab-vm-"


def _process_start(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22: start time in clock ticks


def _make_workdir() -> Path:
    """A private directory for the socket, console log and QEMU's stderr.

    It records its owner (pid + process start time), so that a later boot can remove the
    directories of raidlab processes that were SIGKILLed (their QEMU died with them, through
    PDEATHSIG, but nobody was left to delete the directory).
    """
    workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
    (workdir / "owner").write_text(f"{os.getpid()} {_process_start(os.getpid())}\n")
    return workdir


def sweep_stale_workdirs() -> list[Path]:
    """Remove this user's VM directories whose owning process is gone. Returns them."""
    removed = []
    for workdir in Path(tempfile.gettempdir()).glob(WORKDIR_PREFIX + "*"):
        try:
            if workdir.stat().st_uid != os.getuid():
                continue
            pid_text, _, start = (workdir / "owner").read_text().strip().partition(" ")
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        if _process_start(pid) != start:
            shutil.rmtree(workdir, ignore_errors=True)
            removed.append(workdir)
    return removed


# ---- the VM ----

_live_vms: weakref.WeakSet[LabVM] = weakref.WeakSet()


@atexit.register
def _kill_leftover_vms() -> None:
    for vm in list(_live_vms):
        vm.kill()


class _SigtermGuard:
    """While a VM runs in the main thread, SIGTERM raises SystemExit so cleanup runs."""

    _depth = 0
    _previous = None

    @classmethod
    def enter(cls) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False
        if cls._depth == 0:
            current = signal.getsignal(signal.SIGTERM)
            if current not in (signal.SIG_DFL, None):
                return False  # someone else handles SIGTERM; leave it to them
            cls._previous = current
            signal.signal(signal.SIGTERM, cls._handler)
        cls._depth += 1
        return True

    @classmethod
    def leave(cls) -> None:
        cls._depth -= 1
        if cls._depth == 0 and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, cls._previous or signal.SIG_DFL)

    @staticmethod
    def _handler(signum, frame):
        raise SystemExit(128 + signum)


class LabVM:
    """One booted lab VM. Use as a context manager:

        with LabVM(image, [VMDisk("d0.img"), VMDisk("d1.img")]) as vm:
            vm.run("mdadm --create ...").check()
    """

    def __init__(
        self,
        image: VMImage,
        disks: list[VMDisk] | tuple[VMDisk, ...] = (),
        *,
        memory_mib: int = 1024,
        cpus: int = 2,
        accel: str | None = None,
        boot_timeout: float = DEFAULT_BOOT_TIMEOUT,
        console_log: str | os.PathLike | None = None,
        kernel_args: str = "",
        env: dict[str, str] | None = None,
    ) -> None:
        self.image = image
        self.env = env  # QEMU's environment (a lab's child carries the lab's name in it)
        self.disks = tuple(disks)
        if len(self.disks) > 26:
            raise VMError("the lab VM supports up to 26 disks")
        self.memory_mib = memory_mib
        self.cpus = cpus
        self.requested_accel = accel
        self.boot_timeout = boot_timeout
        self.console_log_target = Path(console_log) if console_log else None
        self.kernel_args = kernel_args
        self.accel: str | None = None
        self.accel_reason: str | None = None
        self.argv: list[str] = []
        self.boot_seconds: float | None = None
        self.guest_uptime_at_ready: float | None = None
        self.guest: dict[str, str] = {}
        self._workdir: Path | None = None
        self._proc: qemu_tool.QemuProcess | None = None
        self._sock: socket.socket | None = None
        self._reader = protocol.FrameReader()
        self._frames: list[protocol.Frame] = []
        self._next_id = 1
        self._sigterm_guarded = False
        self._aborted = False  # abort(): a boot under way ends at once
        self.boot_retries: list[str] = []  # why an earlier boot attempt was given up
        self.commands_run = 0

    # -- lifecycle --

    def __enter__(self) -> LabVM:
        self.boot()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.kill()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def console_path(self) -> Path | None:
        return self._workdir / "console.log" if self._workdir else None

    def boot(self) -> float:
        """Start QEMU and wait for the guest agent. Returns the boot time in seconds. A boot
        that stalls, or whose QEMU dies of a signal, is tried once more (BOOT_STALL_SECONDS)."""
        if self._proc is not None:
            raise VMError("this LabVM was already booted")
        for attempt in range(1, BOOT_ATTEMPTS + 1):
            try:
                return self._boot_once()
            except VMError as exc:
                if attempt == BOOT_ATTEMPTS or self._aborted or not exc.fields.get("retry"):
                    raise
                self.boot_retries.append(str(exc))
                self._proc, self._sock, self._frames = None, None, []
                self._reader = protocol.FrameReader()
        raise AssertionError("unreachable")

    def _boot_once(self) -> float:
        drives = tuple(d.drive(i) for i, d in enumerate(self.disks))
        self.accel, self.accel_reason = choose_accelerator(self.image, self.requested_accel)
        sweep_stale_workdirs()
        # Short path: unix socket paths are limited to 107 bytes.
        self._workdir = _make_workdir()
        channel = self._workdir / "channel.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(channel))
            listener.listen(1)
        except OSError as exc:
            listener.close()
            self._cleanup()
            raise VMError(f"cannot create the VM's command socket {channel}: {exc.strerror}") from exc
        append = " ".join(filter(None, [
            "console=ttyS0", "panic=-1", "rdinit=/init", "8250.nr_uarts=1", self.kernel_args]))
        machine = qemu_tool.QemuMachine(
            kernel=str(self.image.boot_image), initrd=str(self.image.initramfs), append=append,
            accel=self.accel, memory_mib=self.memory_mib, cpus=self.cpus,
            console_log=str(self._workdir / "console.log"), channel_socket=str(channel),
            channel_name=CHANNEL_NAME, drives=drives)
        self.argv = qemu_tool.build_argv(machine)
        self._sigterm_guarded = _SigtermGuard.enter()
        started = time.monotonic()
        try:
            self._proc = qemu_tool.spawn(self.argv, stderr_path=str(self._workdir / "qemu.stderr"), env=self.env)
            _live_vms.add(self)
            if self._aborted:
                self._fail("the boot was stopped (the lab is being released)", console_hint=False)
            deadline = started + self.boot_timeout
            self._sock = self._accept(listener, deadline)
            ready = self._next_frame(deadline, what="the guest to boot")
            if ready.verb != "READY":
                self._fail(f"the guest said {ready.verb} before READY")
        except BaseException:
            self.kill()
            raise
        finally:
            listener.close()
        self.boot_seconds = time.monotonic() - started
        self.guest = ready.fields()
        with contextlib.suppress(ValueError):
            self.guest_uptime_at_ready = float(self.guest.get("uptime", ""))
        failed = [m for m in self.guest.get("failed", "").split(",") if m]
        if failed:
            self._fail(f"the lab VM could not load kernel modules: {', '.join(failed)}")
        return self.boot_seconds

    def close(self, timeout: float = 30.0) -> None:
        """Clean shutdown (sync + poweroff in the guest); kill if the guest does not comply."""
        if self._proc is None:
            self._cleanup()
            return
        if self.running and self._sock is not None:
            try:
                request_id = self._take_id()
                self._send(protocol.encode_off(request_id), time.monotonic() + timeout)
                self._expect(request_id, "BYE", time.monotonic() + timeout, what="poweroff")
                self._proc.wait(timeout)
            except (VMError, OSError, Exception):
                pass
        self.kill()

    shutdown = close

    def abort(self) -> None:
        """From another thread while boot() waits: end the boot now. QEMU is killed (or, not
        started yet, never starts) and boot() raises VMError, instead of waiting out the boot
        timeout for a guest that may never answer."""
        self._aborted = True
        self.stop_now()

    def stop_now(self) -> None:
        """SIGKILL QEMU and nothing else: safe from another thread while a command waits on
        the channel (that command then fails with VMError and releases the rest itself);
        call kill() or close() afterwards, from the thread that owns the VM."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.popen.kill()  # no reaping here: the waiting thread's poll() does it

    def kill(self) -> None:
        """SIGKILL QEMU (if still running) and release everything. Idempotent."""
        if self._proc is not None:
            self._proc.kill()
        self._cleanup()

    def _cleanup(self) -> None:
        _live_vms.discard(self)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
        if self._sigterm_guarded:
            _SigtermGuard.leave()
            self._sigterm_guarded = False
        if self._workdir is not None:
            console = self._workdir / "console.log"
            if self.console_log_target and console.exists():
                with contextlib.suppress(OSError):
                    shutil.copyfile(console, self.console_log_target)
            self._last_console = self.console_text()
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    # -- commands --

    def run(self, script: str, timeout: float = 60.0, check: bool = False) -> CommandResult:
        """Run `script` with /bin/sh in the guest; returns exit code, stdout and stderr.

        On timeout the VM is killed (a hung command may hold md or a disk in D state, so
        the guest cannot be trusted to recover) and VMError is raised.
        """
        start = time.monotonic()
        deadline = start + timeout
        request_id = self._take_id()
        self._send(protocol.encode_run(request_id, script), deadline)
        frame = self._expect(request_id, "DONE", deadline,
                             what=f"command {script.strip()[:120]!r} (timeout {timeout:g} s)")
        self.commands_run += 1
        result = CommandResult(["sh", "-c", script], int(frame.args[1]), frame.payloads[0],
                               frame.payloads[1], time.monotonic() - start, failure=_guest_failure)
        return result.check() if check else result

    def put(self, guest_path: str, data: bytes | str | os.PathLike, mode: int = 0o644,
            timeout: float = 120.0) -> None:
        """Write bytes (or a host file's content) to `guest_path` in the VM."""
        if not isinstance(data, bytes):
            data = Path(data).read_bytes()
        deadline = time.monotonic() + timeout
        request_id = self._take_id()
        self._send(protocol.encode_put(request_id, guest_path, data, mode), deadline)
        frame = self._expect(request_id, "STORED", deadline, what=f"storing {guest_path}")
        if frame.args[1] != "0":
            raise VMError(f"could not write {guest_path} in the lab VM (exit {frame.args[1]})")

    def get(self, guest_path: str, timeout: float = 120.0) -> bytes:
        """The content of a regular file in the VM."""
        deadline = time.monotonic() + timeout
        request_id = self._take_id()
        self._send(protocol.encode_get(request_id, guest_path), deadline)
        frame = self._expect(request_id, "FILE", deadline, what=f"reading {guest_path}")
        if int(frame.args[1]) < 0:
            raise VMError(f"{guest_path} is not a readable regular file in the lab VM")
        return frame.payloads[0]

    def fetch(self, guest_path: str, host_path: str | os.PathLike, timeout: float = 300.0) -> Path:
        """Copy a file (or a directory, as a tree) from the VM to the host."""
        host_path = Path(host_path)
        is_dir = self.run(f"[ -d {_sh_quote(guest_path)} ]", timeout=timeout).rc == 0
        if not is_dir:
            host_path.write_bytes(self.get(guest_path, timeout))
            return host_path
        import tarfile  # only needed for directories

        archive = "/run/raidlab/fetch.tar"
        self.run(f"tar -C {_sh_quote(guest_path)} -cf {archive} .", timeout=timeout, check=True)
        data = self.get(archive, timeout)
        self.run(f"rm -f {archive}", timeout=timeout)
        host_path.mkdir(parents=True, exist_ok=True)
        import io

        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(host_path, filter="data")
        return host_path

    def statistics(self) -> dict:
        return {"accel": self.accel, "accel_reason": self.accel_reason,
                "boot_seconds": self.boot_seconds, "guest_uptime_at_ready": self.guest_uptime_at_ready,
                "commands_run": self.commands_run, "pid": self.pid, "running": self.running,
                "disks": [d.source for d in self.disks], "kernel": self.image.kernel.release}

    def console_text(self) -> str:
        path = self.console_path
        if path is not None and path.exists():
            return path.read_text(errors="replace")
        return getattr(self, "_last_console", "")

    # -- channel plumbing --

    def _take_id(self) -> int:
        request_id = self._next_id
        self._next_id += 1
        return request_id

    def _accept(self, listener: socket.socket, deadline: float) -> socket.socket:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._fail(f"QEMU did not connect its command channel within {self.boot_timeout:g} s")
            readable, _, _ = select.select([listener], [], [], min(remaining, 0.2))
            if readable:
                conn, _ = listener.accept()
                return conn
            if self._aborted:
                self._fail("the boot was stopped (the lab is being released)", console_hint=False)
            if self._proc.poll() is not None:
                self._fail("QEMU exited before connecting its command channel")

    def _send(self, data: bytes, deadline: float) -> None:
        if self._sock is None or not self.running:
            raise VMError("the lab VM is not running")
        remaining = max(deadline - time.monotonic(), 0.001)
        self._sock.settimeout(remaining)
        try:
            self._sock.sendall(data)
        except (socket.timeout, OSError) as exc:
            self._fail(f"could not send a request to the lab VM ({exc})")
        finally:
            self._sock.settimeout(None)

    def _expect(self, request_id: int, verb: str, deadline: float, what: str) -> protocol.Frame:
        frame = self._next_frame(deadline, what)
        if frame.verb != verb or frame.request_id != request_id:
            self._fail(f"protocol error: expected {verb} {request_id}, got {frame.verb} "
                       f"{' '.join(frame.args)}")
        return frame

    def _next_frame(self, deadline: float, what: str) -> protocol.Frame:
        console_size, console_moved = -1, time.monotonic()
        while not self._frames:
            if not self.guest and self._workdir is not None:   # booting: is the console still moving?
                with contextlib.suppress(OSError):
                    size = (self._workdir / "console.log").stat().st_size
                    if size != console_size:
                        console_size, console_moved = size, time.monotonic()
                if time.monotonic() - console_moved > BOOT_STALL_SECONDS:
                    self._fail(f"the guest stalled while booting (no console output for {BOOT_STALL_SECONDS:.0f} s)",
                               retry=True)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._fail(f"timed out waiting for {what}; the VM was killed",
                           console_hint=not self.guest, timed_out=True)
            readable, _, _ = select.select([self._sock], [], [], min(remaining, 0.5))
            if self._aborted and not self.guest:
                self._fail("the boot was stopped (the lab is being released)", console_hint=False)
            if not readable:
                status = self._proc.poll()
                if status is not None:   # a signal we did not send, before READY: worth another boot
                    self._fail(f"QEMU exited (status {status}) while waiting for {what}",
                               retry=not self.guest and status < 0)
                continue
            try:
                data = self._sock.recv(1 << 20)
            except OSError as exc:
                self._fail(f"command channel broke while waiting for {what} ({exc})")
            if not data:
                with contextlib.suppress(Exception):
                    self._proc.wait(2)
                status = self._proc.poll()
                if status:
                    self._fail(f"QEMU exited with status {status} while waiting for {what}",
                               retry=not self.guest and status < 0)
                self._fail(f"the lab VM closed its command channel while waiting for {what}"
                           + (" (the guest powered off or panicked)" if status == 0 else ""))
            try:
                self._frames.extend(self._reader.feed(data))
            except protocol.ProtocolError as exc:
                self._fail(f"protocol error from the lab VM: {exc}")
        return self._frames.pop(0)

    def _fail(self, message: str, console_hint: bool = True, **fields) -> None:
        """Kill the VM, then raise VMError with the end of the guest console.

        The console's last line goes into the message only while booting (console_hint):
        after READY it holds boot messages that say nothing about a command's failure.
        """
        stderr_text = ""
        if self._workdir is not None and (self._workdir / "qemu.stderr").exists():
            stderr_text = (self._workdir / "qemu.stderr").read_text(errors="replace").strip()
        console = self.console_text()
        self.kill()
        tail = console.strip().splitlines()[-CONSOLE_TAIL_LINES:]
        last = next((line for line in reversed(tail) if line.strip()), "")
        hint = f"guest console ends with: {last.strip()}" if last and console_hint else None
        if stderr_text:
            said = " ".join(line.strip().removeprefix("qemu-system-x86_64: ")
                            for line in stderr_text.splitlines() if line.strip())
            hint = f"QEMU says: {said[:300]}" + (f"; {hint}" if hint else "")
        raise VMError(f"lab VM: {message}", hint=hint, console_tail="\n".join(tail),
                      qemu_stderr=stderr_text, argv=self.argv, **fields)


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
