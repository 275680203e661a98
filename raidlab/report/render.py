"""The report document: one list of blocks written out as Markdown and/or HTML.

Why blocks: the two formats must say the same thing, so the content is built once (headings,
paragraphs, tables, images, the verdict banner) and each writer only renders it. Every
number in the report is read from the run files of the results directory; the paper's
numbers come from the scenario copy kept beside them and are always labelled as the paper's.

Why this order: a reader opens a report to learn whether the paper's claims hold here, so
the verdicts come first. The banner counts them (holds / does not hold / not judged / not
measured) in the first screen; beside it stand the caveats that bound them (a quick size,
a machine whose speed changed between runs, runs that failed, the hand-written NOTES.md);
then the claims, each verdict saying on which side of its band a failing value fell. The
measurements follow, a figure above each table; what the runs cost and the provenance
(runner, kernel, commits, the scenario copy and every run file, linked) close the report.

Numbers are printed to what was measured: a mean to three significant digits (whole units
from 100 up), its spread only where the spread shows at that precision (a sample standard
deviation of 6.67e-14 beside 2.92 is float noise, not a measurement), and a table keeps
only the columns some row fills; a column every row fills alike is said once above it.
"""

from __future__ import annotations

import dataclasses
import html
import math
import os
import re
from pathlib import Path
from typing import Any

from raidlab.errors import UsageError
from raidlab.outputs import make_dirs, output_dir, regular_or_absent, remove_partials, write_whole
from raidlab.report import claims as claimsmod
from raidlab.report import control as controlmod
from raidlab.report import figures, labels, timing
from raidlab.report.results import Results, Stat, aggregate, find_results_dir, leave_out, load_combined, metrics_of
from raidlab.run import RUNS_DIR, SCENARIO_COPY, manifest_status
from raidlab.scenarios import paper_citation, pattern_x

FORMATS = ("md", "html")
NOTES = "NOTES.md"
LONG_TABLE = 24  # a metric table of more rows than this is folded: one row per case, one column per arch
MARKS = {claimsmod.HOLDS: "✓", claimsmod.FAILS: "✗", claimsmod.NOT_JUDGED: "–", claimsmod.NOT_MEASURED: "?",
         claimsmod.CALIBRATION: "≡"}
CLASSES = {claimsmod.HOLDS: "holds", claimsmod.FAILS: "fails", claimsmod.NOT_JUDGED: "not-judged",
           claimsmod.NOT_MEASURED: "not-measured", claimsmod.CALIBRATION: "calibration"}


@dataclasses.dataclass(frozen=True)
class Mark:
    """A table cell carrying a verdict: marked in Markdown by a sign, in HTML by a class."""

    text: str
    verdict: str

    def __str__(self) -> str:
        return f"{MARKS.get(self.verdict, '')} {self.text}".strip()


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def _precision(x: float) -> float:
    """The step of the last digit _fmt prints for x."""
    if x == 0:
        return 0.0
    if abs(x) >= 100:
        return 1.0
    return 10.0 ** (math.floor(math.log10(abs(float(f"{x:.3g}")))) - 2)


def _spread_shows(stat: Stat) -> bool:
    """Whether the repetitions differ at the precision the mean is printed with."""
    if stat.sd is None:
        return False
    step = _precision(stat.mean)
    return stat.sd >= step / 2 if step else stat.sd > 0


def _fmt_sd(sd: float, mean: float) -> str:
    """A spread to two significant digits, never finer than the mean's last digit."""
    step = _precision(mean)
    quantum = 10.0 ** (math.floor(math.log10(sd)) - 1)
    if step:
        quantum = max(quantum, step)
    shown = math.floor(sd / quantum + 0.5) * quantum
    decimals = max(0, -math.floor(math.log10(quantum) + 1e-9))
    return f"{shown:,.{decimals}f}"


def _stat_text(stat: Stat) -> str:
    """`150 ± 20 (n=3, 137..172)`; `0.681 (n=3)` when the spread does not show; `(n=1)` alone."""
    if not _spread_shows(stat):
        return f"{_fmt(stat.mean)} (n={stat.n})"
    return f"{_fmt(stat.mean)} ± {_fmt_sd(stat.sd, stat.mean)} (n={stat.n}, {_fmt(stat.min)}..{_fmt(stat.max)})"


def _link(text: str, target: Path, base: Path) -> str:
    return f"[{text}]({os.path.relpath(target, base)})"


