"""`raidlab sweep SCENARIO`: what a scenario's claims hinge on, one assumption at a time.

Why a sweep exists: virtual time stands on stated assumptions (a read-ahead depth, a drive's
write cache, a host's copy rate), each sourced or marked as assumed. A claim that holds only
for one value of an assumption is a weaker finding than one that holds across its plausible
range, and a reader should see which. A sweep reruns the claim cases with one assumption
changed at a time and reports how each claim's measured value moves against its band
(raidlab.report.sweep). It is never a claim case and never picks a value: the scenario's
own values stay the ones its report judges, and the bands stay as written.

The design is one at a time (a tornado): the base scenario, plus for each assumption one
variant per value with every other assumption at base. It shows each assumption's own
effect and costs the sum of the values, not their product; what it cannot show is an
interaction between two assumptions, which a reader can sweep as a key of its own.

An assumption is a dotted path into the scenario's TOML document, so any table the loader
accepts can be swept without this module knowing what it means: `workload.params.read_depth`,
`case.256m.params.file_kb` (a [[case]] by name), `arch.sa3-b8c1d1e1.chunk` (an [[arch]] by
label), `arch.*.disk_model` (every [[arch]]), `host.copy_mb_s` (a top-level table). Each
variant is the base document with that value set, loaded by the scenario loader itself
(raidlab.scenarios.load_doc), so a value the loader would refuse in a file is refused here
with the same words before anything runs. What claims and reports say ([scenario],
[[claim]], [[paper]], [report], [control], [quick], [[sweep]]) is not an assumption and is
refused, as are the names that identify an entry (an [[arch]]'s label, a [[case]]'s name)
and the case parameters that name a file (whose readability was checked for the base file's
owner). A scenario may list its assumptions in [[sweep]] tables (`key`, `values`, optional
`label` and `reason`), used when no --vary is given.

Only the runs the chosen claims read are made: each claim names its cases and the [[arch]]
labels it compares (raidlab.report.claims), and a variant whose runs would be those of
another (the same scenario, the same runs) is read from that one's directory.

Execution reuses `raidlab run`'s loop (raidlab.run.run_scenario): each variant is an ordinary
results directory `<out>/<variant>/` that `raidlab report` reads, with its own scenario copy
(the variant's TOML), manifest and run files. A variant runs under `<out>/.staging/<variant>/`
(run_scenario makes its timestamped directory there) and is renamed into place when its loop
returns, so a directory named after a variant is always a whole results directory. `--resume
OUT` continues an interrupted sweep: a finished variant is kept, an interrupted one continues
through run.py's own resume (its ok runs kept), one left in staging by a killed worker is
moved into place first, and the rest start. Virtual-time variants are deterministic and
independent, so `--jobs N` runs them in N spawned worker processes; a live scenario's arrays
share the host's devices and its timing, so it is swept one variant at a time. Ctrl-C (or
SIGTERM) stops every worker through run.py's own interruption (each worker ignores SIGINT and
is sent SIGTERM by its parent, so none dies between two steps), and leaves a state --resume
continues.
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import datetime as dt
import json
import multiprocessing
import os
import queue as queue_module
import re
import signal
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tomli_w

from raidlab import run as runmod
from raidlab import scenarios
from raidlab.errors import RaidlabError, UsageError
from raidlab.lab import process_start_time
from raidlab.lab.proc import boot_id
from raidlab.outputs import make_dirs, new_stamped_dir, output_dir, owned_dir, read_regular, write_whole
from raidlab.scenarios import Claim, PlannedRun, Scenario, ScenarioError
from raidlab.signals import deferred_signals

PLAN_FILE = "plan.json"        # what the sweep planned (assumptions, claims, variants) and its state
SCENARIO_COPY = "scenario.toml"  # the base scenario's text, as the sweep read it
STAGING = ".staging"           # where a variant runs before it is renamed into place
BASE = "base"                  # the variant with every assumption at the scenario's own value
FORMAT = 1

# Tables that say what is claimed, published or drawn, not how the runs are made.
NOT_ASSUMPTIONS = ("scenario", "claim", "paper", "report", "control", "quick", "sweep")
# Fields that identify an entry of an array of tables, in the order they are looked for.
ENTRY_NAMES = ("label", "name", "id")


# ---------------------------------------------------------------------- assumptions (pure)


@dataclasses.dataclass(frozen=True)
class Assumption:
    """One swept assumption: a dotted key into the scenario's document and the values tried,
    in the order a reader reads them (the order "flips at" follows)."""

    key: str
    values: tuple[Any, ...]
    label: str = ""   # how the report names it (default: the key)
    reason: str = ""  # why it is worth sweeping (shown in the report)

    @property
    def name(self) -> str:
        return self.label or self.key


def parse_value(text: str) -> Any:
    """One --vary value as a TOML scalar: 4 -> int, 0.5 -> float, true -> bool, "a b" ->
    str; a bare word that is not TOML (512K, hp-c2200a) is the string as written."""
    text = text.strip()
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def split_values(text: str) -> list[str]:
    """V1,V2,... split on the commas outside quotes ("a,b" stays one value)."""
    out, current, quote = [], "", None
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char == ",":
            out.append(current)
            current = ""
            continue
        current += char
    if quote:
        raise UsageError(f"--vary ...={text}: unclosed {quote} quote")
    out.append(current)
    return out


def parse_vary(text: str) -> Assumption:
    """`KEY=V1,V2,...` (--vary) as an Assumption; UsageError for a missing key or value."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise UsageError(f"--vary {text!r}: give KEY=V1,V2,...", hint="e.g. --vary workload.params.read_depth=8,32")
    parts = split_values(values)
    if any(not p.strip() for p in parts):
        raise UsageError(f"--vary {text!r}: an empty value", hint="separate values with single commas")
    return Assumption(key, tuple(parse_value(p) for p in parts))


