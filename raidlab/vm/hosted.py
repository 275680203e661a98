"""The lab VM hosted by an array daemon (`raidlab create ... --runner vm`).

Why the daemon owns the VM: the array's disks are loop devices over files of the daemon's
FUSE mount (`volume` for engine and cache families, `disks/dK` for md), served by the
daemon's trio loop. The VM must live exactly as long as the array: booted after the host
object has built the array, shut down before the FUSE mount goes away. So the daemon boots
it on its lab session and pushes its shutdown on the session's cleanup stack; every exit
path of the daemon (success, error, SIGTERM, SIGINT) unwinds that stack.

How it is built:
* LabVM's API is blocking; every call runs in a trio worker thread (trio.to_thread), so the
  trio thread keeps serving FUSE requests that QEMU's disk I/O causes. One command at a time
  (a trio.Lock): the channel is a single request/reply stream. A stop of the daemon does not
  wait for a running guest command (a workload may run for an hour): the call's thread is
  abandoned and the shutdown kills QEMU under it. Nor does a status request: a host asking
  the guest for its status (md's mdadm --detail) reports busy() instead, the command that
  holds the channel and for how long.
* QEMU is recorded as a lab "process" resource (pid, start time): if the daemon is SIGKILLed
  (QEMU was started from a worker thread, so PR_SET_PDEATHSIG cannot cover it), the next
  `raidlab destroy`/`assemble` of the lab kills it through raidlab.lab.cleanup_stale.
* Commands run under the guest's `timeout -s KILL` (raidlab.vm.protocol.guest_script), so
  a hung command is killed inside the VM and reported as timed out; LabVM's own deadline (a
  minute later) is the backstop that kills the whole VM if the guest stops answering.
* Memory: RAIDLAB_VM_MEMORY_MIB (default 2048; at least 384, as the ~95 MB initramfs is held
  twice while the kernel unpacks it). RAIDLAB_VM_AVAILABLE_MIB (a scenario's
  `vm_available_memory`) then pins a ballast file in a guest ramfs until MemAvailable
  is that value, less what the array holds in host RAM that the paper's machine held in its
  own (a VC-RAID RAM buffer: host.guest_ram_reserved()), so the workload sees a machine the
  papers' size; the boot RAM defaults to 512 MiB then. TCG allocates guest memory lazily, so a large value costs host memory only
  when used.
* Scratch disk: the guest's scratch directory (GUEST_SCRATCH: workload sources such as the
  122 MB untar tarball, config files, client programs) is an ext4 on one more virtio disk, a
  sparse file of the lab made fresh at every boot and removed at shutdown, not the guest's
  RAM. So a small guest memory (a scenario's `vm_available_memory`, close to the papers'
  64 MB machines) still holds the sources, and their pages are ordinary, evictable page
  cache. It is the last disk, so the array's disks keep /dev/vda, /dev/vdb, ...; it is not
  timed by any disk model (a host file), as the paper's sources sat on a separate disk.
* Files travel as descriptors passed with the request (raidlab.service.daemonbase), never
  as host paths the daemon would open: `exec` writes a command's stdout and stderr into two
  files the client opened (and reads its stdin from a third), `put` reads the file the
  client opened, `get` writes into one. So large outputs never sit inside one JSON line, and
  the daemon touches no host file the client could not open itself.
"""

from __future__ import annotations

import os
import shlex
import threading
import time
import uuid
from pathlib import Path

import trio

from raidlab.errors import UsageError, VMError
from raidlab.lab import create_private, process_start_time
from raidlab.tools.base import require, run
from raidlab.vm import LabVM, VMDisk, build_vm_image
from raidlab.vm.protocol import GUEST_SCRATCH, GUEST_TIMEOUT_STATUS, guest_script

