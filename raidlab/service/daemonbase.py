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
* afterwards, over the lab's control socket (`control.sock` in the lab directory): one JSON
  request per connection ({"op": NAME, ...}), answered by JSON lines ({"progress": [done,
  total]} for long operations, then {"ok": true, "result": ...} or {"ok": false, "error":
  ...}), by the daemon's `op_NAME(request, send)`.

The control socket commands an array that runs as root on a machine others share, so:

* only the lab's owner and root reach it: the lab directory is 0700 and the socket 0600, and
  every connection's credentials (SO_PEERCRED) are checked before a byte is read; any other
  uid is hung up on. The client checks the other side too: it talks only to the pid the lab
  records as its daemon, running as the lab's owner (raidlab.service.control);
* no request names a host path the daemon opens. Files travel as descriptors the client
  opened itself, with its own permissions, passed with the request (SCM_RIGHTS): a capture's
  trace file, the source of `put`, the destination of `get`, a command's stdin, stdout and
  stderr (`Request.files`). The daemon closes them when the request ends;
* a request is one line of at most MAX_REQUEST_BYTES, sent whole within REQUEST_TIMEOUT
  seconds, with at most MAX_FDS descriptors; at most MAX_CONNECTIONS requests are served at
  once, the next is answered "busy". A stalled or endless sender costs one slot for ten
  seconds, not the daemon.

A subclass gives `run()` (open the lab, build, call `tell(ready=...)`, serve until
stopped), its ops, and where it differs `handler_for` and `unsupported`; `run_daemon` runs
it and turns its end into the exit status the CLI reads (0 stopped, 2 a one-line error
already told, 1 a bug, with its traceback in the daemon's log).
"""

from __future__ import annotations

import argparse
import array
import json
import os
import socket
import sys
import traceback
from typing import Any

import trio

from raidlab.errors import LabError, LabInterrupted, RaidlabError, UsageError, leaf_exceptions
from raidlab.service.spec import control_socket, peer_credentials, socket_address

# The control socket's limits (module doc): a request line's size, the time its sender has to
# send it whole, the requests served at once, and the descriptors one request may carry.
MAX_REQUEST_BYTES = 1 << 20
REQUEST_TIMEOUT = 10.0
MAX_CONNECTIONS = 32
MAX_FDS = 4
_INT = array.array("i")


class ControlledDaemon:
    """The pipe to the starting CLI and the control socket (module doc)."""

    prog = "raidlab-daemon"  # the prefix of its lines in the daemon's log

    def __init__(self, home: str | None, ready_fd: int | None, lock_fd: int | None = None) -> None:
        self.home = home
        self.ready = os.fdopen(ready_fd, "w", buffering=1) if ready_fd is not None else None
        self.lock_fd = lock_fd
        self.starter_gone = False  # a write to the starter's pipe failed
        self.session: Any = None
        self.connections = trio.Semaphore(MAX_CONNECTIONS)  # requests in progress (module doc)

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
        """Listen on the lab's control socket (module doc) until cancelled; the socket file
        is removed when it stops."""
        lab_path = self.session.lab.path
        path = control_socket(lab_path)
        path.unlink(missing_ok=True)  # left by a killed daemon; the lab's lock is ours
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with socket_address(lab_path) as address:
                await sock.bind(address)
            os.chmod(path, 0o600)
            sock.listen(16)
            task_status.started()
            await trio.serve_listeners(self.handle, [trio.SocketListener(sock)])
        finally:
            sock.close()
            path.unlink(missing_ok=True)

    def allowed_peer(self, uid: int) -> bool:
        """Whether a process of `uid` may command this daemon: the lab's owner (the uid the
        daemon runs as) and root."""
        return uid in (0, os.geteuid())

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

        fds: list[int] = []
        try:
            # Who is there is checked before a byte is read: a peer that is neither the lab's
            # owner nor root is hung up on without an answer.
            _pid, uid, _gid = peer_credentials(stream.socket)
            if not self.allowed_peer(uid):
                print(f"{self.prog}: refused a connection from uid {uid}", file=sys.stderr, flush=True)
                return
            try:
                self.connections.acquire_nowait()
            except trio.WouldBlock:
                await _quiet(send, {"ok": False, "error": f"busy: {MAX_CONNECTIONS} requests are in progress"})
                return
            try:
                raw = await _read_request(stream, fds)
                if raw is None:
                    return
                try:
                    fields = json.loads(raw)
                except ValueError as exc:
                    raise RequestError(f"bad request: {exc}") from None
                if not isinstance(fields, dict):
                    raise RequestError("bad request: a request is a JSON object")
                request = Request(fields, fds)
                op = request.get("op")
                handler = self.handler_for(op)
                if handler is None:
                    await send({"ok": False, "error": self.unsupported(op)})
                    return
                result = await handler(request, send)
                await send({"ok": True, "result": result})
            finally:
                self.connections.release()
        except RequestError as exc:
            await _quiet(send, {"ok": False, "error": str(exc)})
        except RaidlabError as exc:
            await _quiet(send, {"ok": False, "error": str(exc)})
        except OSError as exc:
            await _quiet(send, {"ok": False, "error": exc.strerror or str(exc)})
        except Exception as exc:  # a bug: keep serving, tell the client, log the traceback
            traceback.print_exc()
            await _quiet(send, {"ok": False, "error": f"internal error: {exc!r}"})
        finally:
            for fd in fds:
                os.close(fd)
            await stream.aclose()

    async def op_stop(self, request, send) -> dict:
        self.session.work_scope.cancel()
        return {"stopping": True}


class RequestError(RaidlabError):
    """A request refused before any op sees it: too large, too slow, carrying more
    descriptors than a request may, or not a JSON object."""


async def _read_request(stream: trio.SocketStream, fds: list[int]) -> bytes | None:
    """One request line of at most MAX_REQUEST_BYTES, read within REQUEST_TIMEOUT seconds;
    the descriptors that came with it (SCM_RIGHTS) are appended to `fds` (the caller closes
    them). None if the peer hung up before a whole line."""
    raw = b""
    with trio.move_on_after(REQUEST_TIMEOUT) as scope:
        while not raw.endswith(b"\n"):
            data, ancillary, flags, _addr = await stream.socket.recvmsg(
                65536, socket.CMSG_SPACE(MAX_FDS * _INT.itemsize))
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    usable = len(payload) - len(payload) % _INT.itemsize
                    fds.extend(array.array("i", payload[:usable]))
            if flags & socket.MSG_CTRUNC or len(fds) > MAX_FDS:
                raise RequestError(f"a request carries at most {MAX_FDS} descriptors")
            if not data:
                return None
            raw += data
            if len(raw) > MAX_REQUEST_BYTES:
                raise RequestError(f"a request is at most {MAX_REQUEST_BYTES} bytes")
    if scope.cancelled_caught:
        raise RequestError(f"no whole request within {REQUEST_TIMEOUT:g} s")
    return raw


class Request(dict):
    """A request as an op receives it: its JSON fields, and the descriptors that came with it
    (`fds`, module doc), which the daemon closes when the request ends (dup one to keep it)."""

    def __init__(self, fields: dict, fds: list[int]) -> None:
        super().__init__(fields)
        self.fds = fds

    def files(self, count: int, what: str) -> list[int]:
        """The request's descriptors, which op `what` needs exactly `count` of."""
        if len(self.fds) != count:
            raise UsageError(f"{what} needs {count} open file(s) passed with the request, not {len(self.fds)}")
        return self.fds


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