def scenario_assumptions(scenario: Scenario) -> tuple[Assumption, ...]:
    """The scenario's [[sweep]] tables (checked for their keys and types by the loader)."""
    doc = tomllib.loads(scenario.text)
    return tuple(Assumption(t["key"], tuple(t["values"]), t.get("label", ""), t.get("reason", ""))
                 for t in doc.get("sweep", []))


def show(value: Any) -> str:
    """A value as a reader writes it: strings bare, everything else as TOML."""
    if isinstance(value, str):
        return value
    return tomli_w.dumps({"v": value}).partition("=")[2].strip()


# ---------------------------------------------------------------------- key paths (pure)


def _segments(key: str) -> list[str]:
    segments = key.split(".")
    if not key or any(not s for s in segments):
        raise UsageError(f"--vary {key!r}: not a dotted key", hint="e.g. workload.params.read_depth, arch.*.chunk")
    return segments


def _entry_name(table: Any) -> str | None:
    if isinstance(table, dict):
        for field in ENTRY_NAMES:
            if isinstance(table.get(field), str):
                return table[field]
    return None


def _targets(node: Any, segments: list[str], key: str, where: str) -> list[tuple[dict, str]]:
    """The (table, leaf key) pairs `segments` names below `node` (at `where` in the
    document). Missing tables on the way are created (the loader judges whether they may
    exist); an array of tables is entered by an entry's label or name (which may contain
    dots) or by `*` for every entry."""
    head, rest = segments[0], segments[1:]
    if isinstance(node, list):
        entries = [t for t in node if isinstance(t, dict)]
        names = [_entry_name(t) for t in entries]
        if head == "*":
            chosen, used = entries, 1
        else:
            chosen, used = [], 0
            for n in range(len(segments), 0, -1):  # the longest match: a name with dots in it
                name = ".".join(segments[:n])
                if name in names:
                    chosen, used = [entries[names.index(name)]], n
                    break
        if not chosen:
            shown = ", ".join(n for n in names if n) or "(none)"
            raise UsageError(f"--vary {key}: no [[{where}]] named {head!r}",
                             hint=f"[[{where}]] entries: {shown}; or * for every one")
        if len(segments) == used:
            raise UsageError(f"--vary {key}: names an entry of [[{where}]], not a value in it",
                             hint="add the field, e.g. " + f"{where}.{head}.chunk")
        leaf = segments[used:]
        if len(leaf) == 1 and leaf[0] in ENTRY_NAMES:
            raise UsageError(f"--vary {key}: {leaf[0]} names the entry; it is not an assumption",
                             hint="claims and reports refer to entries by it")
        return [pair for table in chosen for pair in _targets(table, leaf, key, where)]
    if not isinstance(node, dict):
        raise UsageError(f"--vary {key}: {where} is a value, not a table", hint=f"vary {where} itself")
    here = f"{where}.{head}" if where else head
    if not rest:
        if isinstance(node.get(head), dict):
            fields = ", ".join(sorted(node[head])) or "(empty)"
            raise UsageError(f"--vary {key}: {here} is a table, not a value", hint=f"its keys: {fields}")
        return [(node, head)]
    if head not in node:
        if not where:
            raise UsageError(f"--vary {key}: the scenario has no [{head}] table",
                             hint=f"its tables: {', '.join(sorted(node))}; a sweep changes one value of what "
                                  f"the scenario states, so write [{head}] with its base values first")
        node[head] = {}
    return _targets(node[head], rest, key, here)


