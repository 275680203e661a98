"""The claim table: every paper's claims counted from the committed results, never by hand.

`results/current.toml` names, per scenario, the results its verdicts are read from (one run
directory, or several of one scenario with files left out, as `raidlab report DIR... 
--leave-out F` combines them), the paper's headline claim, and the sweep that shows what the
headline hinges on. A scenario with claims that current.toml does not list is read from its
newest complete run directory; one it marks `pending` is listed as not counted, with the
reason. Each verdict is the one the directory's own report gives (raidlab.report.render.
claim_verdicts); the headline's line adds, from the sweep's sweep.json, the first swept value
that flips its verdict.

`raidlab claims` writes the table (results/CLAIMS.md by default).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raidlab import scenarios
from raidlab.errors import UsageError
from raidlab.report import claims as claimsmod
from raidlab.report.render import claim_verdicts
from raidlab.report.results import leave_out, load_combined, load_results
from raidlab.run import MANIFEST

CURRENT = "current.toml"
_ENTRY = {"scenario", "results", "leave_out", "headline", "sweep", "pending"}


@dataclass(frozen=True)
class Row:
    scenario: str
    paper: str
    sources: tuple[str, ...]
    verdicts: tuple[claimsmod.Verdict, ...]
    headline: str | None
    headline_flip: str | None
    sweep: str | None
    pending: str | None = None
    left_out: tuple[str, ...] = ()  # run files current.toml leaves out (relative to the results root)

    def count(self, verdict: str) -> int:
        return sum(1 for v in self.verdicts if v.verdict == verdict)

    @property
    def judged(self) -> int:
        return self.count(claimsmod.HOLDS) + self.count(claimsmod.FAILS)


def current_entries(root: Path) -> dict[str, dict[str, Any]]:
    """results/current.toml's entries by scenario id ({} without the file): which result
    directories each scenario's claims come from and which run files they leave out."""
    path = root / CURRENT
    if not path.is_file():
        return {}
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: {exc}") from None
    out: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(doc.get("current", [])):
        unknown = sorted(set(entry) - _ENTRY)
        if unknown or not isinstance(entry.get("scenario"), str):
            raise UsageError(f"{path}: current[{i}]: needs scenario = \"<id>\""
                             + (f"; unknown key {unknown[0]!r}" if unknown else ""),
                             hint=f"keys: {', '.join(sorted(_ENTRY))}")
        out[entry["scenario"]] = entry
    return out


def _newest_complete(root: Path, scenario_id: str) -> Path | None:
    base = root / scenario_id
    if not base.is_dir():
        return None
    for run in sorted((p for p in base.iterdir() if (p / MANIFEST).is_file()), reverse=True):
        try:
            manifest = json.loads((run / MANIFEST).read_text())
            if manifest.get("status") == "complete" and not manifest.get("quick"):  # quick sizes judge nothing
                return run
        except (OSError, ValueError):
            continue
    return None


def _flip(sweep_dir: Path, claim_id: str) -> str:
    """`key=value (verdict)` for every assumption of the sweep that flips the claim, or why
    none does."""
    path = sweep_dir / "sweep.json"
    if not path.is_file():
        return f"no sweep.json in {sweep_dir}"
    doc = json.loads(path.read_text())
    for claim in doc.get("claims", []):
        if claim["id"] != claim_id:
            continue
        flips = [f"{a['key']}={a['flips']}" for a in claim["assumptions"] if a.get("flips_at") is not None]
        return "; ".join(flips) if flips else f"no single swept assumption flips it ({len(claim['assumptions'])} swept)"
    return f"not in the sweep {sweep_dir}"


