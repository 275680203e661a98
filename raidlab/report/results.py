"""Read a results directory and reduce its runs to per-(architecture, case, metric) statistics.

Why the scenario copy is read from the results directory: a report must describe what was
run, not what the scenario file says today (it may have been edited since). The copy is
loaded without registry look-ups, so a report can be drawn on a machine where a family that
ran then is not importable now. A directory whose runs or manifest belong to a different
scenario than the one asked for is refused.

A results directory may be another user's (a student's, handed in): it is only read, and its
files are read as raidlab wrote them (raidlab.outputs.read_regular): a link at the name of
the manifest, the scenario copy or a run file is refused, not followed, as are a FIFO, a
device or an outsized file there.

Statistics are plain (pure functions): mean, sample standard deviation, min, max, n over the
repetitions whose status is "ok"; failed runs are counted, never averaged in as zeros.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from pathlib import Path
from typing import Any

from raidlab import scenarios
from raidlab.errors import UsageError
from raidlab.outputs import PARTIAL, read_regular
from raidlab.run import MANIFEST, RUNS_DIR, SCENARIO_COPY
from raidlab.scenarios import Scenario, pattern_x


@dataclasses.dataclass(frozen=True)
class Stat:
    n: int
    mean: float
    sd: float | None  # sample standard deviation; None for a single value, which has none
    min: float
    max: float
    unit: str

    @classmethod
    def of(cls, values: list[float], unit: str = "") -> "Stat":
        if not values:
            raise ValueError("no values")
        sd = statistics.stdev(values) if len(values) > 1 else None
        return cls(len(values), statistics.fmean(values), sd, min(values), max(values), unit)


@dataclasses.dataclass
class Results:
    path: Path
    scenario: Scenario
    manifest: dict[str, Any]
    runs: list[dict[str, Any]]
    sources: tuple["Results", ...] = ()   # combined: each directory read, with its own manifest
    left_out: tuple[str, ...] = ()        # run files not used (`raidlab report --leave-out`)

    @property
    def ok_runs(self) -> list[dict]:
        return [r for r in self.runs if r.get("status") == "ok"]

    @property
    def failed_runs(self) -> list[dict]:
        return [r for r in self.runs if r.get("status") != "ok"]


def find_results_dir(path: Path) -> Path:
    """RESULTS may be results/<scenario>/<time>/ or results/<scenario>/ (the newest is used)."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        return path
    if path.is_dir():
        candidates = sorted(p for p in path.iterdir() if (p / MANIFEST).is_file())
        if candidates:
            return candidates[-1]
    raise UsageError(f"{path} is not a results directory (no {MANIFEST})",
                     hint="give results/<scenario>/<time>/ as written by `raidlab run`")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(read_regular(path))
    except ValueError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: not a JSON object")
    return doc


def load_results(path: Path, *, scenario_file: Path | None = None) -> Results:
    out = find_results_dir(path)
    manifest_path = out / MANIFEST
    manifest = _read_json(manifest_path)
    recorded_id = manifest.get("scenario")
    copy = out / SCENARIO_COPY
    if not copy.is_file():
        raise UsageError(f"{out}: no {SCENARIO_COPY} (the scenario this directory was run from)",
                         hint="results directories are written by `raidlab run`")
    try:
        copy_text = read_regular(copy).decode()
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {copy}: {getattr(exc, 'strerror', None) or exc}") from None
    scenario = scenarios.loads(copy_text, copy, check_references=False)
    if scenario.id != recorded_id:
        raise UsageError(f"{manifest_path}: scenario: {recorded_id!r} does not match its {SCENARIO_COPY} "
                         f"({scenario.id!r})")
    if scenario_file is not None:
        asked = scenarios.load(scenario_file, check_references=False)
        if asked.id != recorded_id:
            raise UsageError(f"{out} holds results of scenario {recorded_id!r}, not {asked.id!r} "
                             f"({scenario_file}: scenario.id)",
                             hint="report it with the matching scenario, or omit --scenario")
        scenario = asked
    labels = {a.label for a in scenario.archs}
    cases = {c.name for c in scenario.cases}
    runs = []
    for run_file in sorted((out / RUNS_DIR).glob("*.json")):
        if PARTIAL in run_file.name:
            continue  # a file being written, or left by a killed writer: not a run's record
        doc = _read_json(run_file)
        if doc.get("arch") not in labels or doc.get("case") not in cases:
            raise UsageError(f"{run_file}: arch {doc.get('arch')!r} / case {doc.get('case')!r} is not in "
                             f"scenario {scenario.id!r}", hint="this run file comes from another scenario")
        doc["_file"] = str(run_file)
        runs.append(doc)
    return Results(out, scenario, manifest, runs)