def check_key(key: str) -> None:
    """Refuse what a sweep may not vary (module doc) before the document is touched."""
    segments = _segments(key)
    if segments[0] in NOT_ASSUMPTIONS:
        raise UsageError(f"--vary {key}: [{segments[0]}] says what is claimed, published or drawn; "
                         "a sweep varies how the runs are made",
                         hint="vary [[arch]], [workload], [[case]] or another table of the runs; "
                              "use --repeat for the repetitions")
    if segments[-1] in scenarios.FILE_PARAMS:
        raise UsageError(f"--vary {key}: {segments[-1]} names a file",
                         hint="a sweep varies assumptions, not the files a scenario reads; "
                              "write a scenario per file")


def base_values(doc: dict, key: str) -> list[Any]:
    """The base document's value(s) at `key` (one per [[arch]] for `arch.*...`); None where
    the document leaves it to its default. A [host] value the table leaves to its catalog
    model is the model's (raidlab.disks.host), so a sweep shows what it varies from."""
    check_key(key)
    values = [table.get(leaf) for table, leaf in _targets(copy.deepcopy(doc), _segments(key), key, "")]
    segments = _segments(key)
    host = doc.get("host")
    if (len(segments) == 2 and segments[0] == "host" and values == [None] and isinstance(host, dict)
            and isinstance(host.get("model"), str)):
        from raidlab.disks import host as hosts

        model = hosts.get(host["model"])
        if segments[1] in hosts.FIELDS:
            return [getattr(model, segments[1])]
    return values


def apply(doc: dict, key: str, value: Any) -> dict:
    """A copy of `doc` with `value` at `key` (every target of a `*`); UsageError for a key
    the document does not have (naming what it has)."""
    check_key(key)
    out = copy.deepcopy(doc)
    for table, leaf in _targets(out, _segments(key), key, ""):
        if isinstance(table.get(leaf), dict):
            raise UsageError(f"--vary {key}: names a table, not a value")
        table[leaf] = copy.deepcopy(value)
    return out


def variant_id(key: str, value: Any) -> str:
    """A variant's directory name: `key=value`, with what a file name should not carry
    replaced (`*` reads `all`)."""
    text = f"{key.replace('*', 'all')}={show(value)}"
    return re.sub(r"[^A-Za-z0-9._,=+-]+", "_", text)[:120]


def variant_text(base: Scenario, doc: dict, key: str, value: Any) -> str:
    """The variant's scenario file: the base document with the value set, as TOML, headed by
    what it is (the base file's comments are not carried over: the base copy keeps them)."""
    return (f"# raidlab sweep: a variant of {base.path} ({base.id}) with {key} = {show(value)}\n"
            + tomli_w.dumps(doc))


# ---------------------------------------------------------------------- claims -> runs (pure)


def claim_runs(claim: Claim) -> set[tuple[str, str]]:
    """The (arch label, case) pairs whose means a claim reads (raidlab.report.claims)."""
    if claim.kind == "order":
        return {(label, case) for label in claim.order for case in claim.cases}
    if claim.kind == "value":
        return {(claim.arch, case) for case in claim.cases}
    den_cases = [claim.den_case or case for case in claim.cases]
    return {(claim.num, case) for case in claim.cases} | {(claim.den, case) for case in den_cases}