def _file_here(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _missing_runs(results: Results) -> list[str]:
    """The planned runs without a result file. Each directory is checked against its own
    plan by the run file's path (run ids repeat across the directories of a combined
    report: one's `raid5--medium--r1` is not another's), and named with it there. A run
    left out with --leave-out has a result file and is not missing."""
    have = {Path(d["_file"]).resolve() for d in results.runs} | {Path(f).resolve() for f in results.left_out}
    missing = []
    for part in results.sources or (results,):
        prefix = f"{part.path.name}/" if results.sources else ""
        missing += [f"{prefix}{r}" for r in part.manifest.get("planned_runs", [])
                    if (part.path / RUNS_DIR / f"{r}.json").resolve() not in have]
    return missing


def _notes(results: Results, out: Path) -> list[Path]:
    """The hand-written NOTES.md beside the report and in each results directory read."""
    places = [out, *(part.path for part in results.sources or (results,))]
    return [p / NOTES for p in dict.fromkeys(places) if _file_here(p / NOTES)]


def build_blocks(results: Results, figure_dir: Path) -> list[tuple[str, Any]]:
    scn, man = results.scenario, results.manifest
    out = figure_dir.parent
    quick = bool(man.get("quick"))
    name = labels.arch_namer(scn)
    stats = aggregate(results.runs)
    blocks: list[tuple[str, Any]] = [("h1", f"{scn.title}")]

    planned_cases = _planned_cases(man)
    planned = man.get("planned_runs")
    planned_pairs = {tuple(r.split("--")[:2]) for r in planned if r.count("--") == 2} if planned else None
    verdicts = claim_verdicts(results, stats)
    control_rows: list[controlmod.ControlRow] = []
    notes: dict[str, list[str]] = {}  # claim id -> its runner-biased notes
    if scn.control is not None:
        control_metrics = [c for m in metrics_of(scn, stats) for c in _concrete(m, stats, scn)]
        control_rows = controlmod.evaluate(scn.control, stats, [c.name for c in scn.cases], control_metrics,
                                           planned_cases)
        notes = {c.id: controlmod.claim_notes(c, scn.control, scn, control_rows, list(c.cases)) for c in scn.claims}

    blocks.append(("banner", _banner(verdicts, notes)))
    caveats = _caveats(results, out, quick, notes)
    if caveats:
        blocks.append(("caveats", caveats))
    blocks.append(("p", f"Scenario `{scn.id}`; {paper_citation(scn.paper)}, {scn.source or '-'}. "
                        + (scn.description or "")))

    if verdicts:
        blocks.append(("h2", "Claims"))
        rows = [[v.claim.id, Mark("; ".join([v.text, *notes.get(v.claim.id, [])]), v.verdict), v.measured,
                 f"{v.claim.metric} in {', '.join(v.claim.cases)}: {claimsmod.band(v.claim, name)}",
                 v.claim.text + (f" ({v.claim.source})" if v.claim.source else "")] for v in verdicts]
        blocks.append(("table", (["claim", "verdict", "measured", "check", "paper says"], rows)))
    if scn.control is not None:
        blocks += _control_blocks(scn, control_rows)

    metric_blocks = []
    for metric in metrics_of(scn, stats):
        unit = next((s.unit for (_l, _c, m), s in stats.items()
                     if (m == metric or ("{x}" in metric and pattern_x(metric, m) is not None)) and s.unit), "")
        metric_blocks.append(("h2", f"{labels.axis_label(metric, unit)}: `{metric}`, {scn.better(metric)} is better"
                                    + (" (quick size)" if quick else "")))
        fig = figures.draw(results, stats, metric, figure_dir)
        if fig is not None:
            metric_blocks.append(("img", (fig, f"{scn.source or scn.id}: {labels.metric_words(metric)}")))
        rows = []
        for concrete in _concrete(metric, stats, scn):
            for case in scn.cases:
                for arch in scn.archs:
                    rows += _row(scn, stats, concrete, case.name, arch.label,
                                 planned_pairs is None or (arch.label, case.name) in planned_pairs, quick)
        if rows:
            metric_blocks += _metric_table(rows, quick, scn)
        else:
            metric_blocks.append(("p", f"No run reported {metric}."))
    if metric_blocks:
        blocks.append(("p", "Our values below are means over the repetitions that succeeded (n), with the "
                            "sample standard deviation and the min..max range where the repetitions differ "
                            "at the precision printed; the paper's values are quoted from the scenario file "
                            "(its `note` says where each comes from)."
                            + (" At a quick size the paper's values are shown for reference only, at the "
                               "paper's own size, and not drawn in the figures." if quick else "")))
        blocks += metric_blocks

    _table_section(blocks, "Where the time went", timing.TIME_COLUMNS,
                   _named(timing.time_rows(results.runs, scn), name, 1),
                   "Per run, means over the repetitions that succeeded: the wall time of the run "
                   "(array made, file system made, workload, destroyed), and what the workload "
                   "itself cost (the array's account after the run minus before the workload): CPU "
                   "seconds of the lab VM's emulator (the guest, under TCG) and of the array's "
                   "daemon on the host (the engine; md's arrays run in the guest), and the drives' "
                   "busy seconds (the emulated mechanisms' service time), with the seek and the "
                   "rotational wait of all drives apart. The platter turns with the clock, so the "
                   "same requests issued at other moments wait other rotations: a rotation total "
                   "that moves while the seek total stays says the drives were met at other "
                   "angles, not sent elsewhere.")
    speed = timing.speed_rows(results.runs)
    timed = sorted((r for r in results.runs if r.get("status") == "ok"), key=lambda r: str(r.get("started")))
    for row, run in zip(speed, timed):  # the order speed_rows gives them
        row[0] = _link(row[0], Path(run["_file"]), out)
    _table_section(blocks, "Machine speed", timing.SPEED_COLUMNS, speed,
                   "Each run timed two fixed loops just before its workload (raidlab.runners.speed): "
                   "a shell loop where the workload runs (in the lab VM's guest, under TCG) and a "
                   "Python loop on the host, in µs per iteration (lower is faster); the share of "
                   "the host's CPU time the hypervisor gave to others during the workload (steal); "
                   "and the lab VM's boot time. A benchmark bound by the guest's CPU slows down with "
                   "them; the emulated drives do not.")
    _table_section(blocks, "Cache counters", timing.CACHE_COLUMNS, _named(timing.cache_rows(results.runs, scn), name, 1),
                   "VC-RAID's and DCD's own account of the workload (after minus before): block hits "
                   "on a cache disk and the cache-disk reads they took (runs consecutive in the log "
                   "are read in one I/O), the destages of the log to the array and what started them "
                   "(the idle periods found, the background batches begun once the log reached its "
                   "high watermark, each of one or more destages, and the destages forced in the "
                   "write path for want of room) with the share forced, and what the cold start "
                   "drained home after mkfs, before the workload.")

    blocks.append(("h2", "Architectures"))
    arch_head = ["label", "shown as", "arch", "disks", "model", "disk size", "chunk", "drives and bus", "options"]
    arch_rows = [[a.label, name(a.label) if name(a.label) != a.label else "", a.arch, str(a.disks),
                  a.disk_model.replace(",", ", "), f"{a.disk_size >> 20} MiB", f"{a.chunk >> 10} KiB", _placement(a),
                  ", ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in a.options.items())]
                 for a in scn.archs]
    blocks.append(("table", _drop_empty_columns(arch_head, arch_rows)))
    if results.failed_runs:
        blocks.append(("h2", "Failed runs"))
        blocks.append(("table", (["run", "error"],
                                 [[_link(Path(r["_file"]).stem, Path(r["_file"]), out), str(r.get("error"))[:400]]
                                  for r in results.failed_runs])))
    missing = _missing_runs(results)
    if missing:
        blocks.append(("p", f"{len(missing)} planned runs have no result (interrupted before they ran): "
                            + ", ".join(missing[:20]) + (" ..." if len(missing) > 20 else "")))
    blocks += _provenance(results, out)
    return blocks


def _planned_cases(manifest: dict) -> set[str] | None:
    planned = manifest.get("planned_runs")
    return {r.split("--")[1] for r in planned if r.count("--") == 2} if planned else None


def claim_verdicts(results: Results, stats: dict | None = None) -> list[claimsmod.Verdict]:
    """The verdict on each of the scenario's claims, as the report gives them."""
    stats = aggregate(results.runs) if stats is None else stats
    quick = bool(results.manifest.get("quick"))
    name = labels.arch_namer(results.scenario)
    planned_cases = _planned_cases(results.manifest)
    calibration = set((results.scenario.host or {}).get("calibrated_on", ()))
    return [claimsmod.evaluate(c, stats, planned_cases, quick=quick, name=name, calibration=calibration)
            for c in results.scenario.claims]


def _repetitions(results: Results) -> int | None:
    """The most runs one architecture and case was planned, over every directory read."""
    planned: dict[str, int] = {}
    for part in results.sources or (results,):
        for run_id in part.manifest.get("planned_runs") or []:
            key = run_id.rsplit("--r", 1)[0]
            planned[key] = planned.get(key, 0) + 1
    return max(planned.values()) if planned else None


def _banner(verdicts: list[claimsmod.Verdict], notes: dict[str, list[str]]) -> dict[str, Any]:
    counts = {k: sum(1 for v in verdicts if v.verdict == k) for k in claimsmod.VERDICTS}
    return {"counts": counts, "total": len(verdicts),
            "biased": sum(1 for v in verdicts if notes.get(v.claim.id))}


def _banner_text(banner: dict[str, Any]) -> str:
    if not banner["total"]:
        return "No claims: this scenario records measurements only."
    return f"Verdicts on {banner['total']} claims:"


def _caveats(results: Results, out: Path, quick: bool, notes: dict[str, list[str]]) -> list[str]:
    """What bounds the verdicts, said beside them."""
    found = []
    if quick:
        found.append("**Quick size** (`raidlab run --quick`): these runs used the scenario's small sizes, "
                     "so the claims, written for the paper's sizes, are not judged; the numbers show what "
                     "was measured at this size, not the paper's result.")
    made = _repetitions(results)
    if not quick and made and made < results.scenario.repeat:
        found.append(f"**{made} of the scenario's {results.scenario.repeat} repetitions** (`raidlab run --repeat "
                     f"{made}`): the verdicts rest on {made} run{'s' if made > 1 else ''} of each case; in a "
                     f"replay each repetition is another trace seed, which can move a verdict near its band's edge.")
    biased = [cid for cid, n in notes.items() if n]
    if biased:
        found.append(f"**Runner-biased**: {len(biased)} of the verdicts rest on a runner-biased comparison "
                     f"(see the runner-fairness control below: the engine and md ran the same array "
                     f"differently there).")
    found += [f"**Machine speed**: {flag}" for flag in timing.speed_flags(results.runs)]
    found += [f"**Durability world**: {line}" for line in _worlds(results)]
    mixed = _mixed_hosts(results)
    if mixed:
        found.append("**Hosts**: " + "; ".join(f"claim `{cid}` compares runs made on {', '.join(hosts)}"
                                              for cid, hosts in mixed)
                     + " (`raidlab run --scheduler`: each run file's `worker` names its machine, its kernel and "
                       "its speed probe); a difference between those machines is in the comparison.")
    if results.failed_runs:
        found.append(f"**{len(results.failed_runs)} runs failed** (see Failed runs below); they are "
                     f"counted apart, never averaged in.")
    if results.left_out:
        found.append(f"{len(results.left_out)} run files left out of this report (`--leave-out`), named "
                     f"under Provenance.")
    written = _notes(results, out)
    if written:
        found.append("What ran beside these runs and the counters that explain them: "
                     + ", ".join(_link(_short(p, out), p, out) for p in written) + ".")
    return found


# Before run files recorded a drive-level flush setting, every drive honoured the host's flushes.
UNRECORDED = "; not recorded: made before run files kept the setting"


def _world(run: dict[str, Any]) -> tuple[str, bool] | None:
    """The run's drives' flush setting and whether its run file recorded it, from its array
    spec; None where the run kept no spec (virtual-time runs)."""
    spec = (run.get("array_status") or {}).get("spec")
    if not isinstance(spec, dict):
        return None
    return str(spec.get("flushes", "honoured")), "flushes" in spec


def _worlds(results: Results) -> list[str]:
    """Each architecture whose runs' drives did not all live in the durability world the
    scenario sets for it (its `flushes`): the runs are pooled under one label, so the report
    says how many ran in which world, from each run file's array spec."""
    out = []
    for entry in results.scenario.archs:
        cases: dict[tuple[str, bool], list[str]] = {}
        for run in results.ok_runs:
            world = _world(run) if run.get("arch") == entry.label else None
            if world is not None:
                cases.setdefault(world, []).append(str(run.get("case")))
        if cases and {flushes for flushes, _ in cases} != {entry.flushes}:
            said = ", ".join(f"{len(runs)} with flushes {flushes} (case {', '.join(sorted(set(runs)))}"
                             f"{'' if recorded else UNRECORDED})" for (flushes, recorded), runs in sorted(cases.items()))
            out.append(f"`{entry.label}` is set to flushes {entry.flushes}; its {sum(map(len, cases.values()))} runs here "
                       f"ran {said}. A comparison with it mixes durability worlds where they differ.")
    return out


# A run without a `worker` field ran in `raidlab run`'s own loop, on the machine of its manifest.
HERE = "the machine of raidlab run's own loop"


def _mixed_hosts(results: Results) -> list[tuple[str, list[str]]]:
    """The claims whose runs (the arch and case pairs a claim reads) were made on more than one
    machine, each with those machines' names; none unless some run came from a worker."""
    from raidlab.sweep import claim_runs

    if not any(r.get("worker") for r in results.ok_runs):
        return []
    mixed = []
    for claim in results.scenario.claims:
        pairs = claim_runs(claim)
        hosts = {str((r.get("worker") or {}).get("host") or HERE) for r in results.ok_runs
                 if (r.get("arch"), r.get("case")) in pairs}
        if len(hosts) > 1:
            mixed.append((claim.id, sorted(hosts)))
    return mixed


def _short(path: Path, out: Path) -> str:
    """A file beside the report's directory named from there (`20261127-182304/NOTES.md`)."""
    near = os.path.relpath(path, out.parent)
    return near if not near.startswith("..") else str(path)


def _provenance(results: Results, out: Path) -> list[tuple[str, Any]]:
    """Runner, kernel, commits, times; the scenario copy and every run file, linked."""
    man = results.manifest
    blocks: list[tuple[str, Any]] = [("h2", "Provenance")]
    kernels = sorted({str(r["runner_kernel"]) for r in results.runs if r.get("runner_kernel")})
    runner = f"Runner **{man.get('runner')}**{' (quick size)' if man.get('quick') else ''}"
    counts = (f"{len(results.ok_runs)} runs ok, {len(results.failed_runs)} failed, "
              f"{sum(len(part.manifest.get('planned_runs', [])) for part in results.sources or (results,))} planned.")
    kernel_note = f" Workloads ran on kernel {', '.join(kernels)}." if kernels else ""
    if results.sources:
        blocks.append(("p", f"{runner}; combined from {len(results.sources)} results directories of this "
                            f"scenario (repetitions of one architecture and case are pooled): {counts}"
                            f"{kernel_note}"))
        blocks.append(("table", (["results", "kernel", "raidlab", "git", "started", "finished", "status", "runs"],
                                 [_source_row(part) for part in results.sources])))
    else:
        blocks.append(("p", f"{runner}, kernel {man.get('kernel')}, raidlab {man.get('raidlab')}, "
                            f"git {_git(man)}; started {man.get('started')}, finished {man.get('finished') or '-'}; "
                            f"status **{manifest_status(man)}**: {counts} Results: `{results.path}`.{kernel_note}"))
    for step in man.get("resumed", []):
        before = step.get("previous_git") or {}
        kernel = step.get("previous_kernel")
        kernel_then = f" on host kernel {kernel}" if kernel and kernel != man.get("kernel") else ""
        blocks.append(("p", f"Resumed at {step.get('at')} (`raidlab run --resume`) with git {_git(step)}, after a "
                            f"part that ran with git {_git({'git': before})}{kernel_then} and ended "
                            f"{step.get('previous_status')}; {len(step.get('kept', []))} runs kept from it."))
    if results.left_out:
        blocks.append(("p", "Left out of this report (`--leave-out`): "
                            + ", ".join(_link(str(f), Path(f), out) for f in results.left_out) + "."))
    scenario_path = results.scenario.path
    for part in results.sources or (results,):
        where = f"`{part.path}`: " if results.sources else ""
        copy = part.path / SCENARIO_COPY
        files = sorted((Path(r["_file"]) for r in results.runs if Path(r["_file"]).parent == part.path / RUNS_DIR),
                       key=lambda p: p.name)
        blocks.append(("p", f"{where}the scenario as run, {_link(SCENARIO_COPY, copy, out)}; "
                            f"{len(files)} run files: " + ", ".join(_link(f.stem, f, out) for f in files) + "."))
    if results.sources or scenario_path.resolve() != (results.path / SCENARIO_COPY).resolve():
        blocks.append(("p", f"Scenario read for this report: `{os.path.relpath(scenario_path)}`."))
    return blocks


def _named(rows: list[list[str]], name, column: int) -> list[list[str]]:
    for row in rows:
        row[column] = name(row[column])
    return rows


def _table_section(blocks: list, title: str, columns: list[str], rows: list[list[str]], text: str,
                   flags: list[str] = ()) -> None:
    """A titled table with what it shows and any flags in bold; nothing when there are no rows."""
    if not rows:
        return
    blocks.append(("h2", title))
    blocks.append(("p", text))
    blocks += [("p", f"**{flag}**") for flag in flags]
    blocks.append(("table", _drop_empty_columns(columns, rows)))


def _drop_empty_columns(head: list[str], rows: list[list[Any]]) -> tuple[list[str], list[list[Any]]]:
    keep = [i for i in range(len(head)) if any(str(row[i]).strip() for row in rows)]
    return [head[i] for i in keep], [[row[i] for i in keep] for row in rows]


METRIC_HEAD = ["metric", "case", "arch", "ours: mean ± sd (n, min..max)", "unit", "paper", "ours / paper",
               "paper note"]
WIDE_TABLE = 8  # a folded table has at most this many architecture columns


def _metric_table(rows: list[list[str]], quick: bool, scn) -> list[tuple[str, Any]]:
    """A metric's rows as a table: empty columns dropped, a column every row fills alike
    (the metric, its unit, a paper note) said once above the table, and a long table folded
    as its figure is drawn: one row per case (and group of bars), one column per series.
    Architectures are named as the figure names them."""
    head = list(METRIC_HEAD)
    if quick:
        head[5] = "paper (at its size)"
    rows = [row for row in rows if any(str(c).strip() for c in row[3:])]
    head, rows = _drop_empty_columns(head, rows)
    said = []
    for column in ("metric", "unit", "paper note"):
        if column in head and len(rows) > 1:
            i = head.index(column)
            values = {str(row[i]) for row in rows}
            if len(values) == 1:
                said.append(f"{column}: {values.pop()}" if column != "metric" else f"metric `{rows[0][i]}`")
                head, rows = head[:i] + head[i + 1:], [row[:i] + row[i + 1:] for row in rows]
    out: list[tuple[str, Any]] = [("p", "; ".join(said) + ".")] if said else []
    groups = labels.arch_groups(scn)
    ai = head.index("arch")
    columns = {groups[row[ai]][1] if row[ai] in groups else row[ai] for row in rows}
    if "unit" in head or "metric" in head or (len(rows) <= LONG_TABLE and not groups) or len(columns) > WIDE_TABLE:
        name = labels.arch_namer(scn)
        return out + [("table", (head, [[name(c) if i == ai else c for i, c in enumerate(row)] for row in rows]))]
    return out + [("table", _fold(head, rows, groups, scn.report.x_label or scn.report.x))]


def _fold(head: list[str], rows: list[list[str]], groups: dict[str, tuple[str, str]],
          group_name: str) -> tuple[list[str], list[list[str]]]:
    """case (and group) x series: each cell ours, and the paper's value where it gave one."""
    ci, ai, oi = head.index("case"), head.index("arch"), head.index("ours: mean ± sd (n, min..max)")
    pi = next((i for i, h in enumerate(head) if h.startswith("paper") and h != "paper note"), None)

    def where(row):
        group, series = groups.get(row[ai], ("", row[ai]))
        return (row[ci], group), series

    keys = list(dict.fromkeys(where(row)[0] for row in rows))
    series = list(dict.fromkeys(where(row)[1] for row in rows))
    cells = {where(row): row[oi] + (f"; paper {row[pi]}" if pi is not None and row[pi] else "") for row in rows}
    lead = ["case", group_name] if groups else ["case"]
    return lead + series, [[case, *([group] if groups else []), *(cells.get(((case, group), s), "") for s in series)]
                           for case, group in keys]


def _control_blocks(scn, rows: list[controlmod.ControlRow]) -> list[tuple[str, Any]]:
    """The runner-fairness control: engine raid5 / md raid5 per case and metric."""
    control = scn.control
    engine, md = scn.arch(control.engine), scn.arch(control.md)
    band = controlmod.band_text(control)
    blocks: list[tuple[str, Any]] = [("h2", "Runner-fairness control")]
    blocks.append(("p", f"The engine's `{engine.label}` ({engine.arch}), served as the engine's other "
                        f"architectures are, beside md's `{md.label}` ({md.arch}) on the same drives: the ratio "
                        f"engine / md of their means in each case and metric. Outside {band} the two ways of "
                        f"running an array differ by more than the band there, and each claim comparing "
                        f"`{md.label}`, or an engine architecture with an md one, in that case and metric carries "
                        f"a runner-biased note beside its verdict." + (f" {control.text}" if control.text else "")))
    if not rows:
        blocks.append(("p", "No metric to compare."))
        return blocks

    def mean(stat, planned: bool) -> str:
        if stat is None:
            return "not measured" if planned else "not run (not in this run's plan)"
        return f"{_fmt(stat.mean)} (n={stat.n})"

    blocks.append(("table", (["case", "metric", f"engine mean ({engine.label})", f"md mean ({md.label})",
                              "engine / md", "control"],
                             [[r.case, r.metric, mean(r.engine, r.planned), mean(r.md, r.planned),
                               controlmod.ratio_text(r), r.verdict] for r in rows])))
    counts = {k: sum(1 for r in rows if r.verdict == k)
              for k in (controlmod.OK, controlmod.BIASED, controlmod.NOT_MEASURED)}
    blocks.append(("p", ", ".join(f"{n} {k}" for k, n in counts.items()) + "."))
    return blocks


def _placement(arch) -> str:
    """Where an [[arch]]'s members lie and what they share: partitions of drives, a bus."""
    parts = []
    if getattr(arch, "partitions", None):
        parts.append(f"partitions {arch.partitions}")
    if getattr(arch, "drives", None):
        parts.append(f"{arch.drives} drives")
    if getattr(arch, "bus", None):
        parts.append(f"bus {arch.bus}")
    return ", ".join(parts) or "a drive each"


def _git(man: dict) -> str:
    git = man.get("git", {})
    return str(git.get("revision"))[:12] + (" (uncommitted changes)" if git.get("dirty") else "")


def _parts(values: list[str]) -> str:
    """One manifest field over the parts of a run resumed with `raidlab run --resume`, oldest
    first, a value the next part kept named once ("a, then b")."""
    return ", then ".join(v for i, v in enumerate(values) if i == 0 or v != values[i - 1])


def _source_row(part: Results) -> list[str]:
    man = part.manifest
    steps = man.get("resumed", [])  # each resumption records the kernel and commit of the part before it
    kernels = [str(s["previous_kernel"]) for s in steps if s.get("previous_kernel")] + [str(man.get("kernel"))]
    commits = [_git({"git": s.get("previous_git") or {}}) for s in steps] + [_git(man)]
    return [f"`{part.path}`", _parts(kernels), str(man.get("raidlab")), _parts(commits),
            str(man.get("started")), str(man.get("finished") or "-"), manifest_status(man),
            f"{len(part.ok_runs)} ok, {len(part.failed_runs)} failed, {len(man.get('planned_runs', []))} planned"]


def _concrete(metric: str, stats: dict, scn) -> list[str]:
    """The metric itself, or for a pattern (tps_c{x}) every measured or published match, by x."""
    if "{x}" not in metric:
        return [metric]
    names = {m for (_l, _c, m) in stats} | {p.metric for p in scn.paper_values}
    found = [(pattern_x(metric, n), n) for n in names]
    return [n for x, n in sorted((x, n) for x, n in found if x is not None)]


def _row(scn, stats: dict, metric: str, case: str, label: str, planned: bool = True,
         quick: bool = False) -> list[list[str]]:
    stat = stats.get((label, case, metric))
    paper = next((p for p in scn.paper_values if p.arch == label and p.case == case and p.metric == metric), None)
    if stat is None and paper is None:
        return []
    if stat is None:
        ours = "not measured" if planned else "not run (not in this run's plan)"
    else:
        ours = _stat_text(stat)
    ratio = _fmt(stat.mean / paper.value) if stat and paper and paper.value and not quick else ""
    return [[metric, case, label, ours, labels.unit_text((stat.unit if stat else "") or (paper.unit if paper else "")),
             _fmt(paper.value) if paper else "", ratio, paper.note if paper else ""]]


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list, base: Path) -> str:
    out: list[str] = []
    for kind, value in blocks:
        if kind == "h1":
            out += [f"# {value}", ""]
        elif kind == "h2":
            out += [f"## {value}", ""]
        elif kind == "p":
            out += [value, ""]
        elif kind == "banner":
            counts = " · ".join(f"{MARKS[k]} {n} {k}" for k, n in value["counts"].items()) if value["total"] else ""
            out += [f"> **{_banner_text(value)}** {counts}".rstrip(), ""]
        elif kind == "caveats":
            out += [f"* {c}" for c in value] + [""]
        elif kind == "img":
            path, alt = value
            out += [f"![{alt}]({os.path.relpath(path, base)})", ""]
        elif kind == "table":
            head, rows = value
            out.append("| " + " | ".join(_md_cell(h) for h in head) + " |")
            out.append("|" + "---|" * len(head))
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            out.append("")
    return "\n".join(out)


def _inline(text: Any) -> str:
    """Escape, then the Markdown marks the blocks use: **bold**, `code` and [links](href)."""
    escaped = html.escape(str(text))
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", escaped)
    escaped = re.sub(r"`(.+?)`", r"<code>\1</code>", escaped)
    return re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', escaped)


def _cell(value: Any) -> str:
    if isinstance(value, Mark):
        return (f'<td class="verdict {CLASSES.get(value.verdict, "")}"><span class="mark">'
                f'{MARKS.get(value.verdict, "")}</span> {_inline(value.text)}</td>')
    return f"<td>{_inline(value)}</td>"


STYLE = """
body{font-family:system-ui,sans-serif;line-height:1.4;max-width:64em;margin:0 auto;padding:0 1em 2em;color:#222}
h1{font-size:1.5em;margin:.8em 0 .4em}h2{font-size:1.2em;margin:1.6em 0 .4em}
.banner{border:2px solid #555;border-radius:6px;padding:.6em .9em;margin:.8em 0;background:#f6f6f6}
.banner .total{font-weight:bold;margin:0 0 .3em}
.banner .count{display:inline-block;margin:0 1.2em .2em 0;font-size:1.1em}
.banner .count b{font-size:1.3em}
.holds{color:#176317}.fails{color:#a61b1b}.not-judged{color:#555}.not-measured{color:#8a5a00}
td.verdict{font-weight:bold}td.holds{background:#eaf6ea}td.fails{background:#fbeaea}
td.not-judged{background:#f0f0f0}td.not-measured{background:#fdf4e0}
ul.caveats{margin:.4em 0 1em;padding-left:1.2em}
.scroll{overflow-x:auto;margin:1em 0}
table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:3px 6px;font-size:90%;vertical-align:top}
th{background:#f0f0f0;text-align:left}
figure{margin:1em 0}img{max-width:100%;height:auto}
code{font-size:95%}
"""


def to_html(blocks: list, base: Path) -> str:
    body: list[str] = []
    title = next((v for k, v in blocks if k == "h1"), "raidlab report")
    for kind, value in blocks:
        if kind in ("h1", "h2"):
            body.append(f"<{kind}>{_inline(value)}</{kind}>")
        elif kind == "p":
            body.append(f"<p>{_inline(value)}</p>")
        elif kind == "banner":
            counts = "".join(f'<span class="count {CLASSES[k]}">{MARKS[k]} <b>{n}</b> {html.escape(k)}</span>'
                             for k, n in value["counts"].items()) if value["total"] else ""
            body.append(f'<div class="banner" id="verdicts"><p class="total">{html.escape(_banner_text(value))}</p>'
                        f"{counts}</div>")
        elif kind == "caveats":
            body.append('<ul class="caveats">' + "".join(f"<li>{_inline(c)}</li>" for c in value) + "</ul>")
        elif kind == "img":
            path, alt = value
            body.append(f'<figure><img src="{html.escape(os.path.relpath(path, base))}" alt="{html.escape(alt)}">'
                        f"</figure>")
        elif kind == "table":
            head, rows = value
            cells = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
            trs = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
            body.append(f'<div class="scroll"><table><thead><tr>{cells}</tr></thead><tbody>{trs}</tbody></table></div>')
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")


def write_report(results_path: Path | list[Path], *, formats: tuple[str, ...] = FORMATS,
                 scenario_file: Path | None = None, out_dir: Path | None = None,
                 left_out: list[Path] | None = None) -> list[Path]:
    """Write report.<fmt> (and figures/) into RESULTS/report/ (several RESULTS: into out_dir,
    which is then required), without the runs of the `left_out` run files; return the
    written files."""
    paths = [Path(p) for p in results_path] if isinstance(results_path, list) else [Path(results_path)]
    if len(paths) > 1 and out_dir is None:
        raise UsageError("several RESULTS directories make one combined report: say where it goes "
                         "with --out")
    # The report is written only into a directory of the caller's (raidlab.outputs), checked
    # before anything is read: RESULTS of another user are read, into an --out of the caller's.
    option = "--out" if out_dir else "the report directory (RESULTS/report; choose one with --out)"
    out = output_dir(Path(out_dir) if out_dir else find_results_dir(paths[0]) / "report", option)
    for fmt in formats:
        regular_or_absent(out / f"report.{fmt}", "report")
    output_dir(out / "figures", "report figures")
    results = leave_out(load_combined(paths, scenario_file=scenario_file), left_out or [])
    make_dirs(out, option)
    for directory in (out, out / "figures"):
        if directory.is_dir():
            remove_partials(directory)
    blocks = build_blocks(results, out / "figures")
    written = []
    for fmt in formats:
        text = to_markdown(blocks, out) if fmt == "md" else to_html(blocks, out)
        written.append(write_whole(out / f"report.{fmt}", lambda partial, t=text: partial.write_text(t)))
    return written
