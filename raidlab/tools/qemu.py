"""qemu-system-x86_64: find it, build its argv from a description, start it.

Why a spawn function next to `base.run`: QEMU is the one external program raidlab keeps
running while it talks to it, so `base.run` (run to completion) does not fit. `spawn` still
goes through `require` (MissingToolError names the package).

Why `build_argv` is a pure function of a `QemuMachine`: the argv is what a result records
and what a test can check without booting anything. The lab VM runner
(raidlab/vm/qemu.py) decides *what* machine to build; this module only spells it.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import subprocess
import threading
from collections.abc import Sequence

from raidlab.errors import VMError
from raidlab.tools.base import require, run, version_of

QEMU = "qemu-system-x86_64"


@dataclasses.dataclass(frozen=True)
class QemuDrive:
    """One virtio-blk disk. `source` is a host file path, or an NBD URL (nbd://, nbd+unix://)."""

    source: str
    serial: str
    cache: str = "none"          # none (O_DIRECT on the host) | writeback | directsync
    read_only: bool = False

    @property
    def is_nbd(self) -> bool:
        return self.source.startswith("nbd:") or self.source.startswith("nbd+")


@dataclasses.dataclass(frozen=True)
class QemuMachine:
    kernel: str
    initrd: str | None
    append: str
    accel: str = "tcg"           # tcg | kvm
    memory_mib: int = 1024
    cpus: int = 2
    console_log: str | None = None       # the guest's ttyS0 goes to this file
    channel_socket: str | None = None    # host unix socket (listening) for the virtio-serial port
    channel_name: str = "raidlab.cmd"
    drives: tuple[QemuDrive, ...] = ()
    name: str = "raidlab-vm"


def find() -> str:
    return require(QEMU)


def version() -> str | None:
    return version_of(QEMU)


def _drive_option(index: int, drive: QemuDrive) -> str:
    def esc(value: str) -> str:  # QEMU option syntax: a comma in a value is written twice
        return value.replace(",", ",,")

    parts = [f"file={esc(drive.source)}", "if=none", f"id=disk{index}", "format=raw"]
    if not drive.is_nbd:
        parts.append(f"cache={drive.cache}")
        # With O_DIRECT (cache=none), Linux AIO: each guest request is one asynchronous
        # kiocb, so requests of one file are in flight together and reach the file whole.
        # QEMU's thread pool (aio=threads) issues synchronous pwritev, which a FUSE file
        # opened with direct_io serialises under its inode lock (raidlab.export).
        parts.append("aio=native" if drive.cache == "none" else "aio=threads")
    if drive.read_only:
        parts.append("readonly=on")
    return ",".join(parts)


def build_argv(machine: QemuMachine, qemu: str = QEMU) -> list[str]:
    """The full argv for `machine` (pure: no file is touched)."""
    if machine.accel == "kvm":
        accel, cpu = ["-accel", "kvm"], "host"
    elif machine.accel == "tcg":
        # Multi-threaded TCG: one host thread per guest CPU (x86 on x86_64 supports it).
        accel, cpu = ["-accel", "tcg,thread=multi"], "max"
    else:
        raise ValueError(f"unknown accelerator {machine.accel!r}")
    argv = [
        qemu, "-name", machine.name,
        "-nodefaults", "-no-user-config", "-display", "none",
        "-machine", "q35", *accel, "-cpu", cpu,
        "-smp", str(machine.cpus), "-m", str(machine.memory_mib),
        "-no-reboot",  # a guest panic (panic=-1) or reboot ends QEMU instead of looping
        "-kernel", machine.kernel,
    ]
    if machine.initrd:
        argv += ["-initrd", machine.initrd]
    argv += ["-append", machine.append]
    if machine.console_log:
        argv += ["-chardev", f"file,id=console,path={machine.console_log}", "-serial", "chardev:console"]
    else:
        argv += ["-serial", "none"]
    # Disks first, so that their PCI slots (and so /dev/vda, vdb, ...) follow the given order.
    for i, drive in enumerate(machine.drives):
        argv += ["-drive", _drive_option(i, drive),
                 "-device", f"virtio-blk-pci,drive=disk{i},serial={drive.serial}"]
    if machine.channel_socket:
        argv += [
            "-device", "virtio-serial-pci,id=vser0",
            "-chardev", f"socket,id=channel,path={machine.channel_socket},server=off",
            "-device", f"virtserialport,bus=vser0.0,chardev=channel,name={machine.channel_name}",
        ]
    argv += ["-monitor", "none"]
    return argv


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class QemuProcess:
    """A running QEMU. `kill()` is idempotent; `wait()` reaps it."""

    def __init__(self, popen: subprocess.Popen):
        self.popen = popen

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout)

    def kill(self, grace: float = 30.0) -> int:
        """SIGKILL and reap. A QEMU blocked in uninterruptible I/O (e.g. on the file of a hung
        FUSE server) cannot die until that I/O returns; after `grace` seconds that becomes a
        VMError naming the pid instead of a hang."""
        if self.popen.poll() is None:
            try:
                self.popen.kill()
            except ProcessLookupError:
                pass
        try:
            return self.wait(grace)
        except subprocess.TimeoutExpired:
            raise VMError(f"QEMU (pid {self.pid}) did not exit {grace:g} s after SIGKILL",
                          hint="it is blocked in I/O on a disk file; is the server of a FUSE or NBD disk hung?",
                          pid=self.pid) from None


def spawn(argv: Sequence[str], *, stderr_path: str, env: dict[str, str] | None = None) -> QemuProcess:
    """Start QEMU in its own session; it gets SIGKILL if the starting thread dies.

    The death signal is set only when called from the main thread: Linux delivers it when the
    *thread* that forked exits, and a worker thread (trio.to_thread) may exit long before the
    VM should. Other exits are covered by the runner's own cleanup.
    """
    argv = [str(a) for a in argv]
    exe = require(argv[0])
    in_main = threading.current_thread() is threading.main_thread()
    with open(stderr_path, "ab") as err:
        popen = subprocess.Popen(
            [exe, *argv[1:]],
            stdin=subprocess.DEVNULL, stdout=err, stderr=err,
            start_new_session=True,  # a terminal's Ctrl-C reaches raidlab, which then kills QEMU
            preexec_fn=_die_with_parent if in_main else None,
            close_fds=True,
            env=env,
        )
    return QemuProcess(popen)


def accelerators() -> set[str]:
    """Accelerators this QEMU build knows (`-accel help`)."""
    out = run([QEMU, "-accel", "help"], timeout=30).stdout
    return {w for w in out.split() if w.isalnum() and w.islower()} - {"accelerators", "supported"}


def kvm_accessible() -> bool:
    return os.access("/dev/kvm", os.R_OK | os.W_OK)