def claim_case_runs(claim: Claim, case: str) -> set[tuple[str, str]]:
    """The pairs one of a claim's cases needs to be judged."""
    one = dataclasses.replace(claim, cases=(case,))
    return claim_runs(one)


def select_claims(scenario: Scenario, wanted: Iterable[str] = ()) -> tuple[Claim, ...]:
    """The claims named by --claim (all of the scenario's when none is named)."""
    wanted = [w for item in wanted for w in item.split(",") if w]
    known = [c.id for c in scenario.claims]
    if not known:
        raise UsageError(f"{scenario.path}: no [[claim]]: a sweep shows what claims hinge on",
                         hint="add a [[claim]] with its band, or run it with `raidlab run`")
    for name in wanted:
        if name not in known:
            raise UsageError(f"--claim {name}: no claim {name!r} in {scenario.path}", hint=f"claims: {', '.join(known)}")
    return tuple(c for c in scenario.claims if not wanted or c.id in wanted)


def runs_for_claims(scenario: Scenario, claims: Iterable[Claim], *, quick: bool = False,
                    repeat: int | None = None) -> list[PlannedRun]:
    """The scenario's planned runs (raidlab.scenarios.plan_runs, in its order) that the
    claims read, and no other."""
    wanted = set().union(*(claim_runs(c) for c in claims))
    return [p for p in scenarios.plan_runs(scenario, quick=quick, repeat=repeat)
            if (p.arch.label, p.case.name) in wanted]


# ---------------------------------------------------------------------- the plan (pure)


@dataclasses.dataclass(frozen=True)
class Variant:
    id: str
    key: str | None       # None: the base
    value: Any
    scenario: Scenario
    planned: tuple[PlannedRun, ...]
    runs_in: str          # the variant whose directory holds these runs (itself, or one identical)


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    base: Scenario
    assumptions: tuple[Assumption, ...]
    claims: tuple[Claim, ...]
    variants: tuple[Variant, ...]
    quick: bool = False
    repeat: int | None = None  # --repeat (None: the scenario's, or its [quick] one)
    skipped: tuple[str, ...] = ()  # claims left out: none of their cases runs (a --quick subset)

    def variant(self, variant_id: str) -> Variant:
        for v in self.variants:
            if v.id == variant_id:
                return v
        raise KeyError(variant_id)

    @property
    def to_run(self) -> tuple[Variant, ...]:
        """The variants that make runs (the others read an identical one's)."""
        return tuple(v for v in self.variants if v.runs_in == v.id)

    @property
    def total_runs(self) -> int:
        return sum(len(v.planned) for v in self.to_run)


def plan(base: Scenario, assumptions: Iterable[Assumption], *, claims: Iterable[str] = (), quick: bool = False,
         repeat: int | None = None, file_checks: bool = True) -> SweepPlan:
    """The base and one variant per assumption and value, each loaded and checked by the
    scenario loader, with the runs the chosen claims read (pure but for the loader's file
    checks, `file_checks`). UsageError naming the --vary for anything refused."""
    assumptions, claims = tuple(assumptions), tuple(claims)
    if not assumptions:
        raise UsageError(f"{base.path}: nothing to vary",
                         hint="give --vary KEY=V1,V2,... or add [[sweep]] tables (key, values) to the scenario")
    keys = [a.key for a in assumptions]
    for key in keys:
        if keys.count(key) > 1:
            raise UsageError(f"--vary {key}: given twice", hint="give all its values in one --vary")
    chosen = select_claims(base, claims)
    planned_base = runs_for_claims(base, chosen, quick=quick, repeat=repeat)
    have = {(p.arch.label, p.case.name) for p in planned_base}
    runnable = [c for c in chosen if any(claim_case_runs(c, case) <= have for case in c.cases)]
    skipped = tuple(c.id for c in chosen if c not in runnable)
    if skipped and (claims or not runnable):
        raise UsageError(f"claim {skipped[0]}: none of its cases runs in the --quick subset of {base.path}",
                         hint=("claims that run: " + ", ".join(c.id for c in runnable)) if runnable
                         else "sweep at full size (without --quick)")
    planned_base = runs_for_claims(base, runnable, quick=quick, repeat=repeat)
    doc = tomllib.loads(base.text)
    variants = [Variant(BASE, None, None, base, tuple(planned_base), BASE)]
    seen: dict[Any, str] = {_runs_key(base, planned_base): BASE}
    ids = {BASE}
    for assumption in assumptions:
        shown = [show(v) for v in assumption.values]
        for value, text in zip(assumption.values, shown):
            if shown.count(text) > 1:
                raise UsageError(f"--vary {assumption.key}: {text} given twice")
            changed = apply(doc, assumption.key, value)
            vid = variant_id(assumption.key, value)
            while vid in ids:
                vid += "~"
            ids.add(vid)
            text_toml = variant_text(base, changed, assumption.key, value)
            try:
                scenario = scenarios.load_doc(changed, text_toml, base.path, file_checks=file_checks)
            except ScenarioError as exc:
                raise UsageError(f"--vary {assumption.key}={text}: the variant is refused: {exc.key}: {exc.what}",
                                 hint=exc.hint) from None
            planned = runs_for_claims(scenario, runnable, quick=quick, repeat=repeat)
            key = _runs_key(scenario, planned)
            runs_in = seen.setdefault(key, vid)
            variants.append(Variant(vid, assumption.key, value, scenario, tuple(planned), runs_in))
    return SweepPlan(base, assumptions, tuple(runnable), tuple(variants), quick, repeat, skipped)


