"""Start, stop and talk to array daemons (raidlab.service.daemon) from the CLI.

Blocking code on purpose: the CLI is a short-lived client; the daemon is the trio program.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from raidlab.errors import LabError, RaidlabError
from raidlab.lab import Lab, cleanup_stale, labs_dir, same_process
from raidlab.service.spec import RUNTIME_FILE, SPEC_FILE, ArraySpec, peer_credentials, socket_address
from raidlab.signals import deferred_signals
from raidlab.tools.mount import mounts_under

START_TIMEOUT = 600.0  # seconds: the SA-RAID probe on a slow drive model takes a while
# A stopping daemon bounds each of its own cleanup steps (md's `mdadm --stop` is given 120 s,
# the lab VM's poweroff 30 s before it is killed, then loop devices and mounts), so whoever
# waits for it waits longer than their sum: a destroy that gave up first would leave the
# daemon finishing on its own after the command had reported a failure.
STOP_TIMEOUT = 300.0


class DaemonError(RaidlabError):
    """The array daemon refused or failed an operation (its message is the reason)."""


def start_daemon(lab: Lab, mode: str, *, home: str | None,
                 on_status: Callable[[str], None] = lambda s: None,
                 env: dict[str, str] | None = None,
                 module: str = "raidlab.service.daemon", what: str = "array") -> dict[str, Any]:
    """Spawn the daemon for `lab` in `mode` (create | assemble); return its ready record.

    `module` is the daemon's program (`python -m module LAB_DIR MODE --ready-fd N [--home H]`,
    speaking the protocol of raidlab.service.daemon's start): an array's by default, or a
    cluster's (raidlab.cluster.daemon, mode up); `what` names it in errors.

    The lab's lock is taken here and handed to the daemon (`--lock-fd`, Lab.adopt_lock), so
    from this call on no other command finds the lab free: a `destroy` while the daemon
    starts waits for it (stop_daemon), and this command killed at any moment leaves the lock
    with the daemon, which then stops by itself (raidlab.service.daemonbase). On Ctrl-C (or
    SIGTERM, raised as Ctrl-C by the CLI) while waiting, the daemon is stopped (it releases
    everything) and KeyboardInterrupt propagates."""
    if not lab.try_lock():
        raise LabError(f"lab {lab.name!r} is in use", hint="stop what runs in it first")
    try:
        return _start_locked(lab, mode, home=home, on_status=on_status, env=env, module=module, what=what)
    finally:
        lab.unlock()  # the daemon keeps the lock (same open file) while it runs


def _start_locked(lab: Lab, mode: str, *, home: str | None, on_status: Callable[[str], None],
                  env: dict[str, str] | None, module: str, what: str) -> dict[str, Any]:
    read_fd, write_fd = os.pipe()
    pipe = os.fdopen(read_fd, "r")
    lock_fd = lab.lock_fd
    log = os.fdopen(os.open(lab.path / "daemon.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                            | os.O_CLOEXEC, 0o600), "ab")
    argv = [sys.executable, "-m", module, str(lab.path), mode, "--ready-fd", str(write_fd),
            "--lock-fd", str(lock_fd)]
    if home:
        argv += ["--home", home]
    proc: subprocess.Popen | None = None
    ready: dict[str, Any] | None = None
    error: str | None = None
    try:
        try:
            # The daemon exists before Popen returns: a Ctrl-C or SIGTERM in that window is
            # held until `proc` is known, so the handler below can stop the daemon.
            with deferred_signals() if threading.current_thread() is threading.main_thread() \
                    else contextlib.nullcontext():
                proc = subprocess.Popen(argv, pass_fds=(write_fd, lock_fd), stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=log, start_new_session=True,
                                        env={**os.environ, **env} if env else None)
        finally:
            os.close(write_fd)
            log.close()
        for line in pipe:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "status" in message:
                on_status(message["status"])
            elif "ready" in message:
                ready = message["ready"]
                break
            elif "error" in message:
                error = message["error"]
    except KeyboardInterrupt:
        if proc is not None:
            _terminate(proc)
        raise
    finally:
        pipe.close()
    if ready is not None:
        return ready
    proc.wait(timeout=STOP_TIMEOUT)
    if error:
        raise DaemonError(error)
    tail = _log_tail(lab.path / "daemon.log")
    raise LabError(f"the {what} daemon exited (status {proc.returncode}) before it was ready",
                   hint=f"see {lab.path / 'daemon.log'}" + (f": {tail}" if tail else ""))


def _terminate(proc: subprocess.Popen) -> None:
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STOP_TIMEOUT)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        proc.kill()


def _log_tail(path: Path) -> str:
    try:
        lines = [l for l in path.read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        return ""
    return lines[-1][-300:] if lines else ""


def request(lab: Lab, op: str, *, on_progress: Callable[[int, int], None] | None = None,
            timeout: float | None = None, fds: Sequence[int] = (), **fields: Any) -> Any:
    """Send one request to the lab's daemon; return its result or raise DaemonError. `fds`
    are open descriptors passed with the request (raidlab.service.daemonbase: how files
    travel); they stay open here.

    The daemon is checked before anything is sent: the process at the other end of the
    socket must be the one the lab records as its running daemon, and run as the lab's
    owner. Anything else (a daemon that is gone and a stranger in its place) is refused."""
    sock = _connect(lab)
    sock.settimeout(timeout)
    with sock:
        data = (json.dumps({"op": op, **fields}) + "\n").encode()
        sent = socket.send_fds(sock, [data], list(fds)) if fds else 0
        if sent < len(data):  # (an empty send after the daemon answered and closed is EPIPE)
            sock.sendall(data[sent:])
        for message in _lines(sock):
            if "progress" in message:
                if on_progress:
                    on_progress(*message["progress"])
                continue
            if message.get("ok"):
                return message.get("result")
            raise DaemonError(message.get("error", "unknown error"))
    raise LabError(f"array {lab.name!r}: the daemon closed the connection without an answer",
                   hint=f"see {lab.path / 'daemon.log'}")


def _connect(lab: Lab) -> socket.socket:
    """A connection to the lab's daemon, checked (request's doc)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        with socket_address(lab.path) as address:
            sock.connect(address)
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        hint = f"start it with `raidlab assemble {lab.name}`"
        tail = _log_tail(lab.path / "daemon.log")
        if '"error"' in tail:  # its daemon stopped on an error: say which
            hint += f"; its daemon stopped with {tail} (see {lab.path / 'daemon.log'})"
        raise LabError(f"array {lab.name!r} is not running", hint=hint) from None
    except OSError as exc:
        sock.close()
        raise LabError(f"array {lab.name!r}: cannot reach its daemon: {exc.strerror or exc}",
                       hint="only the lab's owner and root may command it") from None
    pid, uid, _gid = peer_credentials(sock)
    owner = os.stat(lab.path).st_uid
    if uid != owner or pid != daemon_pid(lab):
        sock.close()
        raise LabError(f"array {lab.name!r}: the process at its control socket (pid {pid}, uid {uid}) "
                       f"is not the lab's daemon", hint=f"see `raidlab lab list`; {lab.path / 'daemon.log'}")
    return sock


