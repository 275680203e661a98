"""`raidlab trace capture NAME -- COMMAND`: record what a live lab's volume receives.

Why built this way: a live lab's volume records the requests it receives while COMMAND runs,
in raidlab's format, so a live workload can be replayed in virtual time and the two compared.

* The recorder sits where the requests arrive at the architecture: the FUSE file `volume`
  calls its node's `target` for every read, write, flush and trim. `start` swaps that target
  for a CaptureTarget wrapping it and `stop` swaps the original back, so a lab that is not
  capturing runs exactly the code it ran before (zero overhead), and the capture sees the
  requests after the kernel's page cache and block layer, as a disk trace would.
* Times come from sched.current_time() (the daemon's live clock), rebased to the start; a
  request is recorded when it arrives (issue order, so the file is sorted) and its response
  time when it completes. The trace is written in raidlab's format as it goes (4096 lines
  at a time), so memory does not grow with the capture; response times are summed per op
  (and kept, 8 bytes each, for exact percentiles) so the live side of the comparison needs
  no second run.
* The daemon op (`capture`, action start|stop) is the array daemon's
  (raidlab.service.daemon.op_capture, for any host that serves a FUSE `volume`); the
  recording is here. Running a command under a capture and replaying it in virtual time
  for comparison is raidlab.runners.capture.
"""

from __future__ import annotations

import os
from array import array
from typing import Any

from raidlab import sched
from raidlab.errors import UsageError
from raidlab.traces.stats import response_summary
from raidlab.traces.formats import FLUSH, READ, RAIDLAB_COLUMNS, RAIDLAB_HEADER, TRIM, WRITE

FLUSH_LINES = 4096


class CaptureTarget:
    """A BlockTarget proxy that writes every request to a raidlab-format trace."""

    def __init__(self, inner: Any, out: Any, name: str, *, comments: list[str] = ()) -> None:
        """`out`: the open text file the trace is written to; `name`: what to call it."""
        self.inner = inner
        self.name = inner.name
        self.path = name
        self.t0 = sched.current_time()
        self.count = 0
        self.samples = {READ: array("d"), WRITE: array("d"), FLUSH: array("d"), TRIM: array("d")}
        self._lines: list[str] = []
        self._file = out
        self._file.write(RAIDLAB_HEADER + "\n")
        for comment in comments:
            self._file.write(f"# {comment}\n")
        self._file.write(RAIDLAB_COLUMNS + "\n")

    @property
    def size(self) -> int:
        return self.inner.size

    def __getattr__(self, name: str) -> Any:  # failed, statistics, ... of the wrapped target
        return getattr(self.inner, name)

    def _arrive(self, op: str, offset: int, length: int) -> float:
        now = sched.current_time()
        self._lines.append(f"{now - self.t0:.9f},{op},{offset},{length},")
        self.count += 1
        if len(self._lines) >= FLUSH_LINES:
            self._flush_lines()
        return now

    def _flush_lines(self) -> None:
        if self._lines:
            self._file.write("\n".join(self._lines) + "\n")
            self._lines.clear()

    async def read(self, offset: int, length: int) -> bytes:
        start = self._arrive(READ, offset, length)
        try:
            return await self.inner.read(offset, length)
        finally:
            self.samples[READ].append(sched.current_time() - start)

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        start = self._arrive(WRITE, offset, len(data))
        try:
            await self.inner.write(offset, data, fua=fua)
        finally:
            self.samples[WRITE].append(sched.current_time() - start)

    async def flush(self) -> None:
        start = self._arrive(FLUSH, 0, 0)
        try:
            await self.inner.flush()
        finally:
            self.samples[FLUSH].append(sched.current_time() - start)

    async def trim(self, offset: int, length: int) -> None:
        start = self._arrive(TRIM, offset, length)
        try:
            await self.inner.trim(offset, length)
        finally:
            self.samples[TRIM].append(sched.current_time() - start)

    def close(self) -> dict[str, Any]:
        """Finish the file; return the live response-time summary per op."""
        self._flush_lines()
        self._file.close()
        return {
            "path": self.path,
            "requests": self.count,
            "seconds": sched.current_time() - self.t0,
            "response": {op: response_summary(samples) for op, samples in self.samples.items()},
        }


def _volume_node(fs: Any):
    files = fs.files() if fs is not None else {}
    node = files.get("volume")
    if node is None:
        raise UsageError("this array exports no volume to capture")
    return node


async def capture_op(fs: Any, request: Any, *, describe: str = "") -> dict[str, Any]:
    """The daemon's `capture` op on the FUSE file `volume`: action=start, with the trace file
    the client opened passed as the request's one descriptor (raidlab.service.daemonbase:
    the daemon opens no path a request names; `name` only labels it), or stop."""
    node = _volume_node(fs)
    action = request.get("action")
    if action == "start":
        if isinstance(node.target, CaptureTarget):
            raise UsageError(f"already capturing to {node.target.path}",
                             hint="stop that capture first (its `raidlab trace capture` stops it on exit)")
        (fd,) = request.files(1, "capture start")
        name = str(request.get("name", "trace"))
        out = os.fdopen(os.dup(fd), "w", encoding="utf-8")  # the request's own fd closes with it
        comments = [f"captured by raidlab trace capture from the volume of {describe}".rstrip(),
                    f"command: {request.get('command', '')}"]
        node.target = CaptureTarget(node.target, out, name, comments=comments)
        return {"capturing": name}
    if action == "stop":
        recorder = node.target
        if not isinstance(recorder, CaptureTarget):
            raise UsageError("no capture is running on this array")
        node.target = recorder.inner
        return recorder.close()
    raise UsageError(f"capture action must be start or stop, not {action!r}")
