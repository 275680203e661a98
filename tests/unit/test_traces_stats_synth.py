"""trace stats on hand-computed traces; synthetic profiles checked against the papers'
properties with trace stats (DCD §3.1 and §5, issue 7)."""

from __future__ import annotations

import io

import pytest

from raidlab.errors import UsageError
from raidlab.traces.formats import Request, TraceReader, raidlab_text
from raidlab.traces.stats import SectorBitmap, trace_stats
from raidlab.traces.synth import PROFILES, parse_duration, synth


def test_stats_by_hand():
    reqs = [
        Request(0.000, "write", 0, 4096),        # 8 new sectors
        Request(0.010, "write", 2048, 4096),     # 4 old + 4 new
        Request(0.210, "read", 0, 1024),         # gap 200 ms: idle 150 ms
        Request(0.220, "flush", 0, 0),
        Request(1.220, "write", 1 << 20, 8192),  # gap 1 s: idle 950 ms; 16 new sectors
    ]
    s = trace_stats(reqs)
    assert (s["requests"], s["reads"], s["writes"], s["flushes"]) == (5, 1, 3, 1)
    assert s["write_fraction"] == pytest.approx(3 / 4)
    assert s["duration_s"] == pytest.approx(1.22)
    assert s["rate_per_s"] == pytest.approx(5 / 1.22)
    assert s["overwrite_fraction"] == pytest.approx(4 / 32)
    assert s["idle"]["periods"] == 2
    assert s["idle"]["time_s"] == pytest.approx(0.15 + 0.95)
    assert s["idle"]["fraction"] == pytest.approx(1.1 / 1.22)
    assert s["burstiness"] == pytest.approx(2 / 4)
    assert s["interarrival"]["classes"]["10-100ms"] == 2  # 10 ms counts from 10 ms on
    assert s["interarrival"]["classes"]["0.1-1s"] == 1
    assert s["interarrival"]["classes"]["1-10s"] == 1
    assert s["size"]["classes"]["<=1K"] == 1 and s["size"]["classes"]["<=4K"] == 2
    assert s["size"]["max_bytes"] == 8192


def test_sector_bitmap_counts_overlaps_at_any_alignment():
    bitmap = SectorBitmap()
    assert bitmap.mark(3, 13) == 0        # sectors 3..15
    assert bitmap.mark(0, 24) == 13       # 0..23: 3..15 seen
    assert bitmap.mark(23, 2) == 1        # 23 seen, 24 new
    assert bitmap.mark(1000, 1) == 0      # grows


def test_overwrites_are_per_device():
    reqs = [Request(0, "write", 0, 512, "a"), Request(1, "write", 0, 512, "b"), Request(2, "write", 0, 512, "a")]
    assert trace_stats(reqs)["overwrite_fraction"] == pytest.approx(1 / 3)


# Profile checks. Durations keep the test fast and the trace long enough for the tolerance:
# (profile, duration s, rate tolerance (relative), overwrite tolerance (absolute)).
CASES = [
    ("hplajw", 3 * 86400, 0.15, 0.05),   # the paper concatenated 3 days per trace (DCD §3.1)
    ("snake", 6 * 3600, 0.10, 0.05),
    ("cello", 2 * 3600, 0.10, 0.05),
    ("oltp", 1800, 0.05, 0.08),
]


@pytest.mark.parametrize("name,duration,rate_tol,overwrite_tol", CASES)
def test_profile_properties(name, duration, rate_tol, overwrite_tol):
    prof = PROFILES[name]
    s = trace_stats(synth(name, duration, seed=7))
    assert s["rate_per_s"] == pytest.approx(prof.rate_per_s, rel=rate_tol)
    assert s["write_fraction"] == pytest.approx(prof.write_fraction, abs=0.03)
    assert s["overwrite_fraction"] == pytest.approx(prof.overwrite_fraction, abs=overwrite_tol)
    assert s["size"]["fraction_1k_to_8k"] >= 0.85  # "mostly 1-8 KB"
    assert s["highest_byte"] <= 335_333_376  # inside the HP C2200A
    if name == "oltp":
        assert s["idle"]["fraction"] < 0.3  # "fairly uniform over time" (DCD §3.1)
    else:
        assert s["idle"]["fraction"] > 0.70  # "over 70% of time the disk stays idle"
        assert s["burstiness"] > 0.75  # most requests come within 50 ms of the previous one
    if name == "hplajw":
        assert s["size"]["max_bytes"] == 8192  # DCD §4.1: 8 KB is also the maximum size


def test_office_profiles_rates_span_the_papers_range():
    assert PROFILES["hplajw"].rate_per_s == 0.076 and PROFILES["cello"].rate_per_s == 5.6
    assert (PROFILES["hplajw"].overwrite_fraction, PROFILES["snake"].overwrite_fraction,
            PROFILES["cello"].overwrite_fraction) == (0.25, 0.47, 0.35)


def test_synth_is_deterministic_for_a_seed_and_differs_across_seeds():
    a = raidlab_text(synth("cello", 600, seed=3))
    b = raidlab_text(synth("cello", 600, seed=3))
    c = raidlab_text(synth("cello", 600, seed=4))
    assert a == b
    assert a != c
    back = list(TraceReader(io.StringIO(a), "raidlab"))  # the writer's output reads back
    assert len(back) == a.count("\n") - 2
    assert all(r.offset % 1024 == 0 and r.length % 1024 == 0 for r in back)


def test_synth_bad_arguments():
    with pytest.raises(UsageError, match="unknown trace profile 'office'"):
        list(synth("office", 10, 1))
    with pytest.raises(UsageError, match="duration must be positive"):
        list(synth("cello", 0, 1))
    assert parse_duration("3d") == 259200 and parse_duration("90") == 90 and parse_duration("15m") == 900
    with pytest.raises(UsageError, match="cannot read duration"):
        parse_duration("soon")
