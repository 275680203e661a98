"""What every raidlab daemon shares: how it talks to the CLI that started it and to the
CLI commands that reach it later, and how its process ends.

An array (raidlab.service.daemon) and a cluster (raidlab.cluster.daemon) are each one
process holding a lab. Both speak one protocol (raidlab.service.control is the client):

* at start, over an inherited pipe (`--ready-fd`): JSON lines {"status": ...} while it
  builds, then {"ready": {...}} or {"error": ...}. The starter holds the lab's lock and
  hands it over (`--lock-fd`, Lab.adopt_lock), so the lab is never free while the daemon
  starts. A daemon whose starter is gone by the time it is ready (the pipe is broken: the
  command was killed) stops and releases everything instead of serving a lab nobody was
  told of;
* afterwards, over the lab's Unix socket in the abstract namespace: one JSON request per
  connection ({"op": NAME, ...}), answered by JSON lines ({"progress": [done, total]} for
  long operations, then {"ok": true, "result": ...} or {"ok": false, "error": ...}), by the
  daemon's `op_NAME(request, send)`.

A subclass gives `run()` (open the lab, build, call `tell(ready=...)`, serve until
stopped), its ops, and where it differs `handler_for` and `unsupported`; `run_daemon` runs
it and turns its end into the exit status the CLI reads (0 stopped, 2 a one-line error
already told, 1 a bug, with its traceback in the daemon's log).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import traceback
from typing import Any

import trio

from raidlab.errors import LabError, LabInterrupted, RaidlabError, leaf_exceptions
from raidlab.service.spec import control_address


class ControlledDaemon:
    """The pipe to the starting CLI and the control socket (module doc)."""

    prog = "raidlab-daemon"  # the prefix of its lines in the daemon's log

    def __init__(self, home: str | None, ready_fd: int | None, lock_fd: int | None = None) -> None:
        self.home = home
        self.ready = os.fdopen(ready_fd, "w", buffering=1) if ready_fd is not None else None
        self.lock_fd = lock_fd
        self.starter_gone = False  # a write to the starter's pipe failed
        self.session: Any = None

    async def run(self) -> None:
        raise NotImplementedError

    # -- talking to the CLI that started us ------------------------------------------

    def tell(self, **message: Any) -> None:
        line = json.dumps(message)
        print(f"{self.prog}: {line}", file=sys.stderr, flush=True)
        if self.ready is not None:
            try:
                self.ready.write(line + "\n")
            except OSError:
                self.ready = None
                self.starter_gone = True

    def status(self, message: str) -> None:
        self.tell(status=message)

    def report_ready(self, ready: dict[str, Any]) -> None:
        """Tell the starter the daemon is ready and close the pipe; LabError (which ends the
        daemon, releasing everything) if the starter is gone."""
        self.tell(ready=ready)
        if self.starter_gone:
            raise LabError("the raidlab command that started this daemon is gone (killed before "
                           "it was ready): stopping")
        self.close_ready()

    def close_ready(self) -> None:
        if self.ready is not None:
            try:
                self.ready.close()
            except OSError:
                pass
            self.ready = None

    # -- the control socket --------------------------------------------------------------

    async def serve_control(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        await sock.bind(control_address(self.session.lab.path))
        sock.listen(16)
        task_status.started()
        await trio.serve_listeners(self.handle, [trio.SocketListener(sock)])

    def handler_for(self, op: Any):
        """The op_NAME method that answers `op`, or None."""
        if not isinstance(op, str) or not op.isidentifier():
            return None
        return getattr(self, f"op_{op}", None)

    def unsupported(self, op: Any) -> str:
        return f"operation {op!r} is not supported here"

    async def handle(self, stream: trio.SocketStream) -> None:
        async def send(obj: dict) -> None:
            await stream.send_all((json.dumps(obj) + "\n").encode())

        try:
            raw = b""
            while not raw.endswith(b"\n"):
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                raw += chunk
            request = json.loads(raw)
            op = request.get("op")
            handler = self.handler_for(op)
            if handler is None:
                await send({"ok": False, "error": self.unsupported(op)})
                return
            result = await handler(request, send)
            await send({"ok": True, "result": result})
        except RaidlabError as exc:
            await _quiet(send, {"ok": False, "error": str(exc)})
        except OSError as exc:
            await _quiet(send, {"ok": False, "error": exc.strerror or str(exc)})
        except Exception as exc:  # a bug: keep serving, tell the client, log the traceback
            traceback.print_exc()
            await _quiet(send, {"ok": False, "error": f"internal error: {exc!r}"})
        finally:
            await stream.aclose()

    async def op_stop(self, request, send) -> dict:
        self.session.work_scope.cancel()
        return {"stopping": True}


async def _quiet(send, obj) -> None:
    try:
        await send(obj)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass


def add_start_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every daemon's command line has (control.start_daemon passes them)."""
    parser.add_argument("--ready-fd", type=int, help="the pipe to the starter (module doc)")
    parser.add_argument("--lock-fd", type=int, help="the lab's lock, held by the starter (module doc)")
    parser.add_argument("--home")


def run_daemon(daemon: ControlledDaemon) -> int:
    """Run `daemon` to its end; the exit status (module doc). A one-line error goes to the
    starting CLI (if it still listens) and to the log."""
    try:
        trio.run(daemon.run)
    except LabInterrupted:
        return 0  # asked to stop: everything released
    except BaseExceptionGroup as group:
        leaves = leaf_exceptions(group)
        error = next((e for e in leaves if isinstance(e, RaidlabError)), None)
        if error is None:
            traceback.print_exception(group)
            daemon.tell(error=f"internal error: {leaves[0]!r}")
            return 1
        daemon.tell(error=str(error))
        return 2
    except RaidlabError as exc:
        daemon.tell(error=str(exc))
        return 2
    except Exception as exc:
        traceback.print_exc()
        daemon.tell(error=f"internal error: {exc!r}")
        return 1
    return 0
