"""A static site of the whole reproduction (`raidlab report --site DIR`).

What a reader opens first is an index of the papers, each with its headline claim and how
many of its claims hold; one page per paper then gives, per scenario, the conditions and
assumptions its file states (the file's header), every claim with the paper's band, our
value and the verdict, the figures, the full report, and the raw files each verdict was
read from; after them come the paper's extras, scenarios without claims (today's kernel's
descendants of its design, "then and now", modern variants, live cases), each from its
newest complete run and judged by nothing.

Everything is generated from the same place as the claim table: the results that
results/current.toml names (raidlab.report.claimtable), so the site, results/CLAIMS.md
and each report can never disagree. Each scenario's report is rendered anew from exactly
those runs (with the same files left out), and the raw files (manifest, scenario file as
run, run files, NOTES.md) are copied beside it, so the site stands on its own: it can be
served or copied anywhere, and every link in it is relative.
"""

from __future__ import annotations

import html
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from raidlab import scenarios
from raidlab.errors import UsageError
from raidlab.outputs import make_dirs, output_dir, write_whole
from raidlab.report import claims as claimsmod
from raidlab.report import claimtable
from raidlab.report.render import STYLE, write_report

# Files of a results directory that the site copies as its raw files.
RAW_FILES = ("manifest.json", "scenario.toml", "NOTES.md")
VERDICT_CLASS = {claimsmod.HOLDS: "holds", claimsmod.FAILS: "fails", claimsmod.CALIBRATION: "calibration"}
SITE_STYLE = STYLE + """
td.verdict.holds { color: #1a7f37; } td.verdict.fails { color: #b3261e; }
td.verdict.calibration, td.verdict.other { color: #555; }
pre.header { white-space: pre-wrap; font-size: 0.85em; background: #f6f6f6; padding: 0.6em; }
nav { margin-bottom: 1em; }
"""


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "other"


