"""Serve a lab's disks from a background thread, for synchronous callers.

Why: tests, notebooks and scripts want to run blocking tools (mkfs, mount, fio) against
the loop devices while this same process serves their FUSE files. The trio run that serves
them lives in its own thread (without signal handling -- only the main thread may install
handlers), and the caller's thread is free to block. The lab's guarantees are unchanged:
leaving the `with` block (normally or by an exception) releases everything, and the lab
state file covers a crash.

    with serve_in_background(ServeRequest(disks=1, model="none", size=64 << 20)) as lab:
        mkfs_ext4(lab.disks[0].device)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import trio

from raidlab.export.serve import ServedDisk, ServeRequest, serve_disks
from raidlab.lab import open_lab


@dataclass
class BackgroundLab:
    disks: list[ServedDisk] = field(default_factory=list)
    session: Any = None
    status_lines: list[str] = field(default_factory=list)
    value: Any = None
    _token: Any = None

    def run(self, async_fn, *args):
        """Run `async_fn(*args)` in the lab's trio thread and return its result."""
        return trio.from_thread.run(async_fn, *args, trio_token=self._token)

    def call(self, fn, *args):
        """Run a plain function in the lab's trio thread (e.g. read statistics)."""
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    def fuse_statistics(self) -> dict[str, Any]:
        return self.call(lambda: self.session.fuse_export.fs.statistics())


@contextlib.contextmanager
def _in_background(name: str, run_lab, startup_timeout: float) -> Iterator[BackgroundLab]:
    """Run `run_lab(lab, ready)` (an async function that builds a lab, calls ready() and
    waits) in a thread; stop it by cancelling the lab's work scope when the block ends."""
    lab = BackgroundLab()
    ready = threading.Event()
    outcome: dict[str, Any] = {}

    def mark_ready():
        lab._token = trio.lowlevel.current_trio_token()
        ready.set()

    def thread_main():
        try:
            outcome["result"] = trio.run(run_lab, lab, mark_ready)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc
        finally:
            ready.set()

    thread = threading.Thread(target=thread_main, name=f"raidlab-lab-{name}", daemon=True)
    thread.start()
    ready.wait(startup_timeout)
    if "error" in outcome:
        thread.join()
        raise outcome["error"]
    if lab._token is None:
        raise TimeoutError(f"lab {name} did not come up within {startup_timeout} s")
    try:
        yield lab
    finally:
        with contextlib.suppress(trio.RunFinishedError):
            lab.call(lab.session.work_scope.cancel)
        thread.join()
        if "error" in outcome:
            raise outcome["error"]


@contextlib.contextmanager
def serve_in_background(req: ServeRequest, *, startup_timeout: float = 60.0
                        ) -> Iterator[BackgroundLab]:
    """`raidlab disk serve` without a command, in a thread: lab.disks are its loop devices."""

    async def run_lab(lab: BackgroundLab, ready):
        def on_ready(disks, session):
            lab.disks = disks
            lab.session = session
            ready()

        return await serve_disks(req, status=lab.status_lines.append, on_ready=on_ready,
                                 handle_signals=False)

    with _in_background(req.name, run_lab, startup_timeout) as lab:
        yield lab


@contextlib.contextmanager
def lab_in_background(name: str, setup, *, home: str | None = None,
                      startup_timeout: float = 60.0) -> Iterator[BackgroundLab]:
    """Open lab `name`, run `await setup(session)` (which builds whatever it likes with
    raidlab.export.mount_export / attach_loop and returns a value, kept in lab.value), then
    serve until the block ends."""

    async def run_lab(lab: BackgroundLab, ready):
        async with open_lab(name, home=home, status=lab.status_lines.append,
                            handle_signals=False) as session:
            lab.session = session
            lab.value = await setup(session)
            ready()
            await trio.sleep_forever()

    with _in_background(name, run_lab, startup_timeout) as lab:
        yield lab