def _lines(sock: socket.socket) -> Iterator[dict]:
    buf = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)


def daemon_pid(lab: Lab) -> int | None:
    """The pid of the process running the lab, if one runs and has recorded itself."""
    owner = lab.read_state().get("owner", {})
    pid = owner.get("pid")
    if not isinstance(pid, int) or not same_process(pid, owner.get("start_time")):
        return None
    return pid if lab.in_use() else None


def _wait_for_owner(lab: Lab, timeout: float) -> int | None:
    """The running daemon's pid, or None if the lab is free. A lab that is locked by no
    recorded process is a daemon still starting (its starter handed it the lock; it records
    itself once it has taken over): wait for it, up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if not lab.in_use():
            return None
        pid = daemon_pid(lab)
        if pid is not None:
            return pid
        if time.monotonic() > deadline:
            raise LabError(f"lab {lab.name!r} is in use, but by no process its state names",
                           hint="wait for the command that uses it to end, or see `raidlab lab list`")
        time.sleep(0.05)


def stop_daemon(lab: Lab, *, timeout: float = STOP_TIMEOUT) -> bool:
    """SIGTERM the running daemon and wait until it released the lab. False if none ran."""
    return _signal_daemon(lab, signal.SIGTERM, timeout, "did not stop within {timeout:.0f} s")


def kill_daemon(lab: Lab, *, timeout: float = STOP_TIMEOUT) -> bool:
    """SIGKILL the running daemon, as a crash would, and wait until it is gone and the lab
    unlocked (its leftovers stay: `release_leftovers`). False if none ran."""
    return _signal_daemon(lab, signal.SIGKILL, timeout, "was still there {timeout:.0f} s after SIGKILL")


def _signal_daemon(lab: Lab, sig: int, timeout: float, late: str) -> bool:
    pid = _wait_for_owner(lab, timeout)
    if pid is None:
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    # The daemon releases the lab (its lock) as its last cleanup step, then exits: wait for
    # both, so nothing of the lab is still running when the caller goes on.
    while lab.in_use() or _alive(pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # a daemon this process started: reap it
        if time.monotonic() > deadline:
            raise LabError(f"array {lab.name!r} (pid {pid}) " + late.format(timeout=timeout),
                           hint=f"see {lab.path / 'daemon.log'}")
        time.sleep(0.02)
    return True


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def release_leftovers(lab: Lab) -> list[str]:
    """What a killed daemon left (loop device, FUSE mount): release it."""
    if lab.in_use() or not lab.resources():
        return []
    with lab.owned():
        report = cleanup_stale(lab)
    if report.failed:
        raise LabError(f"lab {lab.name!r}: could not release " + "; ".join(report.failed),
                       hint=f"see `raidlab lab cleanup {lab.name}`")
    return list(report.released)


def remove_lab(lab: Lab, *, keep_images: bool) -> None:
    """Delete what `raidlab create` made (the lab must be stopped and released): the whole
    lab directory, or with keep_images only the runtime record, so `assemble` can follow."""
    if keep_images:
        (lab.path / RUNTIME_FILE).unlink(missing_ok=True)
        return
    still = mounts_under(lab.path)
    if still:  # never delete through a mount point
        raise LabError(f"lab {lab.name!r} still has mounts: {', '.join(m.mount_point for m in still)}",
                       hint=f"run `raidlab lab cleanup {lab.name}`")
    shutil.rmtree(lab.path, ignore_errors=True)


def list_arrays(home: str | None) -> list[dict[str, Any]]:
    base = labs_dir(home or None)
    out = []
    if not base.is_dir():
        return out
    for entry in sorted(base.iterdir()):
        if not (entry / SPEC_FILE).exists():
            continue
        lab = Lab(entry.name, home=home)
        spec = ArraySpec.load(entry)
        running = lab.in_use()
        runtime = {}
        if running:
            try:
                runtime = json.loads((entry / RUNTIME_FILE).read_text())
            except (OSError, ValueError):
                runtime = {}
        out.append({
            "name": spec.name, "arch": spec.arch, "disks": spec.disks, "disk_model": spec.disk_model,
            "disk_size": spec.disk_size, "chunk": spec.chunk,
            "status": "running" if running else ("stale" if lab.resources() else "stopped"),
            "device": runtime.get("device"), "guest_device": runtime.get("guest_device"),
            "runner": spec.runner, "pid": runtime.get("pid"), "cluster": spec.cluster, "node": spec.node,
        })
    return out
