"""A lab: one directory, one FUSE mount, its loop devices, mounts and child processes --
and the guarantee that all of them are released.

Why it is built this way:

* Every kernel object the toolkit creates (FUSE mount, loop device, mount, child process)
  outlives a crashed Python process. So each one is written to the lab's state file
  (`state.json`, replaced atomically) *before* or right after it is created, and erased from
  it once released. What a SIGKILL leaves behind is therefore listed on disk, and
  `cleanup_stale` releases it: kill recorded processes (checked by start time, so a reused
  pid is never hit), unmount mounts on the lab's loop devices and under its directory,
  detach its loops, lazily unmount its dead FUSE mount. It also *scans* for what the record
  may have missed in the instant between creation and recording: loop devices whose
  backing file lies in the lab's mount, mounts under the lab directory, and processes whose
  environment carries this run's RAIDLAB_LAB_RUN token.
* A live run releases in reverse order of creation from a cleanup stack, inside trio and
  shielded from cancellation, so it runs on success, on an exception, and on SIGINT, SIGTERM
  and SIGHUP (received with trio.open_signal_receiver, which turns them into a cancellation
  of the lab's work instead of an exception at an arbitrary point). The FUSE server keeps
  serving during the release: detaching a loop device flushes through it.
* A lab directory is owned by one process at a time: an flock on `lock`, which the kernel
  drops when the owner dies however it dies. A lab whose lock is free but whose state file
  still lists resources was left by a killed run; the next run (or `raidlab lab cleanup`)
  releases it first.
* Test hooks (documented, read from the environment): RAIDLAB_FAIL_AT=<point> raises a
  LabError at that set-up point; RAIDLAB_PAUSE_AT=<point> prints "raidlab: paused at
  <point>" on stderr and waits there (until a signal), so a test can interrupt at an exact
  point. Points: images-created, fuse-mounted, loop-attached, loops-attached,
  command-started.

Layout: $RAIDLAB_HOME/labs/NAME (RAIDLAB_HOME defaults to ./run):
    lock, state.json, images/dK.img, mnt/ (the FUSE mount), fusectl/ (a moment's mount)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from raidlab.errors import LabError, LabInterrupted, RaidlabError, UsageError

STATE_VERSION = 1
RUN_TOKEN_ENV = "RAIDLAB_LAB_RUN"
FAIL_AT_ENV = "RAIDLAB_FAIL_AT"
PAUSE_AT_ENV = "RAIDLAB_PAUSE_AT"
SET_UP_POINTS = ("images-created", "fuse-mounted", "loop-attached", "loops-attached",
                 "command-started")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# How long a child process group gets between SIGTERM and SIGKILL.
TERMINATE_GRACE_SECONDS = 5.0


def raidlab_home() -> Path:
    return Path(os.environ.get("RAIDLAB_HOME", "run")).absolute()


def labs_dir(home: str | os.PathLike | None = None) -> Path:
    return (Path(home).absolute() if home is not None else raidlab_home()) / "labs"


def check_lab_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise UsageError(f"bad lab name {name!r}",
                         hint="use letters, digits, '.', '_' or '-' (at most 64)")
    return name


# --- processes -------------------------------------------------------------------------

def _stat_fields(stat_text: str) -> list[str]:
    """The fields of /proc/<pid>/stat from field 3 (state) on: rest[k] is field k + 3 of proc(5).

    The command name (field 2) may contain spaces and parentheses: split after its last ')'.
    """
    return stat_text[stat_text.rindex(")") + 2:].split()


def parse_proc_stat_start_time(stat_text: str) -> int:
    """Field 22 (starttime, clock ticks since boot) of /proc/<pid>/stat (proc(5))."""
    return int(_stat_fields(stat_text)[19])


def process_start_time(pid: int) -> int | None:
    try:
        return parse_proc_stat_start_time(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def process_cpu(pid: int | None) -> dict[str, float] | None:
    """User and system CPU seconds of a running process, all its threads (fields 14 and 15
    of /proc/<pid>/stat); None if it is gone."""
    if pid is None:
        return None
    try:
        rest = _stat_fields(Path(f"/proc/{pid}/stat").read_text())
        user, system = int(rest[11]), int(rest[12])
    except (OSError, ValueError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return {"user_s": round(user / tick, 2), "system_s": round(system / tick, 2)}


def process_state(pid: int) -> str | None:
    """The one-letter state of /proc/<pid>/stat (R, S, D, Z, ...), None if no such pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:][:1] or None


