"""Block-trace readers (streaming) and raidlab's own trace format (reader and writer).

Why built this way:

* Every reader is a generator over the file's lines: one request in memory at a time, so a
  trace of any length is read in constant memory, and `raidlab sim` can start replaying
  before the file is read.
* Every format becomes the same small record, `Request(time, op, offset, length, device,
  line)`: time in seconds from the trace's first record, op one of read/write/flush/trim,
  offset and length in bytes, the source device (MSR disk number, SPC ASU, blkparse
  major,minor, fio file name) or None, and the line number it came from, so later checks
  (past the end of the device) can still name the line.
* A line that does not parse is a user's problem, not a bug: TraceError (a UsageError, so the
  CLI prints one line and exits 2) naming the file, line number and what was wrong. With
  skip_bad the reader skips such lines and counts them (`TraceReader.skipped`), and
  remembers the first few for the report.
* Timestamps must not go backwards: a request earlier than the one before it is reported
  like a malformed line (the replay issues requests in file order, so an unsorted trace
  would silently be replayed in the wrong order). Equal timestamps are fine.

Formats and where their definitions come from:

* `msr`: MSR Cambridge block traces (Narayanan, Donnelly, Rowstron, "Write off-loading",
  FAST 2008; distributed by SNIA IOTTA). CSV, no header, seven columns:
  Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime. Timestamp and ResponseTime
  are Windows filetimes (100 ns units), Type is "Read" or "Write", Offset and Size are
  bytes. Times are rebased to the first record in integer 100 ns units before converting
  to seconds (a filetime in seconds is ~1.3e10, where a double keeps only microseconds).
* `spc`: the SPC trace file format (Storage Performance Council, "SPC Trace File Format
  Specification" rev. 1.0.1), used by the UMass Trace Repository (Financial1/2,
  WebSearch1-3). CSV: ASU, LBA, Size, Opcode, Timestamp[, further fields ignored]. LBA is in
  512-byte blocks, Size in bytes, Opcode r/R or w/W, Timestamp in seconds from the start.
  Each ASU (application storage unit) is its own address space; raidlab keeps the ASU as
  `device` and replays every ASU onto the one simulated device (see raidlab.runners.virtual).
* `blkparse`: blkparse's default text output (blktrace(8) / blkparse(1)): "maj,min cpu seq
  time pid action RWBS sector + nsectors [process]". Only one action is replayed, by
  default D (issued to the driver: what the device saw); other actions and blkparse's
  summary lines are not requests and are passed over. RWBS: R read, W write, D discard
  (trim), F flush (FUA/preflush); a flush with no sectors is a flush request.
* `fio`: fio's iolog version 3 (fio(1) "Trace file format v3", fio >= 3.31): first line
  "fio version 3 iolog", then "timestamp filename action [offset length]". fio writes the
  timestamp in microseconds since the log started (iolog.c log_io_u: utime_since_now);
  actions read/write/trim/sync/datasync become requests (sync and datasync as flushes);
  add/open/close are file management and are passed over.
* `raidlab`: this project's format, documented at RAIDLAB_HEADER below and written by
  `write_raidlab`. A text file:

      raidlab-trace v1
      # any number of comment lines (synth writes its profile and parameters here)
      time,op,offset,length,device
      0.000000000,write,1048576,8192,
      0.002500000,read,2097152,4096,

  time is seconds (any decimal), op is read/write/flush/trim, offset and length are bytes,
  device is optional (empty). Comment lines may appear anywhere.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator
from typing import NamedTuple, TextIO

from raidlab.errors import UsageError

READ, WRITE, FLUSH, TRIM = "read", "write", "flush", "trim"
OPS = (READ, WRITE, FLUSH, TRIM)
RAIDLAB_HEADER = "raidlab-trace v1"
RAIDLAB_COLUMNS = "time,op,offset,length,device"
FIO_HEADER = "fio version 3 iolog"
SECTOR = 512
FILETIME_UNITS_PER_SECOND = 10_000_000  # Windows filetime: 100 ns units


class Request(NamedTuple):
    """One traced request. time: seconds; offset, length: bytes; line: where it came from."""

    time: float
    op: str
    offset: int
    length: int
    device: str | None = None
    line: int = 0


class TraceError(UsageError):
    """A trace file that cannot be read as its format says. Fields: path, line, format."""


# ------------------------------------------------------------------------------ parsers
#
# Each parser turns one line into a Request (with line=0; the reader fills it in), returns
# None for a line that is not a request (header, comment, file management, other blkparse
# actions), or raises ValueError with a short description of what is wrong.


class _MSRParser:
    def __init__(self) -> None:
        self._first: int | None = None

    def __call__(self, text: str) -> Request | None:
        if not text.strip():
            return None
        fields = text.rstrip("\r\n").split(",")
        if len(fields) != 7:
            raise ValueError(f"expected 7 comma-separated fields "
                             f"(Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime), got {len(fields)}")
        stamp = _int(fields[0], "Timestamp")
        kind = fields[3].strip().lower()
        if kind not in ("read", "write"):
            raise ValueError(f"Type must be Read or Write, not {fields[3]!r}")
        offset, size = _int(fields[4], "Offset"), _int(fields[5], "Size")
        if self._first is None:  # the first line that parses whole, not a bad one before it
            self._first = stamp
        if stamp < self._first:
            raise ValueError(f"Timestamp {stamp} is earlier than the first request's {self._first}: "
                             f"the trace must be sorted by time")
        return Request((stamp - self._first) / FILETIME_UNITS_PER_SECOND, kind, offset, size,
                       f"{fields[1].strip()}/{fields[2].strip()}")


def _parse_spc(text: str) -> Request | None:
    if not text.strip():
        return None
    fields = text.split(",")
    if len(fields) < 5:
        raise ValueError(f"expected at least 5 comma-separated fields (ASU,LBA,Size,Opcode,Timestamp), "
                         f"got {len(fields)}")
    opcode = fields[3].strip().lower()
    if opcode not in ("r", "w"):
        raise ValueError(f"Opcode must be r or w, not {fields[3].strip()!r}")
    return Request(_float(fields[4], "Timestamp"), READ if opcode == "r" else WRITE,
                   _int(fields[1], "LBA") * SECTOR, _int(fields[2], "Size"), fields[0].strip())


class _BlkparseParser:
    def __init__(self, action: str = "D") -> None:
        self.action = action

    def __call__(self, text: str) -> Request | None:
        fields = text.split()
        if not fields or not _is_device(fields[0]):
            return None  # blank, "CPU0 (8,0):" summaries, "Total (...)" etc.: not events
        if len(fields) < 7:
            raise ValueError(f"an event line needs at least 7 fields (dev cpu seq time pid action rwbs), "
                             f"got {len(fields)}")
        if fields[5] != self.action:
            return None
        rwbs = fields[6]
        time = _float(fields[3], "time")
        sector = nsectors = 0
        if len(fields) >= 10 and fields[8] == "+":
            sector = _int(fields[7], "sector")
            nsectors = _int(fields[9], "sector count")
        elif len(fields) >= 8 and not fields[7].startswith("["):
            raise ValueError(f"expected 'sector + count' after {rwbs}, got {' '.join(fields[7:10])!r}")
        if "D" in rwbs:
            op = TRIM
        elif "W" in rwbs:
            op = WRITE
        elif "R" in rwbs:
            op = READ
        elif "F" in rwbs:
            op = FLUSH
        else:
            return None  # N (no data) and the like
        if op != FLUSH and nsectors == 0:
            if "F" in rwbs:
                op = FLUSH  # a preflush without data
            else:
                raise ValueError(f"{rwbs} request without a sector range")
        return Request(time, op, sector * SECTOR, nsectors * SECTOR, fields[0])


def _is_device(text: str) -> bool:
    major, _, minor = text.partition(",")
    return major.isdigit() and minor.isdigit()


class _FioParser:
    _ACTIONS = {"read": READ, "write": WRITE, "trim": TRIM, "sync": FLUSH, "datasync": FLUSH}

    def __init__(self) -> None:
        self._header_seen = False

    def __call__(self, text: str) -> Request | None:
        stripped = text.strip()
        if not self._header_seen:
            if stripped == FIO_HEADER:
                self._header_seen = True
                return None
            raise ValueError(f"first line must be {FIO_HEADER!r} (fio iolog version 3)")
        if not stripped:
            return None
        fields = stripped.split()
        if len(fields) == 3 and fields[2] in ("add", "open", "close"):
            _int(fields[0], "timestamp")
            return None
        if len(fields) == 3 and fields[2] in ("sync", "datasync"):
            return Request(_int(fields[0], "timestamp") / 1e6, FLUSH, 0, 0, fields[1])
        if len(fields) != 5:
            raise ValueError("expected 'timestamp filename action offset length'")
        op = self._ACTIONS.get(fields[2])
        if op is None:
            raise ValueError(f"unknown fio action {fields[2]!r} (version 3 has no 'wait')")
        return Request(_int(fields[0], "timestamp") / 1e6, op, _int(fields[3], "offset"),
                       _int(fields[4], "length"), fields[1])


class _RaidlabParser:
    def __init__(self) -> None:
        self._state = 0  # 0: expect header, 1: expect column line, 2: rows

    def __call__(self, text: str) -> Request | None:
        stripped = text.strip()
        if self._state == 0:
            if stripped != RAIDLAB_HEADER:
                raise ValueError(f"first line must be {RAIDLAB_HEADER!r}")
            self._state = 1
            return None
        if not stripped or stripped.startswith("#"):
            return None
        if self._state == 1:
            if stripped != RAIDLAB_COLUMNS:
                raise ValueError(f"expected the column line {RAIDLAB_COLUMNS!r}")
            self._state = 2
            return None
        fields = stripped.split(",")
        if len(fields) not in (4, 5):
            raise ValueError(f"expected 4 or 5 comma-separated fields ({RAIDLAB_COLUMNS}), got {len(fields)}")
        op = fields[1]
        if op not in OPS:
            raise ValueError(f"op must be one of {', '.join(OPS)}, not {op!r}")
        device = fields[4] if len(fields) == 5 and fields[4] else None
        return Request(_float(fields[0], "time"), op, _int(fields[2], "offset"), _int(fields[3], "length"),
                       device)


def _int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{what} {text.strip()!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"{what} {value} is negative")
    return value


def _float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what} {text.strip()!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{what} {text.strip()!r} is not a finite number")
    if value < 0:
        raise ValueError(f"{what} {value:g} is negative")
    return value


FORMATS = {
    "msr": ("MSR Cambridge CSV (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime)", _MSRParser),
    "spc": ("UMass / SPC trace (ASU,LBA,Size,Opcode,Timestamp)", lambda: _parse_spc),
    "blkparse": ("blkparse default text output (action D replayed)", _BlkparseParser),
    "fio": ("fio iolog version 3 (timestamps in microseconds)", _FioParser),
    "raidlab": (f"raidlab's own format ({RAIDLAB_HEADER}; {RAIDLAB_COLUMNS})", _RaidlabParser),
}


def format_names() -> list[str]:
    return list(FORMATS)


def detect_format(path: str | os.PathLike, given: str | None) -> str:
    """`given`, or the format a file names in its own first line (raidlab's header); a
    UsageError asking for --format when the file does not say."""
    if given is not None:
        return given
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            first = handle.readline().strip()
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror}", path=str(path)) from None
    if first == RAIDLAB_HEADER:
        return "raidlab"
    raise UsageError(f"{path} does not say its format (its first line is not {RAIDLAB_HEADER!r})",
                     hint=f"give --format: {', '.join(FORMATS)}")


def _parser_for(fmt: str):
    try:
        return FORMATS[fmt][1]()
    except KeyError:
        raise UsageError(f"unknown trace format {fmt!r}", hint=f"use one of: {', '.join(FORMATS)}",
                         format=fmt, known=list(FORMATS)) from None


# ------------------------------------------------------------------------------ reader


class TraceReader:
    """Iterate over the requests of a trace file, streaming (see module doc).

    source: a path, or an open text file (then `name` names it in messages).
    skip_bad: skip malformed and out-of-order lines (counted in `skipped`, the first
    MAX_REMEMBERED kept in `bad_lines` as (line, reason)) instead of raising TraceError.
    """

    MAX_REMEMBERED = 10

    def __init__(self, source: str | os.PathLike | TextIO, fmt: str, *, skip_bad: bool = False,
                 name: str | None = None) -> None:
        self._parse = _parser_for(fmt)
        self.format = fmt
        self.source = source
        self.name = name or (str(source) if isinstance(source, (str, os.PathLike)) else getattr(source, "name", "<trace>"))
        self.skip_bad = skip_bad
        self.skipped = 0
        self.bad_lines: list[tuple[int, str]] = []
        self.requests = 0
        self.lines = 0

    def fail(self, line: int, reason: str, hint: str | None = None) -> None:
        """A bad line: raise TraceError, or (skip_bad) count it. Also used by the replayer
        for checks that need the device (a request past its end, with `hint` saying how to
        make a trace that fits)."""
        if not self.skip_bad:
            raise TraceError(f"{self.name}: line {line}: {reason}",
                             hint=hint or "fix the trace, or pass --skip-bad to skip such lines",
                             path=self.name, line=line, format=self.format)
        self.skipped += 1
        if len(self.bad_lines) < self.MAX_REMEMBERED:
            self.bad_lines.append((line, reason))

    def __iter__(self) -> Iterator[Request]:
        if isinstance(self.source, (str, os.PathLike)):
            try:
                handle = open(self.source, encoding="utf-8", errors="replace", newline="")
            except OSError as exc:
                raise TraceError(f"cannot read trace {self.name}: {exc.strerror}", path=self.name) from None
            with handle:
                yield from self._requests(handle)
        else:
            yield from self._requests(self.source)

    def _requests(self, lines: Iterable[str]) -> Iterator[Request]:
        parse = self._parse
        previous = float("-inf")
        lineno = 0
        for lineno, text in enumerate(lines, 1):
            try:
                request = parse(text)
            except ValueError as exc:
                self.fail(lineno, f"{exc} (format {self.format})")
                continue
            if request is None:
                continue
            if request.time < previous:
                self.fail(lineno, f"timestamp {request.time:.9g} s is earlier than the previous "
                                  f"request's {previous:.9g} s: the trace must be sorted by time")
                continue
            previous = request.time
            self.requests += 1
            yield request._replace(line=lineno)
        self.lines = lineno


def read_trace(source, fmt: str, *, skip_bad: bool = False) -> Iterator[Request]:
    """Shorthand: iterate over the requests of `source` (see TraceReader)."""
    return iter(TraceReader(source, fmt, skip_bad=skip_bad))


# ------------------------------------------------------------------------------ writer


def format_request(request: Request) -> str:
    """One data line of raidlab's format (nanosecond time resolution), without newline."""
    return f"{request.time:.9f},{request.op},{request.offset},{request.length},{request.device or ''}"


def write_raidlab(requests: Iterable[Request], out: TextIO, *, comments: Iterable[str] = ()) -> int:
    """Write `requests` in raidlab's format to `out`; return how many were written.

    comments: lines written as "# ..." after the header (a synthetic trace's label)."""
    out.write(RAIDLAB_HEADER + "\n")
    for comment in comments:
        for part in str(comment).splitlines() or [""]:
            out.write(f"# {part}\n")
    out.write(RAIDLAB_COLUMNS + "\n")
    count = 0
    buffer: list[str] = []
    for request in requests:
        buffer.append(format_request(request))
        count += 1
        if len(buffer) >= 4096:
            out.write("\n".join(buffer) + "\n")
            buffer.clear()
    if buffer:
        out.write("\n".join(buffer) + "\n")
    return count


def raidlab_text(requests: Iterable[Request], *, comments: Iterable[str] = ()) -> str:
    """The raidlab-format text of `requests` (for small traces and tests)."""
    out = io.StringIO()
    write_raidlab(requests, out, comments=comments)
    return out.getvalue()