MEMORY_ENV = "RAIDLAB_VM_MEMORY_MIB"
AVAILABLE_ENV = "RAIDLAB_VM_AVAILABLE_MIB"
DEFAULT_MEMORY_MIB = 2048
BALLAST_MEMORY_MIB = 512  # boot RAM when only an available-memory target is given
MIN_MEMORY_MIB = 384     # the initramfs (~95 MB, held twice while unpacking) plus the kernel: 320 fails
MIN_AVAILABLE_MIB = 16
BALLAST_DIR = "/raidlab-ballast"  # a ramfs (no size limit, never evicted; the root tmpfs caps at half the RAM)
SCRATCH_SERIAL = "raidlab-scratch"
SCRATCH_BYTES = 4 << 30  # sparse: costs the host only what the guest writes
CHANNEL_GRACE_SECONDS = 60.0  # LabVM's deadline beyond the guest's own `timeout`


def _env_mib(name: str) -> int | None:
    text = os.environ.get(name, "")
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{name}={text!r} is not a number of MiB", hint="e.g. 512") from None


def vm_memory_mib() -> int:
    """The lab VM's RAM: $RAIDLAB_VM_MEMORY_MIB, else 512 with an available-memory target, else 2048."""
    value = _env_mib(MEMORY_ENV)
    if value is None:
        return BALLAST_MEMORY_MIB if vm_available_mib() else DEFAULT_MEMORY_MIB
    if value < MIN_MEMORY_MIB:
        raise UsageError(f"{MEMORY_ENV}={value}: the lab VM needs at least {MIN_MEMORY_MIB} MiB")
    return value


def vm_available_mib() -> int | None:
    """$RAIDLAB_VM_AVAILABLE_MIB: what the guest's page cache and programs may use after boot
    (MemAvailable), brought down to it by a ballast file pinned in a guest ramfs. This
    is how a scenario gives the workload a machine the size of the paper's (VC-RAID §4.3.2:
    64 MB of DRAM, 'the available RAM for caching and buffering is about 50MB'), while the
    VM itself needs more to unpack its initramfs."""
    value = _env_mib(AVAILABLE_ENV)
    if value is not None and value < MIN_AVAILABLE_MIB:
        raise UsageError(f"{AVAILABLE_ENV}={value}: at least {MIN_AVAILABLE_MIB} MiB")
    return value