def same_process(pid: int, start_time: int | None) -> bool:
    """True if `pid` is alive (not a zombie) and is the process that had `start_time`.

    A zombie counts as gone: it holds no resources, and an orphan's zombie waits for the
    host's init to reap it, which may take its time.
    """
    now = process_start_time(pid)
    if now is None or (start_time is not None and now != start_time):
        return False
    return process_state(pid) != "Z"


def parse_environ(data: bytes) -> dict[str, str]:
    out = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def processes_with_env(key: str, value: str) -> list[int]:
    """Pids (not ours) whose environment has key=value: a lab run's children and their
    descendants, even those that left the process group."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            env = parse_environ(Path(f"/proc/{entry}/environ").read_bytes())
        except OSError:
            continue
        if env.get(key) == value:
            found.append(int(entry))
    return found


def _signal_group_or_pid(pid: int, pgid: int | None, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if pgid:
            os.killpg(pgid, sig)
        else:
            os.kill(pid, sig)


# --- state file ------------------------------------------------------------------------

@dataclass
class Resource:
    """One kernel object a lab created. kind: fuse_mount, loop, mount, process, image."""

    id: int
    kind: str
    fields: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        f = self.fields
        if self.kind == "loop":
            return f"loop device {f.get('device')} ({f.get('backing_file')})"
        if self.kind == "fuse_mount":
            return f"FUSE mount {f.get('path')}"
        if self.kind == "mount":
            return f"mount {f.get('target')} ({f.get('source')})"
        if self.kind == "process":
            return f"process {f.get('pid')} ({' '.join(f.get('argv', []))[:60]})"
        if self.kind == "image":
            return f"image {f.get('path')}"
        return f"{self.kind} {f}"


class Lab:
    """A lab directory and its state file. Must find or may create the directory
    (`create=True`); does not lock it (see `owned`)."""

    def __init__(self, name: str, *, home: str | os.PathLike | None = None,
                 create: bool = False):
        self.name = check_lab_name(name)
        base = labs_dir(home)
        self.path = base / name
        if create:
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError(f"cannot create lab directory {self.path}: {exc.strerror}",
                                 hint="set RAIDLAB_HOME to a writable directory") from exc
        elif not self.path.is_dir():
            raise LabError(f"no lab named {name!r} in {base}",
                           hint="`raidlab lab list` shows the labs")
        self._lock_fd: int | None = None
        self.run_id: str | None = None

    # paths
    @property
    def state_path(self) -> Path:
        return self.path / "state.json"

    @property
    def mountpoint(self) -> Path:
        return self.path / "mnt"

    @property
    def images_dir(self) -> Path:
        return self.path / "images"

    @property
    def fusectl_dir(self) -> Path:
        return self.path / "fusectl"

    # ownership
    def try_lock(self) -> bool:
        fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    @contextlib.contextmanager
    def owned(self) -> Iterator[Lab]:
        """Hold the lab's lock; LabError if another live process holds it."""
        if not self.try_lock():
            owner = self.read_state().get("owner", {}).get("pid")
            raise LabError(f"lab {self.name!r} is in use" + (f" by pid {owner}" if owner else ""),
                           hint="stop that run first, or choose another --name")
        try:
            yield self
        finally:
            self.unlock()

    def in_use(self) -> bool:
        if self._lock_fd is not None:
            return True
        if self.try_lock():
            self.unlock()
            return False
        return True

    # state
    def read_state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise LabError(f"unreadable lab state {self.state_path}: {exc}") from exc

    def resources(self) -> list[Resource]:
        return [Resource(r["id"], r["kind"], r.get("fields", {}))
                for r in self.read_state().get("resources", [])]

    def _write_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            json.dump(state, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.state_path)

    def begin_run(self) -> None:
        self.run_id = uuid.uuid4().hex
        state = self.read_state()
        state.update({
            "version": STATE_VERSION, "name": self.name, "path": str(self.path),
            "owner": {"pid": os.getpid(), "start_time": process_start_time(os.getpid()),
                      "run_id": self.run_id, "argv": sys.argv, "started": time.time()},
        })
        state.setdefault("resources", [])
        state.setdefault("next_id", 1)
        self._write_state(state)

    def record(self, kind: str, **fields: Any) -> Resource:
        state = self.read_state()
        rid = state.get("next_id", 1)
        state["next_id"] = rid + 1
        state.setdefault("resources", []).append({"id": rid, "kind": kind, "fields": fields})
        self._write_state(state)
        return Resource(rid, kind, fields)

    def update(self, resource: Resource, **fields: Any) -> None:
        resource.fields.update(fields)
        state = self.read_state()
        for r in state.get("resources", []):
            if r["id"] == resource.id:
                r["fields"].update(fields)
        self._write_state(state)

    def forget(self, resource: Resource) -> None:
        state = self.read_state()
        state["resources"] = [r for r in state.get("resources", []) if r["id"] != resource.id]
        self._write_state(state)

    def end_run(self) -> None:
        """Mark a clean end: no owner, and (if everything was released) no resources."""
        state = self.read_state()
        state.pop("owner", None)
        self._write_state(state)


