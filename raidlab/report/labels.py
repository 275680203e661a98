"""How a report names things for a reader: metrics as axis labels with units, architectures
as their figures show them.

Why a mapping: a metric's name is an identifier (`read_request_ms_per_kib`), chosen to be
unambiguous in run files; a reader of a figure needs "read time per KiB (ms)". The table
below names the metrics the scenarios report most; any other is read word by word
(`_p99_` -> "99th percentile", `_mb_s` -> "MB/s"), so a new metric gets a readable label
without an entry, and an entry only ever improves one.

Architectures: where a scenario draws its bars grouped by an [[arch]] field (SA-RAID's
partition configurations), a figure shows a bar as its series in the legend and the field's
value under its group (`raid0`, `b1-c1-d1-e1`). The tables and verdicts then name it the
same way, `raid0 b1-c1-d1-e1`, rather than by its label (`raid0-b1c1d1e1`), which stays in
the report's list of architectures beside them.
"""

from __future__ import annotations

import re

from raidlab.scenarios import ARCH_X_FIELDS, Scenario, x_value

# metric -> what it measures, without its unit (the unit comes from the runs)
METRICS = {
    "tps": "transactions per second",
    "aggregate_mb_s": "aggregate bandwidth",
    "space_overhead": "space overhead",
    "read_request_ms_per_kib": "read time per KiB",
    "write_request_ms_per_kib": "write time per KiB",
    "all_request_ms_per_kib": "access time per KiB",
    "read_per_block_ms": "read time per block",
    "write_per_block_ms": "write time per block",
    "all_per_block_ms": "access time per block",
    "bus_utilization": "bus utilization",
    "bus_wait_s": "time waiting for the bus",
    "forced_destages": "forced destages",
    "idle_periods_found": "idle periods found",
    "waited_for_full_buffer": "writes that waited for a full RAM buffer",
    "random_seeks_per_s": "random seeks per second",
    "elapsed_seconds": "elapsed time",
    "virtual_seconds": "virtual time",
}

# a word of a metric name -> words for a reader
WORDS = {
    "ms": "", "s": "", "us": "", "mb": "", "kbs": "", "bw": "bandwidth", "iops": "I/O per second",
    "lat": "latency", "p50": "median", "p95": "95th percentile", "p99": "99th percentile",
    "max": "maximum", "mean": "mean", "tps": "transactions per second", "randread": "random read",
    "randwrite": "random write", "per": "per", "kib": "KiB", "mkdir": "mkdir", "cpu": "CPU",
    "c": "clients",
}

# a run file's unit -> how an axis shows it
UNITS = {"us": "µs", "count": "", "1/s": "per s", "B": "bytes", "B/s": "bytes/s"}

_UNIT_SUFFIXES = (("_mb_s", "MB/s"), ("_ms_per_kib", "ms"), ("_ms", "ms"), ("_us", "µs"),
                  ("_seconds", "s"), ("_kbs", "KiB/s"), ("_s", "s"))


STATISTICS = {"mean": "mean", "max": "maximum", "p50": "median", "p95": "95th-percentile",
              "p99": "99th-percentile"}


def metric_words(metric: str) -> str:
    """What a metric measures, in words: the table's entry, else its name read word by word."""
    if metric in METRICS:
        return METRICS[metric]
    response = re.fullmatch(r"(read|write|all)_(mean|max|p50|p95|p99)_ms", metric)
    if response:  # a trace replay's response times
        op, stat = response.groups()
        return f"{STATISTICS[stat]} {'access' if op == 'all' else op} response time"
    head = metric.replace("{x}", "")
    for suffix, unit in _UNIT_SUFFIXES:
        if head.endswith(suffix):
            head = head[: -len(suffix)] + ("_per_kib" if suffix == "_ms_per_kib" else "")
            if unit in ("MB/s", "KiB/s"):
                head += "_bandwidth"
            elif suffix == "_seconds":
                head += "_time"
            break
    head = re.sub(r"_c(\d*)$", lambda m: f"_at_{m.group(1)}_clients" if m.group(1) else "", head)
    words = [WORDS.get(w, w) for w in head.strip("_").split("_")]
    return " ".join(w for w in words if w) or metric


def unit_text(unit: str) -> str:
    return UNITS.get(unit, unit)


def metric_unit(metric: str, unit: str = "") -> str:
    """A metric's unit for an axis: the runs' own, else the one its name ends with."""
    if unit:
        return unit_text(unit)
    for suffix, found in _UNIT_SUFFIXES:
        if metric.replace("{x}", "").endswith(suffix):
            return found
    return ""


def axis_label(metric: str, unit: str = "") -> str:
    """`read_request_ms_per_kib`, unit ms -> `read time per KiB (ms)`."""
    shown = metric_unit(metric, unit)
    return metric_words(metric) + (f" ({shown})" if shown else "")


def arch_groups(scenario: Scenario) -> dict[str, tuple[str, str]]:
    """label -> (group, series) where the figures group bars by an [[arch]] field; empty
    where they do not, or where two labels would read the same."""
    spec = scenario.report
    found: dict[str, tuple[str, str]] = {}
    if spec.style == "bars" and spec.x in ARCH_X_FIELDS:
        for arch in scenario.archs:
            group = x_value(spec, arch, {})
            if group is not None and arch.series:
                found[arch.label] = (str(group), arch.series)
    return found if len(set(found.values())) == len(found) else {}


def arch_namer(scenario: Scenario):
    """label -> the name a reader sees in the figures (see the module's docstring)."""
    names = {label: f"{series} {group}" for label, (group, series) in arch_groups(scenario).items()}
    return lambda label: names.get(label, label)