class HostedVM:
    """The lab VM of one array daemon; `op_exec`, `op_put`, `op_get` are daemon ops."""

    def __init__(self, session, disks: list[Path], *, status=lambda m: None, reserved_bytes: int = 0):
        self.session = session
        self.disk_paths = [Path(p) for p in disks]
        self.reserved_mib = reserved_bytes >> 20  # host-side RAM the array takes out of the target
        self.status = status
        self.vm = None
        self.guest_memory: dict[str, int] = {}
        self.lock = trio.Lock()
        self.in_flight: threading.Event | None = None  # set when the latest call returns
        self.current: tuple[str, float] | None = None  # (what, monotonic start) of the running call

    async def start(self) -> None:
        """Build (cached) the image, boot the VM, push its shutdown on the lab session."""
        require("qemu-system-x86_64")
        memory = vm_memory_mib()
        self.status("preparing the lab VM image (cached after the first time)")
        image = await trio.to_thread.run_sync(lambda: build_vm_image(progress=self.status))
        scratch = self.session.lab.path / "vm-scratch.img"
        await trio.to_thread.run_sync(make_scratch_image, scratch)
        # The daemon's FUSE files, opened with O_DIRECT (cache=none) and Linux AIO:
        # raidlab.export says why.
        disks = [VMDisk(str(p), serial=f"raidlab-d{i}", cache="none")
                 for i, p in enumerate(self.disk_paths)]
        # QEMU carries the lab in its environment, as every child of a lab session does: it is
        # forked from a worker thread, so it outlives a SIGKILLed daemon (a parent-death
        # signal follows the forking thread), and the next cleanup must know it as the lab's.
        vm = LabVM(image, disks + [VMDisk(str(scratch), serial=SCRATCH_SERIAL)],
                   memory_mib=memory, console_log=self.session.lab.path / "vm-console.log",
                   env=self.session.child_env({}))
        self.vm = vm
        recorded = []  # the lab "process" resource of QEMU, once it runs

        async def shutdown():
            cut_short = self._cut_short()
            if cut_short:
                # A command was still running when the daemon was told to stop (a run's
                # Ctrl-C/SIGTERM, `raidlab destroy`): the guest answers one request at a
                # time, so a clean poweroff would wait for the whole workload. Kill QEMU now,
                # as a power cut: the array's own acknowledged writes are already on its
                # disks; the guest's unsynced page cache is lost, as the stop asked.
                vm.stop_now()
                await trio.to_thread.run_sync(self.in_flight.wait, 30.0)
            await trio.to_thread.run_sync(vm.close)
            for resource in recorded:
                self.session.lab.forget(resource)
            scratch.unlink(missing_ok=True)
            if cut_short:
                return f"VM killed during command {vm.commands_run + 1} (stop requested while it ran)"
            return f"VM stopped after {vm.commands_run} commands"

        # Pushed before booting: a boot that fails half-way is still killed (close is idempotent).
        self.session.push("lab VM", shutdown)
        self.status(f"booting the lab VM ({len(self.disk_paths)} disks, {memory} MiB)")
        async def record_qemu(cancel_scope):
            # Record QEMU as soon as it exists (boot runs in a thread for 5-10 s), so a daemon
            # SIGKILLed during boot leaves a VM the next cleanup finds.
            while vm.pid is None:
                await trio.sleep(0.02)
            recorded.append(self.session.lab.record(
                "process", pid=vm.pid, pgid=vm.pid, argv=["qemu-system-x86_64", "(lab VM)"],
                start_time=process_start_time(vm.pid)))

        booted = False

        async def abort_on_cancel():
            # The boot waits in a thread, which a cancellation (Ctrl-C, SIGTERM, `destroy`)
            # cannot interrupt: kill QEMU so the thread returns now, not at the boot timeout.
            try:
                await trio.sleep_forever()
            finally:
                if not booted:
                    vm.abort()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(record_qemu, nursery.cancel_scope)
            nursery.start_soon(abort_on_cancel)
            try:
                await trio.to_thread.run_sync(vm.boot)
                booted = True
            finally:
                nursery.cancel_scope.cancel()
        if vm.running and (not recorded or recorded[-1].fields.get("pid") != vm.pid):   # none yet, or a retried boot's
            recorded.append(self.session.lab.record(
                "process", pid=vm.pid, pgid=vm.pid, argv=["qemu-system-x86_64", "(lab VM)"],
                start_time=process_start_time(vm.pid)))
        for why in vm.boot_retries:
            self.status(f"lab VM booted again after: {why}")
        self.status(f"lab VM up in {vm.boot_seconds:.1f} s ({vm.accel})")
        await self.run_script(f"mkdir -p {GUEST_SCRATCH} && mount -t ext4 /dev/raidlab/{SCRATCH_SERIAL} {GUEST_SCRATCH}",
                              60)
        self.guest_memory = await self.meminfo()
        target = vm_available_mib()
        if target:
            target = max(MIN_AVAILABLE_MIB, target - self.reserved_mib)
            spare = self.guest_memory.get("MemAvailable", 0) // 1024 - target
            if spare < 0:
                raise VMError(f"the lab VM has only {self.guest_memory.get('MemAvailable', 0) // 1024} MiB "
                              f"available after boot, less than the {target} MiB asked for",
                              hint=f"raise {MEMORY_ENV} (now {memory})")
            self.status(f"pinning {spare} MiB in the guest so {target} MiB stay available")
            await self.run_script(f"mkdir -p {BALLAST_DIR} && mount -t ramfs ballast {BALLAST_DIR} && "
                                  f"dd if=/dev/zero of={BALLAST_DIR}/pinned bs=1M count={spare} status=none", 300)
            self.guest_memory = {**await self.meminfo(), "ballast_kib": spare * 1024,
                                 "available_target_kib": target * 1024,
                                 "reserved_by_array_kib": self.reserved_mib * 1024}

    async def meminfo(self) -> dict[str, int]:
        result = await self.run_script("cat /proc/meminfo", 30)
        return _meminfo(result.stdout.decode(errors="replace"))

    def ready_fields(self) -> dict:
        stats = self.vm.statistics()
        return {"vm": {"accel": stats["accel"], "boot_seconds": round(stats["boot_seconds"], 2),
                       "kernel": stats["kernel"], "pid": stats["pid"], "memory_mib": self.vm.memory_mib,
                       # after boot, before any workload: what the guest's page cache can use
                       "guest_memory_kib": self.guest_memory}}

    # -- blocking LabVM calls, one at a time, in a worker thread ---------------------------

    async def _call(self, what: str, fn, *args, **kwargs):
        if self.vm is None or not self.vm.running:
            raise VMError("the lab VM of this array is not running",
                          hint=f"see {self.session.lab.path / 'vm-console.log'}; destroy and create the array again")
        async with self.lock:  # a second client waits here for the running command
            if self._cut_short():
                raise VMError("the lab VM is being stopped: a command cut short still holds its channel")
            done = threading.Event()

            def call():
                try:
                    return fn(*args, **kwargs)
                finally:
                    done.set()

            self.in_flight = done
            self.current = (what, time.monotonic())
            # abandon_on_cancel: the daemon's stop (SIGTERM, `raidlab destroy`) must not wait
            # for a guest command that may run for an hour; the thread keeps the channel
            # until shutdown() kills QEMU under it, and no other call starts meanwhile.
            try:
                return await trio.to_thread.run_sync(call, abandon_on_cancel=True)
            finally:
                if done.is_set():
                    self.current = None

    def busy(self) -> dict | None:
        """The guest command running now ({"command", "seconds"}), or None: what a status
        request reports instead of queueing behind a workload that may run for an hour."""
        if self.current is None or not self.lock.locked():
            return None
        what, since = self.current
        return {"command": what, "seconds": round(time.monotonic() - since, 1)}

    def stopping_under_command(self) -> bool:
        """The daemon is stopping (SIGTERM, `raidlab destroy`: its work scope is cancelled)
        while a guest command holds the channel, or was abandoned holding it. The control
        handlers do not run in the work scope, so that command goes on until the lab VM's
        shutdown kills QEMU under it (a power cut). A cleanup step that needs the guest
        (md's `mdadm --stop`, released before the VM) would only queue behind it, for as long
        as the workload runs: it must not ask."""
        return self.session.work_scope.cancel_called and (self.lock.locked() or self._cut_short())

    def _cut_short(self) -> bool:
        """A call was abandoned by the daemon's stop while its thread still holds the channel
        (inside the lock, an unfinished latest call can only be that)."""
        return self.in_flight is not None and not self.in_flight.is_set()

    async def run_script(self, script: str, timeout: float, check: bool = True):
        """Run a shell script in the guest (for host classes, e.g. mdadm): a CommandResult."""
        return await self._call(_summary(script), self.vm.run, script, timeout=timeout, check=check)

    async def run_argv(self, argv: list[str], timeout: float, stdin: bytes | None = None) -> dict:
        """Run argv under the guest's `timeout`; {"rc", "stdout", "stderr", "seconds", "timed_out"}."""
        stdin_path = None
        if stdin is not None:
            stdin_path = f"/run/raidlab-stdin-{uuid.uuid4().hex[:8]}"
            await self._call(f"copy {len(stdin)} bytes to {stdin_path}", self.vm.put, stdin_path, stdin,
                             timeout=_transfer_seconds(len(stdin)))
        script = guest_script(argv, timeout, stdin_path)
        if stdin_path:
            script += f"; rc=$?; rm -f {stdin_path}; exit $rc"
        started = time.monotonic()
        result = await self._call(_summary(shlex.join(argv)), self.vm.run, script,
                                  timeout=timeout + CHANNEL_GRACE_SECONDS)
        seconds = time.monotonic() - started
        timed_out = result.rc == GUEST_TIMEOUT_STATUS and seconds >= timeout * 0.99
        return {"rc": result.rc, "stdout": result.stdout, "stderr": result.stderr,
                "seconds": seconds, "timed_out": timed_out}

    # -- daemon ops ----------------------------------------------------------------------

    # A request is raidlab.service.daemonbase.Request: its fields, and `files(n, what)`, the
    # descriptors that came with it.

    async def op_exec(self, request, send) -> dict:
        """Run `argv` in the guest; its stdout and stderr are written into the request's two
        descriptors (a third, if `stdin` is true, is read as its stdin)."""
        argv = request.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise UsageError("exec needs argv: a non-empty list of strings")
        timeout = float(request.get("command_timeout") or 60.0)
        fds = request.files(3 if request.get("stdin") else 2, "exec")
        stdin = await trio.to_thread.run_sync(_read_all, fds[2]) if len(fds) == 3 else None
        try:
            out = await self.run_argv(argv, timeout, stdin)
        except VMError as exc:
            if exc.fields.get("timed_out"):
                return {"timed_out": True, "error": str(exc)}
            raise
        await trio.to_thread.run_sync(_write_all, fds[0], out["stdout"])
        await trio.to_thread.run_sync(_write_all, fds[1], out["stderr"])
        return {"rc": out["rc"], "seconds": out["seconds"], "timed_out": out["timed_out"]}

    async def op_put(self, request, send) -> dict:
        """Copy the file open on the request's descriptor to `remote` in the guest."""
        (fd,) = request.files(1, "put")
        remote = str(request.get("remote", ""))
        data = await trio.to_thread.run_sync(_read_all, fd)
        parent = os.path.dirname(remote)
        if parent:
            await self._call(f"mkdir -p {parent}", self.vm.run, f"mkdir -p {shlex.quote(parent)}", timeout=30,
                             check=True)
        await self._call(f"copy {len(data)} bytes to {remote}", self.vm.put, remote, data,
                         timeout=_transfer_seconds(len(data)))
        return {"bytes": len(data)}

    async def op_get(self, request, send) -> dict:
        """Copy `remote` out of the guest into the file open on the request's descriptor."""
        (fd,) = request.files(1, "get")
        remote = str(request.get("remote", ""))
        data = await self._call(f"copy {remote} out", self.vm.get, remote, timeout=600.0)
        await trio.to_thread.run_sync(_write_all, fd, data)
        return {"bytes": len(data)}