def _runs_key(scenario: Scenario, planned: list[PlannedRun]) -> str:
    """What decides a variant's results: its scenario (all but the text it was read from)
    and its runs. Two variants with the same key would make the same runs."""
    same = dataclasses.replace(scenario, text="")
    return repr((same, planned))


# ---------------------------------------------------------------------- the sweep directory


def plan_doc(sweep: SweepPlan, *, runner: str, jobs: int, command_line: list[str]) -> dict:
    """plan.json: enough to continue the sweep (--resume) and to report it."""
    return {
        "format": FORMAT,
        "scenario": sweep.base.id,
        "title": sweep.base.title,
        "kind": sweep.base.kind,
        "scenario_file": str(sweep.base.path),
        "scenario_copy": SCENARIO_COPY,
        "runner": runner,
        "quick": sweep.quick,
        "repeat": sweep.repeat,
        "jobs": jobs,
        "claims": [c.id for c in sweep.claims],
        "skipped_claims": list(sweep.skipped),
        "assumptions": [{"key": a.key, "label": a.label, "reason": a.reason,
                         "values": [show(v) for v in a.values],
                         "values_toml": tomli_w.dumps({"values": list(a.values)}),
                         "base": [None if v is None else show(v)
                                  for v in base_values(tomllib.loads(sweep.base.text), a.key)]}
                        for a in sweep.assumptions],
        "variants": [{"id": v.id, "key": v.key, "value": None if v.key is None else show(v.value),
                      "runs_in": v.runs_in, "planned_runs": [p.run_id for p in v.planned]}
                     for v in sweep.variants],
        "command_line": command_line,
        "git": runmod.git_revision(),
    }


def assumptions_of(doc: dict) -> tuple[Assumption, ...]:
    """plan.json's assumptions, their values exact (read back from TOML)."""
    return tuple(Assumption(a["key"], tuple(tomllib.loads(a["values_toml"])["values"]), a.get("label", ""),
                            a.get("reason", "")) for a in doc["assumptions"])


def read_plan(out: Path) -> dict:
    """plan.json of sweep directory `out`, read without following links."""
    try:
        doc = json.loads(read_regular(Path(out) / PLAN_FILE))
    except (OSError, ValueError):
        raise UsageError(f"{out} is not a sweep directory (no readable {PLAN_FILE})",
                         hint="give the directory `raidlab sweep` printed") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise UsageError(f"{Path(out) / PLAN_FILE}: not a plan this raidlab reads (format {doc.get('format')!r})")
    return doc


def sweep_dir(root: Path, scenario: Scenario) -> Path:
    """A new <root>/sweeps/<scenario>/<time>/ (a second one in the same second gets -2, ...)."""
    return new_stamped_dir(root / "sweeps" / scenario.id, "--results")