# --- releasing (shared by the live cleanup stack and the stale cleanup) -----------------

def release_process(fields: dict[str, Any], *, grace: float = TERMINATE_GRACE_SECONDS) -> str:
    """Terminate a recorded child process group (blocking; used by stale cleanup)."""
    pid, pgid, start = fields["pid"], fields.get("pgid"), fields.get("start_time")
    if not same_process(pid, start):
        # Leader gone; its group may still have members (children of a shell).
        if pgid:
            _signal_group_or_pid(pid, pgid, signal.SIGKILL)
        return "already exited"
    _signal_group_or_pid(pid, pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and same_process(pid, start):
        time.sleep(0.05)
    _signal_group_or_pid(pid, pgid, signal.SIGKILL)
    return "terminated"


def kill_tagged_processes(run_id: str, *, grace: float = TERMINATE_GRACE_SECONDS) -> list[int]:
    """SIGTERM, then SIGKILL, every process carrying RAIDLAB_LAB_RUN=run_id (blocking)."""
    pids = processes_with_env(RUN_TOKEN_ENV, run_id)
    starts = {pid: process_start_time(pid) for pid in pids}
    for pid in pids:
        _signal_group_or_pid(pid, None, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(same_process(p, starts[p]) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if same_process(pid, starts[pid]):
            _signal_group_or_pid(pid, None, signal.SIGKILL)
    return pids


def unmount_users_of(device: str) -> list[str]:
    """Unmount every mount whose source is `device` (lazily if busy). Blocking."""
    from raidlab.tools import mount as mount_tool

    done = []
    for entry in mount_tool.mounts_of_source(device):
        try:
            mount_tool.umount(entry.mount_point, timeout=60)
        except RaidlabError:
            mount_tool.umount(entry.mount_point, lazy=True, timeout=60)
        done.append(entry.mount_point)
    return done


def release_loop(fields: dict[str, Any]) -> str:
    """Detach a recorded loop device if it still serves the recorded file. Blocking."""
    from raidlab.export.loop import detach_and_wait
    from raidlab.tools import losetup

    device = fields["device"]
    state = losetup.sysfs_state(device)
    if not state:
        return "already detached"
    backing = losetup.strip_deleted(state.get("backing_file", ""))
    if fields.get("backing_file") and backing not in recorded_backing_names(fields):
        return f"now serves {backing}: left alone"
    unmounted = unmount_users_of(device)
    released = detach_and_wait(device)
    note = f"unmounted {', '.join(unmounted)}; " if unmounted else ""
    return note + ("detached" if released else "detach pending (still open: autoclear)")


def recorded_backing_names(fields: dict[str, Any]) -> set[str]:
    """The names the kernel may give a recorded loop's backing file: its path, and -- once
    its FUSE mount was detached while the loop still held the file -- the path relative to
    that mount ("/disks/d0"), which is how the kernel names a file of a detached mount."""
    names = {fields["backing_file"]}
    mount = fields.get("mountpoint")
    if mount and fields["backing_file"].startswith(mount.rstrip("/") + "/"):
        names.add(fields["backing_file"][len(mount.rstrip("/")):])
    return names


def detach_loops_under(directory: str | os.PathLike) -> list[str]:
    """Unmount and detach every loop device backed by a file under `directory` (e.g. loops a
    COMMAND attached itself to the lab's FUSE files). Blocking; returns what it did."""
    from raidlab.export.loop import detach_and_wait
    from raidlab.tools import losetup

    done = []
    for dev in losetup.devices_backed_under(directory):
        unmount_users_of(dev.device)
        released = detach_and_wait(dev.device)
        done.append(f"{dev.device} {'detached' if released else 'autoclear pending'}")
    return done


def release_fuse_mount(path: str, scratch: str | os.PathLike | None = None) -> str:
    """Unmount a FUSE mount whose server is gone or hung: abort its connection first when
    `scratch` is given (so nothing waits on it), then a lazy unmount. Blocking."""
    from raidlab.tools import mount as mount_tool

    if not mount_tool.is_mount_point(path):
        return "not mounted"
    if scratch is not None:
        abort_connection(path, scratch)
    mount_tool.umount(path, lazy=True, timeout=60)
    return "unmounted (lazy)"


def is_fuse_fstype(fstype: str) -> bool:
    """A FUSE file system ("fuse", "fuse.<subtype>", "fuseblk") -- not "fusectl"."""
    return fstype in ("fuse", "fuseblk") or fstype.startswith("fuse.")


def abort_connection(path: str, scratch: str | os.PathLike) -> bool:
    from raidlab.export.fuse import abort_connection as abort

    return abort(path, scratch)


@dataclass
class StaleReport:
    released: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def nothing_to_do(self) -> bool:
        return not self.released and not self.failed


def cleanup_stale(lab: Lab) -> StaleReport:
    """Release what a killed run of `lab` left behind. The caller must own the lab's lock.

    Order: processes, mounts on the lab's loops and under its directory, loops, the FUSE
    mount, scratch images -- the reverse of how a run creates them.
    """
    from raidlab.tools import losetup
    from raidlab.tools import mount as mount_tool

    if lab._lock_fd is None:
        raise LabError(f"cleanup of lab {lab.name!r} needs its lock")
    report = StaleReport()
    state = lab.read_state()
    resources = lab.resources()

    def attempt(what: str, fn: Callable[[], str], resource: Resource | None = None) -> None:
        try:
            outcome = fn()
        except Exception as exc:  # keep going: release everything else
            report.failed.append(f"{what}: {exc}")
            return
        report.released.append(f"{what}: {outcome}")
        if resource is not None:
            lab.forget(resource)

    # 1. processes: recorded ones, then anything carrying the dead run's token
    for res in reversed([r for r in resources if r.kind == "process"]):
        attempt(res.describe(), lambda f=res.fields: release_process(f, grace=2.0), res)
    run_id = state.get("owner", {}).get("run_id")
    if run_id:
        pids = kill_tagged_processes(run_id, grace=2.0)
        if pids:
            report.released.append(f"processes of the run {run_id[:8]}: killed {pids}")

    # 2. mounts: recorded ones, then every other non-FUSE mount under the lab directory
    for res in [r for r in resources if r.kind == "mount"]:
        attempt(res.describe(), lambda f=res.fields: _release_mount(f), res)
    for entry in mount_tool.mounts_under(lab.path):
        if not is_fuse_fstype(entry.fstype):
            attempt(f"mount {entry.mount_point}",
                    lambda p=entry.mount_point: _release_mount({"target": p}))

    # 3. the lab's FUSE mounts: recorded, plus any under the lab directory. Abort their
    #    connections first, so detaching the loops below cannot wait on a hung server.
    fuse_res = [r for r in resources if r.kind == "fuse_mount"]
    fuse_paths = {r.fields["path"] for r in fuse_res} | {
        e.mount_point for e in mount_tool.mounts_under(lab.path) if is_fuse_fstype(e.fstype)}
    for path in fuse_paths:
        with contextlib.suppress(Exception):
            abort_connection(path, lab.fusectl_dir)

    # 4. loops: recorded, plus any whose backing file is in the lab's mount
    loops = {r.fields["device"]: r for r in resources if r.kind == "loop"}
    try:
        scanned = losetup.devices_backed_under(lab.mountpoint)
    except RaidlabError as exc:
        scanned = []
        report.failed.append(f"listing loop devices: {exc}")
    found = {d.device: losetup.strip_deleted(d.backing_file) for d in scanned}
    for device in sorted(set(loops) | set(found)):
        res = loops.get(device)
        fields = res.fields if res else {"device": device, "backing_file": found[device]}
        attempt(f"loop device {device}", lambda f=fields: release_loop(f), res)

    # 5. the FUSE mounts themselves (lazy: a dead server's mount cannot be stat'ed)
    for path in sorted(fuse_paths, key=lambda p: -p.count("/")):
        attempt(f"FUSE mount {path}", lambda p=path: release_fuse_mount(p))
    for res in fuse_res:
        if not mount_tool.is_mount_point(res.fields["path"]):
            lab.forget(res)

    # 6. scratch images of the dead run
    for res in [r for r in lab.resources() if r.kind == "image"]:
        if res.fields.get("keep"):
            lab.forget(res)
            continue
        attempt(res.describe(), lambda f=res.fields: _remove_file(f["path"]), res)
    if not report.failed:
        lab.end_run()
    return report


def _release_mount(fields: dict[str, Any]) -> str:
    from raidlab.tools import mount as mount_tool

    target = fields["target"]
    if not mount_tool.is_mount_point(target):
        return "not mounted"
    try:
        mount_tool.umount(target, timeout=60)
        return "unmounted"
    except RaidlabError:
        mount_tool.umount(target, lazy=True, timeout=60)
        return "unmounted (lazy)"


def _remove_file(path: str) -> str:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return "already gone"
    return "removed"


# --- the live runtime ------------------------------------------------------------------

@dataclass
class _CleanupEntry:
    label: str
    release: Callable[[], Awaitable[Any]]
    resource: Resource | None


class LabSession:
    """A lab being run by this process (see `open_lab`): a trio nursery for the lab's
    services (FUSE server, disks), a cleanup stack, and the test hooks."""

    def __init__(self, lab: Lab, nursery: trio.Nursery,
                 status: Callable[[str], None]):
        self.lab = lab
        self.nursery = nursery
        self.status = status
        self.work_scope = trio.CancelScope()
        self.signal_received: int | None = None
        self._stack: list[_CleanupEntry] = []
        self.cleanup_failures: list[str] = []
        self.fuse_export: Any = None  # the lab's FuseExport once mounted (raidlab.export)

    # cleanup stack
    def push(self, label: str, release: Callable[[], Awaitable[Any]],
             resource: Resource | None = None) -> None:
        """Register `release` to run (in reverse order) when the session ends."""
        self._stack.append(_CleanupEntry(label, release, resource))

    def push_sync(self, label: str, release: Callable[[], Any],
                  resource: Resource | None = None) -> None:
        """Like push, for a blocking release: it runs in a worker thread."""

        async def run_in_thread():
            return await trio.to_thread.run_sync(release)

        self.push(label, run_in_thread, resource)

    async def release_all(self) -> None:
        """Unwind the cleanup stack. Call with cancellation shielded."""
        while self._stack:
            entry = self._stack.pop()
            try:
                outcome = await entry.release()
            except Exception as exc:
                self.cleanup_failures.append(f"{entry.label}: {exc}")
                self.status(f"[red]could not release {entry.label}: {exc}[/red]")
                continue
            if entry.resource is not None:
                self.lab.forget(entry.resource)
            self.status(f"released {entry.label}" + (f" ({outcome})" if isinstance(outcome, str)
                                                       else ""))
        if self.lab.run_id:
            pids = await trio.to_thread.run_sync(kill_tagged_processes, self.lab.run_id)
            if pids:
                self.status(f"killed stray processes of this run: {pids}")

    # test hooks
    async def checkpoint(self, point: str) -> None:
        assert point in SET_UP_POINTS, point
        if os.environ.get(FAIL_AT_ENV) == point:
            raise LabError(f"injected failure at {point} ({FAIL_AT_ENV})", point=point)
        if os.environ.get(PAUSE_AT_ENV) == point:
            print(f"raidlab: paused at {point}", file=sys.stderr, flush=True)
            await trio.sleep_forever()

    # signals
    async def _watch_signals(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as sigs:
            task_status.started()
            async for signum in sigs:
                if self.signal_received is None:
                    self.signal_received = signum
                    self.status(f"{signal.Signals(signum).name} received: releasing the lab")
                    self.work_scope.cancel()
                else:
                    self.status("still releasing the lab, please wait")

    # child processes
    def child_env(self, extra: dict[str, str]) -> dict[str, str]:
        env = dict(os.environ)
        env.update(extra)
        env[RUN_TOKEN_ENV] = self.lab.run_id or ""
        env["RAIDLAB_LAB"] = self.lab.name
        env["RAIDLAB_LAB_DIR"] = str(self.lab.path)
        env.pop(FAIL_AT_ENV, None)
        env.pop(PAUSE_AT_ENV, None)
        return env

    async def run_command(self, argv: list[str], env: dict[str, str]) -> int:
        """Run `argv` in its own process group (given the terminal if we have it) and
        return its exit status (128+N if killed by signal N)."""
        try:
            proc = await trio.lowlevel.open_process(argv, env=self.child_env(env),
                                                    process_group=0)
        except OSError as exc:
            raise UsageError(f"cannot run {argv[0]!r}: {exc.strerror}") from exc
        res = self.lab.record("process", pid=proc.pid, pgid=proc.pid, argv=list(argv),
                              start_time=process_start_time(proc.pid))
        terminal = _TerminalHandover(proc.pid)
        terminal.give()

        async def release():
            terminal.take_back()
            return await _terminate_group(proc)

        self.push(f"command {argv[0]} (pid {proc.pid})", release, res)
        await self.checkpoint("command-started")
        rc = await proc.wait()
        terminal.take_back()
        return 128 - rc if rc < 0 else rc


async def _terminate_group(proc: trio.Process) -> str:
    """SIGTERM the child's process group, SIGKILL it after a grace period."""
    pgid = proc.pid
    if proc.returncode is None:
        _signal_group_or_pid(proc.pid, pgid, signal.SIGTERM)
        with trio.move_on_after(TERMINATE_GRACE_SECONDS):
            await proc.wait()
        outcome = "terminated" if proc.returncode is not None else "killed"
    else:
        outcome = f"exited {proc.returncode}"
    # The leader may be gone while members of its group live on (`sh -c 'x &'`).
    _signal_group_or_pid(proc.pid, pgid, signal.SIGKILL)
    await proc.wait()
    return outcome


class _TerminalHandover:
    """Give the controlling terminal's foreground to a child group (like a shell's job
    control), so an interactive COMMAND (a shell) can read it and Ctrl-C reaches it."""

    def __init__(self, pgid: int):
        self.pgid = pgid
        self.given = False

    def give(self) -> None:
        try:
            if not os.isatty(0) or os.tcgetpgrp(0) != os.getpgrp():
                return
            with _ignoring_sigttou():
                os.tcsetpgrp(0, self.pgid)
            self.given = True
            _signal_group_or_pid(self.pgid, self.pgid, signal.SIGCONT)
        except OSError:
            self.given = False

    def take_back(self) -> None:
        if not self.given:
            return
        self.given = False
        with contextlib.suppress(OSError), _ignoring_sigttou():
            os.tcsetpgrp(0, os.getpgrp())


@contextlib.contextmanager
def _ignoring_sigttou() -> Iterator[None]:
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTTOU, old)


def _default_status(message: str) -> None:
    print(re.sub(r"\[/?[a-z ]+\]", "", message), file=sys.stderr, flush=True)


@contextlib.asynccontextmanager
async def open_lab(name: str, *, home: str | os.PathLike | None = None,
                   status: Callable[[str], None] | None = None,
                   handle_signals: bool = True) -> AsyncIterator[LabSession]:
    """Run a lab in this trio run: lock it, release leftovers of a killed run, yield a
    LabSession, and release everything pushed on its cleanup stack when the block ends --
    normally, by an exception, or by SIGINT/SIGTERM/SIGHUP (then LabInterrupted is raised
    after the release)."""
    status = status or _default_status
    lab = Lab(name, home=home, create=True)
    with lab.owned():
        if lab.resources():
            report = await trio.to_thread.run_sync(cleanup_stale, lab)
            for line in report.released:
                status(f"released leftover of a killed run: {line}")
            if report.failed:
                raise LabError(f"lab {name!r} has leftovers that could not be released: "
                               + "; ".join(report.failed),
                               hint=f"see `raidlab lab cleanup {name}`")
        lab.begin_run()
        body_error: Exception | None = None
        async with trio.open_nursery() as nursery:
            session = LabSession(lab, nursery, status)
            if handle_signals:
                await nursery.start(session._watch_signals)
            try:
                with session.work_scope:
                    yield session
            except Exception as exc:
                # Re-raised after the nursery, so the caller sees it as is and not wrapped
                # in an ExceptionGroup (trio nurseries are strict).
                body_error = exc
            finally:
                with trio.CancelScope(shield=True):
                    await session.release_all()
                nursery.cancel_scope.cancel()
        if body_error is not None:
            raise body_error
        if session.cleanup_failures:
            raise LabError(f"lab {name!r} was not fully released: "
                           + "; ".join(session.cleanup_failures),
                           hint=f"run `raidlab lab cleanup {name}`")
        lab.end_run()
    if session.signal_received is not None:
        raise LabInterrupted(session.signal_received)


def list_labs(home: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """Every lab directory with its status: running (locked), stale (resources left by a
    killed run) or idle."""
    base = labs_dir(home)
    out = []
    if not base.is_dir():
        return out
    for entry in sorted(base.iterdir()):
        if not entry.is_dir() or not _NAME_RE.match(entry.name):
            continue
        lab = Lab(entry.name, home=home)
        state = lab.read_state()
        resources = lab.resources()
        if lab.in_use():
            status = "running"
        elif resources:
            status = "stale"
        else:
            status = "idle"
        out.append({"name": lab.name, "path": str(lab.path), "status": status,
                    "pid": state.get("owner", {}).get("pid") if status == "running" else None,
                    "resources": [r.describe() for r in resources]})
    return out


def cleanup_lab(name: str, *, home: str | os.PathLike | None = None) -> StaleReport:
    """`raidlab lab cleanup NAME`: release a killed run's leftovers (refused while running)."""
    lab = Lab(name, home=home)
    with lab.owned():
        return cleanup_stale(lab)

