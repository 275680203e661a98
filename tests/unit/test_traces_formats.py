"""Trace readers: each format from a small fixture built from the format's documentation.

Sources of the fixtures:
* MSR Cambridge (SNIA IOTTA, Narayanan et al. FAST'08): CSV without header,
  Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime; times in Windows filetime
  (100 ns) units, offsets/sizes in bytes.
* SPC trace format spec rev 1.0.1 / UMass Trace Repository (Financial1.spc):
  ASU,LBA,Size,Opcode,Timestamp, LBA in 512-byte blocks, Size in bytes, time in seconds.
* blkparse(1) default output: "maj,min cpu seq time pid action RWBS sector + n [proc]".
* fio(1) "Trace file format v3" and fio 3.33's own --write_iolog output (timestamps in us).
"""

from __future__ import annotations

import io

import pytest

from raidlab.errors import UsageError
from raidlab.traces.formats import Request, TraceError, TraceReader, raidlab_text


def read(text: str, fmt: str, **kw) -> list[Request]:
    return list(TraceReader(io.StringIO(text), fmt, name="fixture", **kw))


MSR = """\
128166372003061629,hm,1,Read,3154132992,4096,8985
128166372016382155,hm,1,Write,3154128896,8192,2051
128166372026382155,hm,0,Write,512,512,1000
"""


def test_msr_columns_units_and_rebased_time():
    reqs = read(MSR, "msr")
    assert [(r.op, r.offset, r.length, r.device, r.line) for r in reqs] == [
        ("read", 3154132992, 4096, "hm/1", 1),
        ("write", 3154128896, 8192, "hm/1", 2),
        ("write", 512, 512, "hm/0", 3),
    ]
    assert reqs[0].time == 0.0
    # 13320526 filetime units of 100 ns = 1.3320526 s, exactly (integer rebasing).
    assert reqs[1].time == pytest.approx(1.3320526, abs=1e-9)
    assert reqs[2].time == pytest.approx(2.3320526, abs=1e-9)


SPC = """\
0,303567,3072,w,0.000000
1,55590,3072,W,0.000000
0,303574,1024,r,0.026214
0,303580,512,R,0.036328,extra
"""


def test_spc_lba_is_512_byte_blocks_and_asu_kept():
    reqs = read(SPC, "spc")
    assert [(r.op, r.offset, r.length, r.device) for r in reqs] == [
        ("write", 303567 * 512, 3072, "0"),
        ("write", 55590 * 512, 3072, "1"),
        ("read", 303574 * 512, 1024, "0"),
        ("read", 303580 * 512, 512, "0"),
    ]
    assert reqs[2].time == pytest.approx(0.026214)


BLKPARSE = """\
  8,0    1        1     0.000000000  4162  Q   W 223490 + 8 [kjournald]
  8,0    1        2     0.000002000  4162  G   W 223490 + 8 [kjournald]
  8,0    1        4     0.000012000  4162  D   W 223490 + 8 [kjournald]
  8,0    0        1     0.001200000     0  C   W 223490 + 8 [0]
  8,0    1        5     0.002000000  4170  D   R 1048576 + 16 [cat]
  8,0    1        6     0.003000000  4170  D   D 2048 + 2048 [fstrim]
  8,0    1        7     0.004000000  4170  D  FN [sync]
CPU0 (8,0):
 Reads Queued:           1,        8KiB	 Writes Queued:           1,        4KiB
"""


def test_blkparse_replays_issue_events_only():
    reqs = read(BLKPARSE, "blkparse")
    assert [(r.time, r.op, r.offset, r.length, r.line) for r in reqs] == [
        (0.000012, "write", 223490 * 512, 4096, 3),
        (0.002, "read", 1048576 * 512, 8192, 5),
        (0.003, "trim", 2048 * 512, 2048 * 512, 6),
        (0.004, "flush", 0, 0, 7),
    ]
    assert reqs[0].device == "8,0"