def prepare(sweep: SweepPlan, out: Path | None, results_root: Path, *, runner: str, jobs: int,
            command_line: list[str]) -> Path:
    """Make the sweep's directory (`out`, or a new one under `results_root`) and write its
    plan and the base scenario's copy. An `out` that already holds a sweep is refused."""
    if out is None:
        out = sweep_dir(results_root, sweep.base)
    else:
        output_dir(out, "--out")
        if os.path.lexists(Path(out) / PLAN_FILE):
            raise UsageError(f"--out {out} already holds a sweep", hint=f"continue it with --resume {out}")
        make_dirs(out, "--out")
    write_whole(out / SCENARIO_COPY, lambda partial: partial.write_text(sweep.base.text))
    _write_plan(out, {**plan_doc(sweep, runner=runner, jobs=jobs, command_line=command_line),
                      **_state("running")})
    return out


def _state(status: str) -> dict:
    """Who runs the sweep, in the fields raidlab.run.manifest_status reads: a "running" plan
    whose process is gone was killed, and may be resumed."""
    pid = os.getpid()
    return {"status": status, "pid": pid, "pid_start_time": process_start_time(pid), "boot_id": boot_id(),
            "updated": dt.datetime.now().isoformat(timespec="seconds")}


def _write_plan(out: Path, doc: dict) -> None:
    text = json.dumps(doc, indent=2, default=str)
    write_whole(out / PLAN_FILE, lambda partial: partial.write_text(text))


def resume(out: Path) -> tuple[SweepPlan, dict]:
    """The plan of the sweep in `out` (a directory of the caller's), rebuilt from its base
    copy and its assumptions exactly as it was made; refused while another process runs it."""
    owned_dir(out, "--resume")
    doc = read_plan(out)
    if runmod.manifest_status(doc).startswith("running"):
        raise UsageError(f"the sweep in {out} is still going (pid {doc.get('pid')})", hint="let it finish, or stop it")
    try:
        text = read_regular(out / SCENARIO_COPY).decode()
    except (OSError, ValueError) as exc:
        raise UsageError(f"{out / SCENARIO_COPY}: {getattr(exc, 'strerror', None) or exc}",
                         hint="a sweep directory keeps the scenario it swept") from None
    try:
        base = scenarios.load_doc(tomllib.loads(text), text, Path(doc["scenario_file"]))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{out / SCENARIO_COPY}: {exc}") from None
    sweep = plan(base, assumptions_of(doc), claims=doc.get("claims", []), quick=bool(doc.get("quick")),
                 repeat=doc.get("repeat"), file_checks=False)
    recorded = [v["id"] for v in doc.get("variants", [])]
    if [v.id for v in sweep.variants] != recorded:
        raise UsageError(f"{out / PLAN_FILE}: its variants are not those its scenario copy and assumptions give",
                         hint="start a new sweep")
    return sweep, doc


# ---------------------------------------------------------------------- execution


@dataclasses.dataclass
class Outcome:
    """How one variant's loop ended."""

    variant: str
    out: Path
    ok: int = 0
    failed: int = 0
    interrupted: bool = False
    kept: bool = False          # finished before (a resumed sweep): not run again
    error: str | None = None    # it could not run (a RaidlabError, e.g. a missing program)
    signum: int | None = None


class SweepProgress:
    """What `execute` tells its caller (the CLI draws it with rich)."""

    def start(self, variants: int, runs: int) -> None: ...

    def variant_started(self, variant: Variant) -> None: ...

    def run_finished(self, variant: str, run_id: str, status: str) -> None: ...

    def variant_finished(self, variant: Variant, outcome: Outcome) -> None: ...


@dataclasses.dataclass
class SweepSummary:
    out: Path
    outcomes: list[Outcome] = dataclasses.field(default_factory=list)
    interrupted: bool = False
    signum: int | None = None

    @property
    def failed(self) -> int:
        return sum(o.failed for o in self.outcomes)

    @property
    def errors(self) -> list[str]:
        return [f"{o.variant}: {o.error}" for o in self.outcomes if o.error]


class _RunEvents(runmod.Progress):
    """run.py's progress of one variant, passed on as (kind, variant, ...) tuples."""

    def __init__(self, variant: str, send):
        self.variant, self.send = variant, send

    def run_finished(self, index: int, run: PlannedRun, doc: dict) -> None:
        self.send(("run", self.variant, run.run_id, doc.get("status", "?")))


