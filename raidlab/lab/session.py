"""A lab run by this process: its session, cleanup stack, signal handling and test hooks.

Why it is built this way:

* A live run releases in reverse order of creation from a cleanup stack, inside trio and
  shielded from cancellation, so it runs on success, on an exception, and on SIGINT, SIGTERM
  and SIGHUP (received with trio.open_signal_receiver, which turns them into a cancellation
  of the lab's work instead of an exception at an arbitrary point). The FUSE server keeps
  serving during the release: detaching a loop device flushes through it.
* A lab whose lock is free but whose state file still lists resources was left by a killed
  run; `open_lab` releases it first (raidlab.lab.cleanup.cleanup_stale).
* Test hooks (documented, read from the environment): RAIDLAB_FAIL_AT=<point> raises a
  LabError at that set-up point; RAIDLAB_PAUSE_AT=<point> prints "raidlab: paused at
  <point>" on stderr and waits there (until a signal), so a test can interrupt at an exact
  point. Points: images-created, fuse-mounted, loop-attached, loops-attached,
  command-started.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import trio

from raidlab.errors import LabError, LabInterrupted, UsageError
from raidlab.lab.cleanup import cleanup_stale, kill_tagged_processes
from raidlab.lab.proc import process_start_time, signal_group_or_pid
from raidlab.lab.state import LAB_DIR_ENV, RUN_TOKEN_ENV, TERMINATE_GRACE_SECONDS, Lab, Resource

FAIL_AT_ENV = "RAIDLAB_FAIL_AT"
PAUSE_AT_ENV = "RAIDLAB_PAUSE_AT"
SET_UP_POINTS = ("images-created", "fuse-mounted", "loop-attached", "loops-attached",
                 "command-started")


@dataclass(eq=False)  # an entry is itself: release_now finds it by identity
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
             resource: Resource | None = None) -> _CleanupEntry:
        """Register `release` to run (in reverse order) when the session ends; the entry
        returned can be released earlier with `release_now`."""
        entry = _CleanupEntry(label, release, resource)
        self._stack.append(entry)
        return entry

    def push_sync(self, label: str, release: Callable[[], Any],
                  resource: Resource | None = None) -> _CleanupEntry:
        """Like push, for a blocking release: it runs in a worker thread."""

        async def run_in_thread():
            return await trio.to_thread.run_sync(release)

        return self.push(label, run_in_thread, resource)

    async def release_now(self, entry: _CleanupEntry) -> Any:
        """Release one entry of the cleanup stack before the session ends (an object that a
        replacement made useless), shielded from cancellation; the entry leaves the stack and
        its resource the state file. Releasing an entry that has gone already does nothing."""
        if entry not in self._stack:
            return None
        self._stack.remove(entry)
        with trio.CancelScope(shield=True):
            outcome = await entry.release()
        if entry.resource is not None:
            self.lab.forget(entry.resource)
        self.status(f"released {entry.label}" + (f" ({outcome})" if isinstance(outcome, str) else ""))
        return outcome

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
        env[LAB_DIR_ENV] = str(self.lab.path)
        env.pop(FAIL_AT_ENV, None)
        env.pop(PAUSE_AT_ENV, None)
        return env

    async def start_server(self, argv: list[str], *, label: str,
                           env: dict[str, str] | None = None) -> "ServerProcess":
        """Start a child that serves the lab for as long as it runs (a cluster node's nbdkit,
        an array's NBD client): in its own process group, with the run's token in its
        environment, stdin closed and its output in ours. It is recorded as a process
        resource and terminated (SIGTERM, then SIGKILL after a grace period) when the session
        ends, in reverse order.

        The child is forked from this thread, the trio thread, which lives as long as the
        process. A parent-death signal (prctl PR_SET_PDEATHSIG) follows the thread that
        forked the child, and trio.lowlevel.open_process forks from a worker thread that
        ends after ten idle seconds: nbdkit arms that signal (SIGTERM) at start, and was
        gone ten seconds after the cluster came up. Forked here, the signal comes when this
        process dies, however it dies, which is what nbdkit's --exit-with-parent means."""
        try:
            popen = subprocess.Popen(argv, env=self.child_env(env or {}), process_group=0,
                                     stdin=subprocess.DEVNULL)
        except OSError as exc:
            raise UsageError(f"cannot run {argv[0]!r}: {exc.strerror}") from exc
        proc = ServerProcess(popen)
        res = self.lab.record("process", pid=proc.pid, pgid=proc.pid, argv=list(argv),
                              start_time=process_start_time(proc.pid))
        proc.cleanup = self.push(f"{label} (pid {proc.pid})", lambda: _terminate_group(proc), res)
        return proc

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


class ServerProcess:
    """A child started by `LabSession.start_server`: its pid, its exit status once known
    (`poll`, `returncode`), an awaitable `wait` (a pidfd that becomes readable when the
    child exits, so no thread waits for it), and `cleanup`, its entry on the session's
    cleanup stack (for `LabSession.release_now`)."""

    def __init__(self, popen: subprocess.Popen):
        self._popen = popen
        self.pid = popen.pid
        self.cleanup: _CleanupEntry | None = None

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def poll(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        if self._popen.poll() is None:
            try:
                pidfd = os.pidfd_open(self.pid)
            except ProcessLookupError:  # already reaped by a poll() in between
                return self._popen.wait()
            try:
                await trio.lowlevel.wait_readable(pidfd)
            finally:
                os.close(pidfd)
        return self._popen.wait()


async def _terminate_group(proc: trio.Process | ServerProcess) -> str:
    """SIGTERM the child's process group, SIGKILL it after a grace period."""
    pgid = proc.pid
    if proc.returncode is None:
        signal_group_or_pid(proc.pid, pgid, signal.SIGTERM)
        with trio.move_on_after(TERMINATE_GRACE_SECONDS):
            await proc.wait()
        outcome = "terminated" if proc.returncode is not None else "killed"
    else:
        outcome = f"exited {proc.returncode}"
    # The leader may be gone while members of its group live on (`sh -c 'x &'`).
    signal_group_or_pid(proc.pid, pgid, signal.SIGKILL)
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
            signal_group_or_pid(self.pgid, self.pgid, signal.SIGCONT)
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
                   handle_signals: bool = True, lock_fd: int | None = None) -> AsyncIterator[LabSession]:
    """Run a lab in this trio run: lock it (or take the lock its starter hands over as
    `lock_fd`, Lab.adopt_lock), release leftovers of a killed run, yield a LabSession, and
    release everything pushed on its cleanup stack when the block ends -- normally, by an
    exception, or by SIGINT/SIGTERM/SIGHUP (then LabInterrupted is raised after the
    release)."""
    status = status or _default_status
    lab = Lab(name, home=home, create=lock_fd is None)
    with lab.owned(lock_fd=lock_fd):
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