FIO = """\
fio version 3 iolog
22 /tmp/fiot.img add
133 /tmp/fiot.img open
138 /tmp/fiot.img read 61440 4096
574 /tmp/fiot.img write 491520 4096
600 /tmp/fiot.img sync
700 /tmp/fiot.img trim 0 65536
1036 /tmp/fiot.img close
"""


def test_fio_v3_timestamps_are_microseconds():
    reqs = read(FIO, "fio")
    assert [(r.time, r.op, r.offset, r.length, r.device) for r in reqs] == [
        (138e-6, "read", 61440, 4096, "/tmp/fiot.img"),
        (574e-6, "write", 491520, 4096, "/tmp/fiot.img"),
        (600e-6, "flush", 0, 0, "/tmp/fiot.img"),
        (700e-6, "trim", 0, 65536, "/tmp/fiot.img"),
    ]


def test_fio_needs_its_header_and_refuses_wait():
    with pytest.raises(TraceError, match="line 1: first line must be 'fio version 3 iolog'"):
        read("138 /x read 0 4096\n", "fio")
    with pytest.raises(TraceError, match="line 2: unknown fio action 'wait'"):
        read("fio version 3 iolog\n100 /x wait 0 100\n", "fio")


def test_raidlab_format_round_trip_with_comments():
    reqs = [Request(0.0, "write", 4096, 8192), Request(0.25, "read", 0, 512, "d1"),
            Request(0.25, "flush", 0, 0), Request(1.123456789, "trim", 1 << 20, 4096)]
    text = raidlab_text(reqs, comments=["profile=test", "two\nlines"])
    assert text.splitlines()[:5] == ["raidlab-trace v1", "# profile=test", "# two", "# lines",
                                     "time,op,offset,length,device"]
    back = read(text, "raidlab")
    assert [r._replace(line=0) for r in back] == reqs
    assert back[0].line == 6


def test_malformed_line_names_the_line_and_stops_by_default():
    bad = MSR.replace("hm,1,Write,3154128896", "hm,1,Write,31541x28896")
    with pytest.raises(TraceError) as caught:
        read(bad, "msr")
    assert "fixture: line 2: Offset '31541x28896' is not an integer" in str(caught.value)
    assert caught.value.fields["line"] == 2
    assert isinstance(caught.value, UsageError)  # the CLI prints one line, exit 2


def test_skip_bad_skips_and_counts():
    bad = SPC.replace("0,303574,1024,r", "0,303574,1024,x") + "garbage\n"
    reader = TraceReader(io.StringIO(bad), "spc", skip_bad=True, name="fixture")
    reqs = list(reader)
    assert len(reqs) == 3
    assert reader.skipped == 2
    assert [line for line, _ in reader.bad_lines] == [3, 5]
    assert "Opcode must be r or w" in reader.bad_lines[0][1]


def test_unsorted_timestamps_are_detected():
    text = "raidlab-trace v1\ntime,op,offset,length,device\n1.0,read,0,512,\n0.5,read,0,512,\n"
    with pytest.raises(TraceError, match="line 4: timestamp 0.5 s is earlier than the previous request's 1 s"):
        read(text, "raidlab")
    reader = TraceReader(io.StringIO(text), "raidlab", skip_bad=True)
    assert [r.time for r in reader] == [1.0] and reader.skipped == 1


def test_unknown_format_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown trace format 'csv'.*msr, spc, blkparse, fio, raidlab"):
        TraceReader(io.StringIO(""), "csv")


def test_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(TraceError, match="cannot read trace .*nope.csv"):
        list(TraceReader(tmp_path / "nope.csv", "msr"))


def test_reader_streams_without_reading_everything(tmp_path):
    # A generator: the first request is available before a bad line far below is reached.
    text = "raidlab-trace v1\ntime,op,offset,length,device\n0,read,0,512,\n" + "0,read,0,512,\n" * 1000 + "bad\n"
    it = iter(TraceReader(io.StringIO(text), "raidlab"))
    assert next(it).line == 3
    with pytest.raises(TraceError, match="line 1004"):
        list(it)