def run_variant(out: Path, variant: Variant, *, runner: str, quick: bool, home: str | None,
                command_line: list[str], send=None) -> Outcome:
    """Run (or continue) one variant into `<out>/<variant>/` through raidlab.run (module
    doc). A finished variant is kept as it is."""
    send = send or (lambda event: None)
    target = out / variant.id
    staging = out / STAGING / variant.id
    if not os.path.lexists(target):
        _adopt(staging, target)  # a worker killed outright left it in staging
    try:
        if os.path.lexists(target):
            man = json.loads(read_regular(target / runmod.MANIFEST))
            if man.get("status") == "complete":
                return Outcome(variant.id, target, ok=int(man.get("ok", 0)), failed=int(man.get("failed", 0)),
                               kept=True)
            scenario, man, planned, done = runmod.resume_plan(target)
            send(("start", variant.id, os.getpid()))
            summary = runmod.run_scenario(scenario, planned, runner=man.get("runner", runner),
                                          results_root=out, quick=bool(man.get("quick")), home=home,
                                          progress=_RunEvents(variant.id, send), command_line=command_line,
                                          resume=target)
        else:
            make_dirs(staging, "--out")
            send(("start", variant.id, os.getpid()))
            try:
                summary = runmod.run_scenario(variant.scenario, list(variant.planned), runner=runner,
                                              results_root=staging, quick=quick, home=home,
                                              progress=_RunEvents(variant.id, send), command_line=command_line)
            finally:
                with deferred_signals():
                    _adopt(staging, target)
    except (OSError, ValueError) as exc:
        return Outcome(variant.id, target, error=f"{target}: {getattr(exc, 'strerror', None) or exc}")
    except RaidlabError as exc:
        return Outcome(variant.id, target, error=str(exc))
    error = str(summary.missing_tool) if summary.missing_tool else None
    return Outcome(variant.id, target, ok=summary.ok, failed=summary.failed, interrupted=summary.interrupted,
                   error=error, signum=summary.signum)


def _adopt(staging: Path, target: Path) -> None:
    """Move the results directory run_scenario made under `staging` (<scenario>/<time>/) to
    `target` and remove the emptied staging directories."""
    found = sorted(staging.glob(f"*/*/{runmod.MANIFEST}"))
    if found:
        os.rename(found[-1].parent, target)
    for directory in sorted((p for p in staging.glob("*") if p.is_dir()), reverse=True):
        _rmdir_quiet(directory)
    _rmdir_quiet(staging)
    _rmdir_quiet(staging.parent)


def _rmdir_quiet(path: Path) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass  # not empty (another variant's staging), or gone


def check_jobs(scenario: Scenario, jobs: int) -> None:
    """Only virtual-time variants run at once (module doc)."""
    if jobs > 1 and scenario.kind != "sim":
        raise UsageError(f"--jobs {jobs}: {scenario.path} is a live scenario; its variants run one at a time",
                         hint="live arrays share this host's devices and timing: use --jobs 1")


def execute(sweep: SweepPlan, out: Path, *, runner: str, jobs: int = 1, home: str | None = None,
            progress: SweepProgress | None = None, command_line: list[str] | None = None) -> SweepSummary:
    """Run every variant that makes runs into `out` (prepared by `prepare`, or resumed), in
    `jobs` worker processes for a virtual-time scenario, in this process otherwise; mark
    the plan complete or interrupted."""
    check_jobs(sweep.base, jobs)
    progress = progress or SweepProgress()
    argv = command_line if command_line is not None else sys.argv
    todo = list(sweep.to_run)
    progress.start(len(todo), sum(len(v.planned) for v in todo))
    summary = SweepSummary(out)
    try:
        if jobs <= 1:
            _execute_here(sweep, todo, out, runner, home, progress, argv, summary)
        else:
            _execute_pool(sweep, todo, out, runner, home, progress, argv, summary, jobs)
    finally:
        doc = read_plan(out)
        _write_plan(out, {**doc, **_state("interrupted" if summary.interrupted else "complete"),
                          "variants_done": sorted(o.variant for o in summary.outcomes
                                                  if not o.interrupted and not o.error)})
        _rmdir_quiet(out / STAGING)
    return summary