def header_of(text: str) -> str:
    """The comment lines a scenario file starts with: its conditions and assumptions."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            if lines:
                break
            continue
        lines.append(line[1:].removeprefix(" "))
    return "\n".join(lines)


def _page(title: str, body: str, up: str | None = None) -> str:
    nav = f'<nav><a href="{html.escape(up)}">all papers</a></nav>' if up else ""
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{html.escape(title)}</title><style>{SITE_STYLE}</style></head>"
            f"<body>{nav}{body}</body></html>\n")


def _table(head: list[str], rows: list[str]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f'<div class="scroll"><table><thead><tr>{cells}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def _verdict_cell(v: claimsmod.Verdict) -> str:
    cls = VERDICT_CLASS.get(v.verdict, "other")
    return f'<td class="verdict {cls}">{html.escape(v.text)}</td>'


def _band(claim) -> str:
    if claim.kind == "order":
        return " > ".join(claim.order) if claim.better == "higher" else " < ".join(claim.order)
    low = "-" if claim.min is None else f"{claim.min:g}"
    high = "-" if claim.max is None else f"{claim.max:g}"
    return f"{low} .. {high}"


def _headline(row: claimtable.Row) -> str:
    if not row.headline:
        return ""
    v = next(v for v in row.verdicts if v.claim.id == row.headline)
    text = f"{v.claim.text} ({row.headline}): {v.verdict}, {v.measured}"
    if row.headline_flip:
        text += f"; what flips it: {row.headline_flip}"
    return text


def write_site(results_root: Path, scenario_dir: Path, out: Path,
               progress: Callable[[str], None] = lambda _m: None) -> list[Path]:
    """The site in `out` (a directory of the caller's, made if absent): index.html, a page per
    paper, and per scenario its report and raw files. Returns the pages written."""
    out = output_dir(out, "--site")
    make_dirs(out, "--site")
    table = claimtable.rows(results_root, scenario_dir)
    loaded = {s.id: s for s in (scenarios.load(p, check_references=False) for p in sorted(scenario_dir.glob("*.toml")))}
    by_paper: dict[str, list[claimtable.Row]] = {}
    for row in table:
        by_paper.setdefault(row.paper, []).append(row)
    extras: dict[str, list[claimtable.Row]] = {}
    for row in claimtable.extras(results_root, scenario_dir):
        extras.setdefault(row.paper, []).append(row)

    written: list[Path] = []
    index_rows = []
    for paper, group in by_paper.items():
        system = claimtable.system_of(paper)
        page_name = f"{slug(system)}.html"
        sections = []
        for row in group:
            progress(f"{row.scenario}: report")
            sections.append(_scenario_section(row, loaded[row.scenario], results_root, out, slug(system)))
        if extras.get(paper):
            sections.append("<h2>Extras, without claims</h2><p>Cases beside the paper's: today's kernel's "
                            "descendants of its design (then and now), modern variants and live runs. Each "
                            "is read from its newest complete run; nothing here is judged.</p>")
            for row in extras[paper]:
                progress(f"{row.scenario}: report")
                sections.append(_scenario_section(row, loaded[row.scenario], results_root, out, slug(system)))
        citation = scenarios.paper_citation(paper) if paper in scenarios.PAPERS else "no paper: controls"
        body = (f"<h1>{html.escape(system)}</h1><p>{html.escape(citation)}</p>" + "".join(sections))
        written.append(_write(out / page_name, _page(system, body, up="index.html")))
        holds = sum(r.count(claimsmod.HOLDS) for r in group)
        judged = sum(r.judged for r in group)
        headlines = "<br>".join(html.escape(h) for h in (_headline(r) for r in group) if h)
        index_rows.append(f'<tr><td><a href="{html.escape(page_name)}">{html.escape(system)}</a></td>'
                          f"<td>{holds} of {judged}</td><td>{headlines}</td></tr>")
    body = ("<h1>raidlab: the papers reproduced</h1>"
            "<p>Each paper with how many of its claims hold (judged against a band around what the "
            "paper states, written before the runs) and its headline claim. The counts are "
            "results/CLAIMS.md's, from the results that results/current.toml names.</p>"
            + _table(["paper", "claims holding", "headline"], index_rows))
    written.insert(0, _write(out / "index.html", _page("raidlab: the papers reproduced", body)))
    return written


def _scenario_section(row: claimtable.Row, scn: scenarios.Scenario, results_root: Path, out: Path,
                      paper_dir: str) -> str:
    sid = html.escape(row.scenario)
    parts = [f'<h2 id="{sid}">{html.escape(scn.title)} <small>({sid})</small></h2>']
    header = header_of(scn.text)
    if header:
        parts.append(f'<details open><summary>Conditions and assumptions (the scenario file\'s header)</summary>'
                     f'<pre class="header">{html.escape(header)}</pre></details>')
    if row.pending:
        parts.append(f"<p>Not counted: {html.escape(row.pending)}</p>")
        return "".join(parts)
    here = Path(paper_dir) / row.scenario
    dirs = [results_root / s for s in row.sources]
    report_dir = out / here / "report"
    try:
        # An extra is drawn with its scenario file as it stands (its report settings, such as
        # which way is better, may be newer than its run); a claim's report with the file it ran.
        write_report(dirs, formats=("html",), out_dir=report_dir, left_out=[results_root / p for p in row.left_out],
                     scenario_file=None if row.verdicts else Path(scn.path))
    except UsageError as exc:
        raise UsageError(f"{row.scenario}: its report cannot be written: {exc}") from None
    claim_rows = [f"<tr><td>{html.escape(v.claim.id)}</td><td>{html.escape(v.claim.text)}</td>"
                  f"<td>{html.escape(_band(v.claim))}</td><td>{html.escape(v.measured)}</td>{_verdict_cell(v)}</tr>"
                  for v in row.verdicts]
    if claim_rows:
        parts.append(_table(["claim", "the paper", "band", "ours", "verdict"], claim_rows))
    for figure in sorted((report_dir / "figures").glob("*.png")):
        rel = figure.relative_to(out).as_posix()
        parts.append(f'<figure><img src="{html.escape(rel)}" alt="{html.escape(figure.stem)}"></figure>')
    parts.append(f'<p><a href="{html.escape((here / "report" / "report.html").as_posix())}">'
                 f"the full report</a></p>")
    raw_links = []
    for source, directory in zip(row.sources, dirs):
        dest = out / here / "raw" / source
        for name in RAW_FILES:
            if (directory / name).is_file():
                raw_links.append(_copy(directory / name, dest / name, out))
        for run in sorted((directory / "runs").glob("*.json")):
            raw_links.append(_copy(run, dest / "runs" / run.name, out))
    if row.left_out:
        parts.append("<p>Left out of this comparison: " + ", ".join(html.escape(p) for p in row.left_out) + "</p>")
    parts.append('<details><summary>Raw files</summary><ul>'
                 + "".join(f'<li><a href="{html.escape(link)}">{html.escape(link)}</a></li>' for link in raw_links)
                 + "</ul></details>")
    return "".join(parts)


def _copy(src: Path, dest: Path, base: Path) -> str:
    make_dirs(dest.parent, "--site")
    shutil.copyfile(src, dest)
    return dest.relative_to(base).as_posix()


def _write(path: Path, text: str) -> Path:
    return write_whole(path, lambda partial: partial.write_text(text))
