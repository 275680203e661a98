"""The report document: one list of blocks written out as Markdown and/or HTML.

Why blocks: the two formats must say the same thing, so the content is built once (headings,
paragraphs, tables, images) and each writer only renders it. Every number in the report is
read from the run files of the results directory; the paper's numbers come from the
scenario copy kept beside them and are always labelled as the paper's.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

from raidlab.errors import UsageError
from raidlab.outputs import make_dirs, output_dir, regular_or_absent, remove_partials, write_whole
from raidlab.report import claims as claimsmod
from raidlab.report import control as controlmod
from raidlab.report import figures, timing
from raidlab.report.results import Results, aggregate, find_results_dir, leave_out, load_combined, metrics_of
from raidlab.run import RUNS_DIR, manifest_status
from raidlab.scenarios import paper_citation, pattern_x

FORMATS = ("md", "html")


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


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


def build_blocks(results: Results, figure_dir: Path) -> list[tuple[str, Any]]:
    scn, man = results.scenario, results.manifest
    stats = aggregate(results.runs)
    blocks: list[tuple[str, Any]] = [("h1", f"{scn.title}")]
    kernels = sorted({str(r["runner_kernel"]) for r in results.runs if r.get("runner_kernel")})
    blocks.append(("p", f"Scenario `{scn.id}` ({scn.path.name}); {paper_citation(scn.paper)}, {scn.source or '-'}. "
                        + (scn.description or "")))
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
                            + ", ".join(f"`{f}`" for f in results.left_out) + "."))
    blocks.append(("p", "Our values are means over the repetitions that succeeded (n), with the "
                        "sample standard deviation and the min..max range; the paper's values are "
                        "quoted from the scenario file (its `note` says where each comes from)."))

    planned = man.get("planned_runs")
    planned_cases = {r.split("--")[1] for r in planned if r.count("--") == 2} if planned else None
    verdicts = [claimsmod.evaluate(c, stats, planned_cases) for c in scn.claims]
    control_rows: list[controlmod.ControlRow] = []
    notes: dict[str, list[str]] = {}  # claim id -> its runner-biased notes
    if scn.control is not None:
        control_metrics = [c for m in metrics_of(scn, stats) for c in _concrete(m, stats, scn)]
        control_rows = controlmod.evaluate(scn.control, stats, [c.name for c in scn.cases], control_metrics,
                                           planned_cases)
        notes = {c.id: controlmod.claim_notes(c, scn.control, scn, control_rows, list(c.cases)) for c in scn.claims}
    if verdicts:
        blocks.append(("h2", "Claims"))
        rows = [[v.claim.id, v.claim.text + (f" ({v.claim.source})" if v.claim.source else ""),
                 f"{v.claim.metric} in {', '.join(v.claim.cases)}: {claimsmod.band(v.claim)}",
                 "; ".join([v.verdict, *notes.get(v.claim.id, [])]), v.measured] for v in verdicts]
        blocks.append(("table", (["claim", "paper says", "check", "verdict", "measured"], rows)))
        counts = {k: sum(1 for v in verdicts if v.verdict == k)
                  for k in (claimsmod.HOLDS, claimsmod.FAILS, claimsmod.NOT_MEASURED)}
        biased = sum(1 for v in verdicts if notes.get(v.claim.id))
        blocks.append(("p", ", ".join(f"{n} {k}" for k, n in counts.items()) + "."
                            + (f" {biased} of the verdicts rest on a runner-biased comparison (see the "
                               f"runner-fairness control)." if biased else "")))
    if scn.control is not None:
        blocks += _control_blocks(scn, control_rows)

    for metric in metrics_of(scn, stats):
        blocks.append(("h2", f"{metric} ({scn.better(metric)} is better)"
                             + (" - quick size, not comparable with the paper" if man.get("quick") else "")))
        fig = figures.draw(results, stats, metric, figure_dir)
        if fig is not None:
            blocks.append(("img", (fig, f"{scn.source or scn.id}: {metric}")))
        rows = []
        for concrete in _concrete(metric, stats, scn):
            for case in scn.cases:
                for arch in scn.archs:
                    rows += _row(scn, stats, concrete, case.name, arch.label,
                                 planned_cases is None or case.name in planned_cases)
        if rows:
            blocks.append(("table", (["metric", "case", "arch", "ours: mean ± sd (n, min..max)", "unit", "paper",
                                      "ours / paper", "paper note"], rows)))
        else:
            blocks.append(("p", f"No run reported {metric}."))

    _table_section(blocks, "Where the time went", timing.TIME_COLUMNS, timing.time_rows(results.runs, scn),
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
    _table_section(blocks, "Machine speed", timing.SPEED_COLUMNS, timing.speed_rows(results.runs),
                   "Each run timed two fixed loops just before its workload (raidlab.runners.speed): "
                   "a shell loop where the workload runs (in the lab VM's guest, under TCG) and a "
                   "Python loop on the host, in µs per iteration (lower is faster); the share of "
                   "the host's CPU time the hypervisor gave to others during the workload (steal); "
                   "and the lab VM's boot time. A benchmark bound by the guest's CPU slows down with "
                   "them; the emulated drives do not.",
                   flags=timing.speed_flags(results.runs))
    _table_section(blocks, "Cache counters", timing.CACHE_COLUMNS, timing.cache_rows(results.runs, scn),
                   "VC-RAID's and DCD's own account of the workload (after minus before): block hits "
                   "on a cache disk and the cache-disk reads they took (runs consecutive in the log "
                   "are read in one I/O), the destages of the log to the array and what started them "
                   "(the idle periods found, the background batches begun once the log reached its "
                   "high watermark, each of one or more destages, and the destages forced in the "
                   "write path for want of room) with the share forced, and what the cold start "
                   "drained home after mkfs, before the workload.")

    blocks.append(("h2", "Architectures"))
    blocks.append(("table", (["label", "arch", "disks", "model", "disk size", "chunk", "drives and bus", "options"],
                             [[a.label, a.arch, str(a.disks), a.disk_model.replace(",", ", "),
                               f"{a.disk_size >> 20} MiB",
                               f"{a.chunk >> 10} KiB", _placement(a),
                               ", ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in a.options.items())]
                              for a in scn.archs])))
    if results.failed_runs:
        blocks.append(("h2", "Failed runs"))
        blocks.append(("table", (["run", "error"],
                                 [[Path(r["_file"]).stem, str(r.get("error"))[:400]] for r in results.failed_runs])))
    missing = _missing_runs(results)
    if missing:
        blocks.append(("p", f"{len(missing)} planned runs have no result (interrupted before they ran): "
                            + ", ".join(missing[:20]) + (" ..." if len(missing) > 20 else "")))
    return blocks


def _table_section(blocks: list, title: str, columns: list[str], rows: list[list[str]], text: str,
                   flags: list[str] = ()) -> None:
    """A titled table with what it shows and any flags in bold; nothing when there are no rows."""
    if not rows:
        return
    blocks.append(("h2", title))
    blocks.append(("p", text))
    blocks += [("p", f"**{flag}**") for flag in flags]
    blocks.append(("table", (columns, rows)))


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


def _row(scn, stats: dict, metric: str, case: str, label: str, planned: bool = True) -> list[list[str]]:
    stat = stats.get((label, case, metric))
    paper = next((p for p in scn.paper_values if p.arch == label and p.case == case and p.metric == metric), None)
    if stat is None and paper is None:
        return []
    if stat is None:
        ours = "not measured" if planned else "not run (not in this run's plan)"
    elif stat.sd is None:  # a single value: '± 0' would claim there is no spread
        ours = f"{_fmt(stat.mean)} (n=1)"
    else:
        ours = f"{_fmt(stat.mean)} ± {_fmt(stat.sd)} (n={stat.n}, {_fmt(stat.min)}..{_fmt(stat.max)})"
    ratio = _fmt(stat.mean / paper.value) if stat and paper and paper.value else ""
    return [[metric, case, label, ours, (stat.unit if stat else "") or (paper.unit if paper else ""),
             _fmt(paper.value) if paper else "", ratio, paper.note if paper else ""]]


def _md_cell(text: str) -> str:
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


def _inline(text: str) -> str:
    """Escape, then the two Markdown marks the blocks use: **bold** and `code`."""
    import re

    escaped = html.escape(str(text))
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", escaped)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", escaped)


def to_html(blocks: list, base: Path) -> str:
    body: list[str] = []
    title = next((v for k, v in blocks if k == "h1"), "raidlab report")
    for kind, value in blocks:
        if kind in ("h1", "h2"):
            body.append(f"<{kind}>{html.escape(value)}</{kind}>")
        elif kind == "p":
            body.append(f"<p>{_inline(value)}</p>")
        elif kind == "img":
            path, alt = value
            body.append(f'<p><img src="{html.escape(os.path.relpath(path, base))}" alt="{html.escape(alt)}"></p>')
        elif kind == "table":
            head, rows = value
            cells = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
            trs = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in rows)
            body.append(f"<table><thead><tr>{cells}</tr></thead><tbody>{trs}</tbody></table>")
    style = ("body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse;"
             "margin:1em 0}td,th{border:1px solid #bbb;padding:3px 6px;font-size:90%;vertical-align:top}"
             "img{max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")


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