def _finish(variant: Variant, outcome: Outcome, progress: SweepProgress, summary: SweepSummary) -> None:
    summary.outcomes.append(outcome)
    progress.variant_finished(variant, outcome)
    if outcome.interrupted:
        summary.interrupted = True
        summary.signum = summary.signum or outcome.signum


def _execute_here(sweep, todo, out, runner, home, progress, argv, summary) -> None:
    def send(event):
        if event[0] == "run":
            progress.run_finished(*event[1:])

    for variant in todo:
        progress.variant_started(variant)
        try:
            outcome = run_variant(out, variant, runner=runner, quick=sweep.quick, home=home, command_line=argv,
                                  send=send)
        except KeyboardInterrupt as exc:  # between two runs, outside run.py's own handling
            summary.interrupted, summary.signum = True, getattr(exc, "signum", signal.SIGINT)
            return
        _finish(variant, outcome, progress, summary)
        if summary.interrupted:
            return


_events = None  # a worker's queue to its parent (set by _worker_init)
_stopping = None  # set by the parent when the sweep stops: a variant queued already is not begun


def _worker_init(events, stopping) -> None:
    """A worker ignores Ctrl-C (it starts so, and stays so): the terminal sends it to the
    whole process group, and a worker between two tasks would die of it and break the pool.
    Its parent stops it with SIGTERM, which run.py turns into an orderly interruption."""
    global _events, _stopping
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _events, _stopping = events, stopping


def _worker_run(out, variant, runner, quick, home, argv) -> Outcome:
    if _stopping.is_set():  # handed to this worker before the sweep stopped: left for --resume
        return Outcome(variant.id, out / variant.id, interrupted=True, signum=signal.SIGTERM)
    try:
        return run_variant(out, variant, runner=runner, quick=quick, home=home, command_line=argv, send=_events.put)
    finally:
        _events.put(("end", variant.id))


def _execute_pool(sweep, todo, out, runner, home, progress, argv, summary, jobs) -> None:
    context = multiprocessing.get_context("spawn")
    events, stopping = context.Queue(), context.Event()
    busy: dict[str, int] = {}  # variant -> the worker pid running it

    def drain() -> None:
        while True:
            try:
                event = events.get_nowait()
            except queue_module.Empty:
                return
            if event[0] == "start":
                busy[event[1]] = event[2]
                progress.variant_started(sweep.variant(event[1]))
            elif event[0] == "end":
                busy.pop(event[1], None)
            elif event[0] == "run":
                progress.run_finished(*event[1:])

    def stop(pending: set) -> None:
        """Cancel what has not started, SIGTERM the workers running a variant (those this
        sweep started, by their ids) and collect how their loops ended."""
        stopping.set()
        for future in pending:
            future.cancel()
        drain()
        for pid in busy.values():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        running = [f for f in pending if not f.cancelled()]
        with deferred_signals():
            for future in concurrent.futures.as_completed(running):
                try:
                    _finish(futures[future], future.result(), progress, summary)
                except concurrent.futures.process.BrokenProcessPool:
                    continue  # stopped before its loop began: nothing of it to keep
        drain()

    # The workers are started (at submit) with Ctrl-C ignored, which a new process inherits
    # and Python keeps: one still importing when it comes would otherwise die of it.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        pool = concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context,
                                                      initializer=_worker_init, initargs=(events, stopping))
        futures = {pool.submit(_worker_run, out, v, runner, sweep.quick, home, argv): v for v in todo}
    finally:
        signal.signal(signal.SIGINT, previous)
    pending = set(futures)
    try:
        while pending:
            done, pending = concurrent.futures.wait(pending, timeout=0.2,
                                                    return_when=concurrent.futures.FIRST_COMPLETED)
            drain()
            for future in done:
                _finish(futures[future], future.result(), progress, summary)
            if summary.interrupted:  # a worker was stopped (a SIGTERM to it alone): stop the rest too
                stop(pending)
                return
    except KeyboardInterrupt as exc:
        summary.interrupted = True
        summary.signum = summary.signum or getattr(exc, "signum", signal.SIGINT)
        stop(pending)
    except BaseException:  # a bug in a worker: stop the others before it propagates
        stop(pending)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        events.close()