def _read_all(fd: int) -> bytes:
    """The whole file open on `fd`, from its start (pread: the client's offset is untouched)."""
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    """`data` as the file open on `fd`, from its start."""
    os.ftruncate(fd, 0)
    view, done = memoryview(data), 0
    while done < len(data):
        done += os.pwrite(fd, view[done:], done)


def _summary(command: str, limit: int = 120) -> str:
    """A command line shortened for a status line."""
    return command if len(command) <= limit else command[:limit - 3] + "..."


def make_scratch_image(path: Path) -> None:
    """A fresh sparse file with an empty ext4 (no journal: scratch needs no crash safety)."""
    require("mkfs.ext4")
    path.unlink(missing_ok=True)
    with os.fdopen(create_private(path), "wb") as f:
        f.truncate(SCRATCH_BYTES)
    run(["mkfs.ext4", "-F", "-q", "-O", "^has_journal", "-E", "lazy_itable_init=1,nodiscard",
         "-L", "raidlab-scratch", str(path)])


def _meminfo(text: str) -> dict[str, int]:
    wanted = ("MemTotal", "MemFree", "MemAvailable", "Shmem")
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in wanted and rest.split():
            out[key] = int(rest.split()[0])
    return out


def _transfer_seconds(size: int) -> float:
    return 60.0 + size / 2e6


async def start_hosted_vm(daemon, session) -> HostedVM:
    """Boot the lab VM for the daemon's host (its vm_disks()); return it, running."""
    vm_disks = getattr(daemon.host, "vm_disks", None)
    if vm_disks is None:
        raise UsageError(f"{daemon.spec.arch} cannot run in the lab VM", hint="use --runner native")
    reserved = getattr(daemon.host, "guest_ram_reserved", lambda: 0)()
    hosted = HostedVM(session, vm_disks(), status=daemon.status, reserved_bytes=reserved)
    await hosted.start()
    return hosted