def rows(results_root: Path, scenario_dir: Path, chosen: dict[str, list[Path]] | None = None) -> list[Row]:
    """One row per scenario file with claims (scenario_dir/*.toml), in file order. With
    `chosen` (scenario id -> its result directories), only those scenarios, read from those
    directories instead of the ones current.toml names (`raidlab reproduce`); their
    headlines and sweeps are still current.toml's."""
    entries = current_entries(results_root)
    if chosen is not None:
        entries = {sid: {k: v for k, v in entries.get(sid, {}).items() if k in ("headline", "sweep")}
                   | {"results": [str(Path(d).relative_to(results_root)) for d in dirs]}
                   for sid, dirs in chosen.items()}
    out: list[Row] = []
    known = set()
    for path in sorted(scenario_dir.glob("*.toml")):
        scn = scenarios.load(path, check_references=False)
        known.add(scn.id)
        if not scn.claims:
            continue
        if chosen is not None and scn.id not in chosen:
            continue
        entry = entries.get(scn.id, {})
        headline = entry.get("headline")
        if headline is not None and headline not in {c.id for c in scn.claims}:
            raise UsageError(f"{results_root / CURRENT}: {scn.id}: no claim {headline!r}")
        if "pending" in entry:
            out.append(Row(scn.id, scn.paper, (), (), headline, None, None, pending=str(entry["pending"])))
            continue
        named = entry.get("results")
        dirs = [results_root / p for p in ([named] if isinstance(named, str) else named or [])]
        if not dirs:
            newest = _newest_complete(results_root, scn.id)
            if newest is None:
                out.append(Row(scn.id, scn.paper, (), (), headline, None, None, pending="no complete run"))
                continue
            dirs = [newest]
        results = load_results(dirs[0]) if len(dirs) == 1 else load_combined(dirs)
        if entry.get("leave_out"):
            results = leave_out(results, [results_root / p for p in entry["leave_out"]])
        verdicts = tuple(claim_verdicts(results))
        sweep = entry.get("sweep")
        flip = _flip(results_root / sweep, headline) if sweep and headline else None
        out.append(Row(scn.id, scn.paper, tuple(str(d.relative_to(results_root)) for d in dirs), verdicts,
                       headline, flip, sweep, left_out=tuple(entry.get("leave_out", []))))
    stale = sorted(set(entries) - known)
    if stale:
        raise UsageError(f"{results_root / CURRENT}: no scenario {stale[0]!r} in {scenario_dir}")
    return out


def extras(results_root: Path, scenario_dir: Path) -> list[Row]:
    """One row per scenario file without claims (an extra: a modern variant, the kernel's
    descendants beside a paper's design, a live case beside a virtual-time one) that has a
    complete run at the paper's sizes, read from its newest; in file order. Nothing is judged
    (no verdicts): the site shows them beside the paper's claims."""
    out: list[Row] = []
    for path in sorted(scenario_dir.glob("*.toml")):
        scn = scenarios.load(path, check_references=False)
        if scn.claims:
            continue
        newest = _newest_complete(results_root, scn.id)
        if newest is not None:
            out.append(Row(scn.id, scn.paper, (str(newest.relative_to(results_root)),), (), None, None, None))
    return out


def system_of(paper: str) -> str:
    """The system a paper describes, as the table names it (controls have no paper)."""
    return scenarios.PAPERS[paper][0] if paper in scenarios.PAPERS else "controls (no paper)"


CURRENT_SOURCE = ("Generated by `raidlab claims` from the results that `results/current.toml` names "
                  "(else each scenario's newest complete run); do not edit by hand.")


def markdown(table: list[Row], source: str = CURRENT_SOURCE) -> str:
    """The claim table as markdown: per paper, its scenarios' counts, then its headline.
    `source` says which results it was generated from."""
    lines = ["# Claims", "", f"{source} A verdict is the one the directory's own report gives.", ""]
    by_paper: dict[str, list[Row]] = {}
    for row in table:
        by_paper.setdefault(row.paper, []).append(row)
    lines += ["| paper | claims holding | judged | calibration | not judged or measured |", "|---|---|---|---|---|"]
    for paper, group in by_paper.items():
        system = system_of(paper)
        holds = sum(r.count(claimsmod.HOLDS) for r in group)
        judged = sum(r.judged for r in group)
        calib = sum(r.count(claimsmod.CALIBRATION) for r in group)
        other = sum(len(r.verdicts) - r.judged - r.count(claimsmod.CALIBRATION) for r in group)
        pending = [r.scenario for r in group if r.pending]
        lines.append(f"| {system} | {holds} | {judged} | {calib} | {other}"
                     + (f" (not counted: {', '.join(pending)})" if pending else "") + " |")
    for paper, group in by_paper.items():
        system = system_of(paper)
        lines += ["", f"## {system}", "", "| scenario | results | holds / judged | headline |", "|---|---|---|---|"]
        for r in group:
            if r.pending:
                lines.append(f"| {r.scenario} | not counted: {r.pending} | | |")
                continue
            head = ""
            if r.headline:
                v = next(v for v in r.verdicts if v.claim.id == r.headline)
                head = f"`{r.headline}`: {v.verdict} ({v.measured})"
                if r.headline_flip:
                    head += f"; sweep [{r.sweep}]({r.sweep}/sweep.md): {r.headline_flip}"
            sources = ", ".join(f"[{s}]({s})" for s in r.sources)
            lines.append(f"| {r.scenario} | {sources} | {r.count(claimsmod.HOLDS)} / {r.judged} | {head} |")
    return "\n".join(lines) + "\n"
