"""Bad input ends in one line, never a traceback: hypothesis-generated trace lines in every
format and scenario files, fed to the readers and the loader. A trace line either parses
into a request a replay can use, or raises TraceError naming its line (or, with skip_bad,
is counted); a scenario file either loads or raises ScenarioError (both UsageErrors, which
the CLI prints in one line and exits 2)."""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from raidlab import scenarios
from raidlab.errors import RaidlabError
from raidlab.traces.formats import FORMATS, OPS, FIO_HEADER, RAIDLAB_HEADER, TraceError, TraceReader

# Fields that are almost right are where parsers break: numbers of every kind, signs,
# exponents, huge values, the words each format expects, and separators.
NUMBERISH = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", " ", "-", "+", "0x10", "1e400", "nan", "inf", "-0", "1_000", "٣", "0.5.1", "1e-400"]),
)
WORDS = st.sampled_from(["Read", "Write", "R", "W", "r", "w", "D", "WS", "FWFS", "RA", "N", "read", "write",
                         "flush", "trim", "sync", "datasync", "add", "open", "close", "8,0", "259,3", "+", "x",
                         "hostname", "[kworker]", "Q", "C", "D"])
FIELD = st.one_of(NUMBERISH, WORDS, st.text(max_size=12))


def _fields(sep: str, valid: list) -> st.SearchStrategy[str]:
    """A line of a format: valid, or with one field replaced by something else, or a field
    too many or too few."""
    def mutate(draw_fields, how, where, other):
        fields = list(draw_fields)
        if how == "replace":
            fields[where % len(fields)] = other
        elif how == "drop":
            fields = fields[:-1 - where % 2]
        elif how == "extra":
            fields.append(other)
        return sep.join(fields)
    return st.builds(mutate, st.tuples(*valid), st.sampled_from(["none", "none", "replace", "drop", "extra"]),
                     st.integers(min_value=0, max_value=20), FIELD)


NAT = st.integers(min_value=0, max_value=2**40).map(str)
TIME = st.floats(min_value=0, max_value=1e6, allow_nan=False).map(lambda f: f"{f:.6f}")
LINES = {
    "msr": _fields(",", [NAT, st.just("hm"), NAT, st.sampled_from(["Read", "Write"]), NAT, NAT, NAT]),
    "spc": _fields(",", [NAT, NAT, NAT, st.sampled_from(["r", "w", "R", "W"]), TIME]),
    "blkparse": _fields(" ", [st.just("8,0"), NAT, NAT, TIME, NAT, st.sampled_from(["D", "Q", "C"]),
                              st.sampled_from(["R", "W", "WS", "D", "FWFS", "RA", "N"]), NAT, st.just("+"), NAT,
                              st.just("[fio]")]),
    "fio": _fields(" ", [NAT, st.just("/dev/x"), st.sampled_from(["read", "write", "trim", "sync", "open"]), NAT,
                         NAT]),
    "raidlab": _fields(",", [TIME, st.sampled_from(["read", "write", "flush", "trim"]), NAT, NAT, st.just("")]),
}
PREFIX = {"fio": FIO_HEADER + "\n", "raidlab": RAIDLAB_HEADER + "\ntime,op,offset,length,device\n"}


def _check_request(request) -> None:
    assert request.op in OPS
    assert isinstance(request.offset, int) and isinstance(request.length, int)
    assert request.offset >= 0 and request.length >= 0
    assert isinstance(request.time, float) and math.isfinite(request.time) and request.time >= 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(sorted(FORMATS)), data=st.data())
def test_every_trace_line_is_a_request_or_one_line_error(fmt, data):
    lines = data.draw(st.lists(LINES[fmt], min_size=1, max_size=6))
    text = PREFIX.get(fmt, "") + "\n".join(lines) + "\n"
    try:
        for request in TraceReader(io.StringIO(text), fmt, name="t"):
            _check_request(request)
    except TraceError as exc:
        assert "\n" not in str(exc) and "line " in str(exc)
    skipping = TraceReader(io.StringIO(text), fmt, skip_bad=True, name="t")
    for request in skipping:
        _check_request(request)
    # a generated line may hold line breaks of its own: count the lines the reader sees
    assert skipping.skipped >= 0 and skipping.requests + skipping.skipped <= text.count("\n") + 2


# -- scenario files -----------------------------------------------------------------------

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.toml"))
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*) = ")

TOML_VALUES = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(['"sim"', '"live"', '"native"', '"vm"', '"raid5"', '"4K"', '"0"', '"-1"', '""', "true",
                     "false", "[]", "[1, 2]", "{}", '{ a = 1 }', '"raidx"', '"1e9G"', '"x"', "inf", "nan",
                     '"ext2"', '"none"']),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters='"\\\n'),
            max_size=10).map(lambda s: f'"{s}"'),
)
KEYS = st.sampled_from(["id", "title", "paper", "kind", "runner", "repeat", "name", "params", "label", "arch",
                        "disks", "disk_model", "disk_size", "chunk", "options", "filesystem", "mkfs_options",
                        "partitions", "bus", "discipline", "series", "cluster_nodes", "metric", "min", "max",
                        "case", "num", "den", "den_case", "style", "x", "metrics", "span", "write_cache"])