def load_combined(paths: list[Path], *, scenario_file: Path | None = None) -> Results:
    """Several results directories of one scenario as one set of runs (e.g. Fig. 4's write
    ratios run on different days): repetitions of the same architecture and case are pooled.
    Refused: directories of different scenarios, runners or sizes (quick against full), the
    same directory twice, or a run whose architecture or case the scenario used does not
    have. The scenario is --scenario, else the copy kept by the newest directory."""
    if len(paths) == 1:
        return load_results(paths[0], scenario_file=scenario_file)
    parts = [load_results(p, scenario_file=scenario_file) for p in paths]
    seen: dict[Path, Path] = {}
    for part in parts:
        key = part.path.resolve()
        if key in seen:
            raise UsageError(f"{part.path}: given twice (as {seen[key]})")
        seen[key] = part.path
    first = parts[0]
    for part in parts[1:]:
        for what, key in (("scenario", "scenario"), ("runner", "runner"), ("size", "quick")):
            mine, theirs = (_manifest_value(r.manifest, key) for r in (part, first))
            if mine != theirs:
                raise UsageError(f"{part.path / MANIFEST}: {key}: {mine!r} but {first.path} has "
                                 f"{theirs!r}; one report combines runs of one {what}")
    scenario = first.scenario if scenario_file else \
        max(parts, key=lambda r: str(r.manifest.get("started") or "")).scenario
    labels = {a.label for a in scenario.archs}
    cases = {c.name for c in scenario.cases}
    runs = []
    for part in parts:
        for doc in part.runs:
            if doc.get("arch") not in labels or doc.get("case") not in cases:
                raise UsageError(f"{doc['_file']}: arch {doc.get('arch')!r} / case "
                                 f"{doc.get('case')!r} is not in the scenario copy used "
                                 f"({scenario.path})", hint="give the scenario with --scenario")
            runs.append(doc)
    planned = list(dict.fromkeys(r for part in parts for r in part.manifest.get("planned_runs", [])))
    manifest = {"scenario": scenario.id, "runner": first.manifest.get("runner"),
                "quick": first.manifest.get("quick"), "planned_runs": planned}
    return Results(Path(os.path.commonpath([p.path.resolve() for p in parts])), scenario,
                   manifest, runs, tuple(parts))


def leave_out(results: Results, files: list[Path]) -> Results:
    """`results` without the runs of these run files (e.g. a repetition made before an
    engine change, when a later directory has the same runs again). A file that is not one
    of the runs read is refused, so a typo never leaves everything in silently."""
    if not files:
        return results
    wanted = {Path(f).resolve(): Path(f) for f in files}
    have = {Path(r["_file"]).resolve() for r in results.runs}
    for key, given in wanted.items():
        if key not in have:
            raise UsageError(f"--leave-out {given}: not a run file of the RESULTS given",
                             hint="name a file under RESULTS/runs/")
    kept = [r for r in results.runs if Path(r["_file"]).resolve() not in wanted]
    return dataclasses.replace(results, runs=kept,
                               left_out=tuple(str(f) for f in wanted.values()))


def _manifest_value(manifest: dict, key: str) -> Any:
    value = manifest.get(key)
    return ("quick" if value else "full") if key == "quick" else value


def metric_value(doc: dict, metric: str) -> tuple[float, str] | None:
    entry = doc.get("metrics", {}).get(metric)
    if isinstance(entry, dict) and isinstance(entry.get("value"), (int, float)) and not isinstance(entry["value"], bool):
        value = float(entry["value"])
        return (value, str(entry.get("unit", ""))) if math.isfinite(value) else None
    if isinstance(entry, (int, float)) and not isinstance(entry, bool):
        return float(entry), ""
    return None


def aggregate(runs: list[dict]) -> dict[tuple[str, str, str], Stat]:
    """(arch label, case, metric) -> Stat over the ok runs (pure)."""
    values: dict[tuple[str, str, str], list[float]] = {}
    units: dict[tuple[str, str, str], str] = {}
    for doc in runs:
        if doc.get("status") != "ok":
            continue
        for metric in doc.get("metrics", {}):
            got = metric_value(doc, metric)
            if got is None:
                continue
            key = (doc["arch"], doc["case"], metric)
            values.setdefault(key, []).append(got[0])
            units[key] = got[1]
    return {key: Stat.of(v, units[key]) for key, v in values.items()}


def metrics_of(scenario: Scenario, stats: dict) -> list[str]:
    """Metrics the report shows: [report].metrics, else those the paper and claims name,
    else every metric measured (in first-seen order)."""
    chosen = list(scenario.report.metrics)
    named = [p.metric for p in scenario.paper_values] + [c.metric for c in scenario.claims]
    for metric in named:  # claims' and paper's metrics always get their table
        if not any(metric == m or ("{x}" in m and pattern_x(m, metric) is not None) for m in chosen):
            chosen.append(metric)
    return list(dict.fromkeys(chosen)) or list(dict.fromkeys(key[2] for key in stats))