SECTIONS = st.sampled_from(["[scenario]", "[workload]", "[[case]]", "[[arch]]", "[[claim]]", "[report]",
                            "[quick]", "[[paper]]"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(SCENARIOS),
       edits=st.lists(st.tuples(st.integers(min_value=0, max_value=10**6), st.sampled_from(["set", "drop", "add"]),
                                KEYS, TOML_VALUES), min_size=1, max_size=3))
def test_every_scenario_file_loads_or_is_one_line_error(tmp_path_factory, base, edits):
    """A real scenario file with a few of its assignments given other values, dropped, or
    joined by keys it may not take: it loads, or says what is wrong in one line."""
    lines = base.read_text().splitlines()
    for where, how, key, value in edits:
        assignments = [j for j, line in enumerate(lines) if ASSIGNMENT.match(line)]
        i = assignments[where % len(assignments)]
        name = ASSIGNMENT.match(lines[i]).group(1)
        if how == "set":
            lines[i] = f"{name} = {value}"
        elif how == "drop":
            lines[i] = "# dropped"
        elif not any(line.startswith(f"{key} = ") for line in lines[max(0, i - 12):i + 12]):
            lines.insert(i, f"{key} = {value}")
    path = tmp_path_factory.mktemp("scenario") / base.name
    path.write_text("\n".join(lines) + "\n")
    try:
        scenarios.load(path)
    except RaidlabError as exc:  # UsageError, or CapabilityError (md natively here): one line, exit 2
        assert exc.exit_code == 2 and "\n" not in str(exc).strip(), str(exc)


# -- command-line option values --------------------------------------------------------------
# Only commands that touch nothing on the host (a layout's plan, a replay in virtual time):
# every value either runs or is refused in one line with exit 2.

SIZES = st.one_of(st.sampled_from(["4K", "0", "-4K", "1", "511", "512", "3K", "1G", "1e3", "K", "", "4KB", "64k",
                                   "18446744073709551616", "0x1000", "4 K", "nan"]),
                  st.integers(min_value=-10, max_value=2**40).map(str))
COUNTS = st.one_of(st.integers(min_value=-3, max_value=70).map(str), st.sampled_from(["", "x", "1.5", "1e2"]))
OPTIONS = st.lists(st.tuples(st.sampled_from(["algorithm", "layout", "image_placement", "image_buffer", "cache",
                                              "config", "ram_buffer", "cache_size", "destage", "log", "nope", ""]),
                             st.sampled_from(["left-symmetric", "near", "far", "memory", "disk", "scd", "on", "off",
                                              "4M", "0", "-1", "", "=", "x"])),
                   max_size=2).map(lambda pairs: [a for k, v in pairs for a in ("-o", f"{k}={v}")])


def _one_line_or_ok(argv: list[str], capsys) -> None:
    from raidlab.cli import main

    rc = main(argv)
    out = capsys.readouterr()
    assert rc in (0, 2), (argv, rc, out.err[-2000:])
    if rc == 2:
        assert "Traceback" not in out.err, (argv, out.err)
        lines = [line for line in out.err.splitlines() if line.strip()]
        assert lines and (len(lines) == 1 or lines[0].startswith("Usage:")), (argv, out.err)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=st.sampled_from(["raid0", "raid5", "raid10", "chained", "raidx", "sa3", "raid6", "RAID5", ""]),
       disks=COUNTS, chunk=SIZES, disk_size=st.one_of(st.none(), SIZES), lba=COUNTS, length=COUNTS,
       write=st.booleans(), options=OPTIONS)
def test_explain_option_values_run_or_are_one_line(capsys, layout, disks, chunk, disk_size, lba, length, write,
                                                   options):
    argv = ["explain", layout, "--disks", disks, "--chunk", chunk, "--lba", lba, "--length", length, *options]
    if disk_size is not None:
        argv += ["--disk-size", disk_size]
    if write:
        argv.append("--write")
    _one_line_or_ok(argv, capsys)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(arch=st.sampled_from(["disk", "raid0", "raid5", "raidx", "dcd", "vcraid", "tss", "sa1", "md-raid5", "x"]),
       disks=COUNTS, chunk=SIZES, disk_size=st.one_of(st.none(), SIZES), options=OPTIONS,
       compact=st.sampled_from(["1", "0", "-1", "1000", "nan", "inf", "x"]),
       outstanding=st.one_of(st.none(), COUNTS))
def test_sim_option_values_run_or_are_one_line(tmp_path_factory, capsys, arch, disks, chunk, disk_size, options,
                                               compact, outstanding):
    trace = tmp_path_factory.mktemp("trace") / "t.trace"
    trace.write_text(RAIDLAB_HEADER + "\ntime,op,offset,length,device\n0.0,write,0,4096,\n0.001,read,0,4096,\n"
                     "0.002,read,8192,8192,\n")
    argv = ["sim", "--arch", arch, "--disks", disks, "--chunk", chunk, "--disk-model", "hp-c2200a",
            "--trace", str(trace), "--compact", compact, *options]
    if disk_size is not None:
        argv += ["--disk-size", disk_size]
    if outstanding is not None:
        argv += ["--outstanding", outstanding]
    _one_line_or_ok(argv, capsys)


def test_arrays_whose_creation_record_outgrows_the_superblock_are_refused_before_building():
    """SA's superblock keeps every member's bandwidth probe: sa1-3 take 16 members, saz 4;
    more is refused before anything is built, while the pure layout (explain) takes any."""
    import pytest

    from raidlab import archs
    from raidlab.cli.explain import build

    for name, limit in (("sa1", 16), ("sa3", 16), ("saz", 4)):
        archs.validate(name, limit, 1 << 30, 4096, {}, "sim", disk_model="hp-c2200a")
        with pytest.raises(RaidlabError, match=f"{name} takes at most {limit} disks, got {limit + 1}"):
            archs.validate(name, limit + 1, 1 << 30, 4096, {}, "sim", disk_model="hp-c2200a")
        layout, _note = build(name, limit + 2, 4096, None, {})
        assert layout.n_disks == limit + 2
