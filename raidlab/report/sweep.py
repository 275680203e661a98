"""The report of a sweep (raidlab.sweep): per claim, how its measured value moves with each
assumption against its band, and the first value at which its verdict changes.

Every variant directory is an ordinary results directory, read as `raidlab report` reads
one (raidlab.report.results) and judged by the same code (raidlab.report.render.
claim_verdicts over raidlab.report.claims), so a sweep never judges a claim by rules of
its own: a variant's verdict is the verdict its own report would print.

The number shown for a claim is what its verdict is decided on:

* ratio: num / den of the means, per case (the claim's band is its [min, max]);
* value: the architecture's mean, per case (band [min, max]);
* order: the margin of the closest adjacent pair, per case: the smallest of mean(a) /
  mean(b) over the pairs a before b (mean(b) / mean(a) where lower is better), so the
  order holds exactly when the margin is above 1 (its band is "> 1").

"Flips at" is the first value, in the order the assumption lists them, whose verdict
(holds / does not hold) differs from the base's; a variant not run, or not measured,
decides nothing. At a quick size no claim is judged (raidlab.report.claims), nor is a
claim whose row a host parameter was calibrated on, so neither flips: their values are shown
and the flips column says why it is empty.

The tornado chart of a claim has one horizontal bar per assumption (per assumption and
case for a claim over several cases) spanning the smallest to the largest measured value
across its values, each end labelled with the value that gave it; the claim's band is
shaded and the base value is a vertical line. The widest bar is on top.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from raidlab import scenarios, sweep  # noqa: E402
from raidlab.errors import UsageError  # noqa: E402
from raidlab.outputs import make_dirs, read_regular, regular_or_absent, write_whole  # noqa: E402
from raidlab.report import claims as claimsmod  # noqa: E402
from raidlab.report import labels  # noqa: E402
from raidlab.report.figures import DPI, WIDTH_IN  # noqa: E402
from raidlab.report.render import claim_verdicts, to_markdown  # noqa: E402
from raidlab.report.results import Results, aggregate, load_results  # noqa: E402
from raidlab.run import MANIFEST  # noqa: E402
from raidlab.scenarios import Claim  # noqa: E402

NOT_RUN = "not run"
JUDGED = (claimsmod.HOLDS, claimsmod.FAILS)
REPORT_MD = "sweep.md"
REPORT_JSON = "sweep.json"
FIGURES = "figures"


def claim_values(claim: Claim, verdict: claimsmod.Verdict, stats: dict) -> dict[str, float]:
    """case -> the number the claim's verdict is decided on (module doc)."""
    if claim.kind == "ratio":
        return dict(verdict.ratios)
    out: dict[str, float] = {}
    for case in claim.cases:
        if claim.kind == "value":
            stat = stats.get((claim.arch, case, claim.metric))
            if stat is not None:
                out[case] = stat.mean
            continue
        means = [stats.get((label, case, claim.metric)) for label in claim.order]
        if any(m is None for m in means):
            continue
        pairs = zip(means, means[1:])
        margins = [(a.mean / b.mean if claim.better == "higher" else b.mean / a.mean)
                   for a, b in pairs if (b.mean if claim.better == "higher" else a.mean)]
        if margins:
            out[case] = min(margins)
    return out


def band_of(claim: Claim) -> tuple[float | None, float | None]:
    """The claim's band on the number claim_values gives (order: above 1)."""
    if claim.kind == "order":
        return 1.0, None
    return claim.min, claim.max


def _read_variant(out: Path, runs_in: str) -> Results | None:
    path = out / runs_in
    if not (path / MANIFEST).is_file():
        return None
    return load_results(path)


def _point(claim: Claim, results: Results | None, stats: dict | None) -> dict[str, Any]:
    if results is None:
        return {"verdict": NOT_RUN, "text": NOT_RUN, "measured": "", "values": {}}
    verdict = next(v for v in claim_verdicts(results, stats) if v.claim.id == claim.id)
    point = {"verdict": verdict.verdict, "text": verdict.text, "measured": verdict.measured,
             "values": claim_values(claim, verdict, stats)}
    status = str(results.manifest.get("status"))
    if status != "complete":
        point["status"] = status
    return point


def _flips_at(base: dict, points: list[dict]) -> tuple[Any, str]:
    """(the first value whose verdict differs from the base's, or None; the cell's words)."""
    if base["verdict"] == claimsmod.NOT_JUDGED:
        return None, "not judged (quick size)"
    if base["verdict"] == claimsmod.CALIBRATION:
        return None, "a calibration row: not judged"
    if base["verdict"] not in JUDGED:
        return None, f"base {base['verdict']}"
    for point in points:
        if point["verdict"] in JUDGED and point["verdict"] != base["verdict"]:
            return point["value"], f"{point['value']} ({point['verdict']})"
    return None, "does not flip in the swept range"


def sweep_data(out: Path) -> dict[str, Any]:
    """Everything sweep.md, sweep.json and the figures show, read from sweep directory `out`."""
    out = Path(out)
    plan = sweep.read_plan(out)
    try:
        text = read_regular(out / sweep.SCENARIO_COPY).decode()
    except (OSError, ValueError) as exc:
        raise UsageError(f"{out / sweep.SCENARIO_COPY}: {getattr(exc, 'strerror', None) or exc}") from None
    base = scenarios.loads(text, out / sweep.SCENARIO_COPY, check_references=False)
    by_id = {c.id: c for c in base.claims}
    chosen = [by_id[c] for c in plan["claims"] if c in by_id]
    read: dict[str, tuple[Results | None, dict | None]] = {}
    variants = []
    for v in plan["variants"]:
        if v["runs_in"] not in read:
            results = _read_variant(out, v["runs_in"])
            read[v["runs_in"]] = (results, aggregate(results.runs) if results is not None else None)
        results = read[v["runs_in"]][0]
        variants.append({**{k: v[k] for k in ("id", "key", "value", "runs_in")},
                         "runs": len(v["planned_runs"]),
                         "status": str(results.manifest.get("status")) if results else NOT_RUN,
                         "ok": len(results.ok_runs) if results else 0,
                         "failed": len(results.failed_runs) if results else 0})
    claims_out = []
    for claim in chosen:
        lo, hi = band_of(claim)
        base_point = {"variant": sweep.BASE, **_point(claim, *read[sweep.BASE])}
        rows = []
        for assumption in plan["assumptions"]:
            points = []
            for v in plan["variants"]:
                if v["key"] == assumption["key"]:
                    points.append({"value": v["value"], "variant": v["id"], **_point(claim, *read[v["runs_in"]])})
            flip, flip_text = _flips_at(base_point, points)
            ranges = {}
            for case in claim.cases:
                measured = [p["values"][case] for p in points if case in p["values"]]
                if measured:
                    ranges[case] = [min(measured), max(measured)]
            rows.append({"key": assumption["key"], "label": assumption.get("label", ""),
                         "base": assumption.get("base"), "points": points, "flips_at": flip,
                         "flips": flip_text, "range": ranges})
        claims_out.append({"id": claim.id, "text": claim.text, "kind": claim.kind, "metric": claim.metric,
                           "cases": list(claim.cases), "band": claimsmod.band(claim), "min": lo, "max": hi,
                           "base": base_point, "assumptions": rows})
    return {"scenario": plan["scenario"], "title": plan.get("title", ""), "scenario_file": plan["scenario_file"],
            "kind": plan.get("kind"), "runner": plan.get("runner"), "quick": bool(plan.get("quick")),
            "repeat": plan.get("repeat"), "status": plan.get("status"),
            "assumptions": plan["assumptions"], "skipped_claims": plan.get("skipped_claims", []),
            "variants": variants, "claims": claims_out}


def _num(x: float) -> str:
    return f"{x:.3f}" if abs(x) < 100 else f"{x:.1f}"


def measured_cell(point: dict, cases: list[str]) -> str:
    """A point's number(s): `1.072`, or `64k 1.072, 1m 1.101` over several cases."""
    values = point["values"]
    if not values:
        return "-"
    if len(cases) == 1:
        return _num(values[cases[0]]) if cases[0] in values else "-"
    return ", ".join(f"{case} {_num(values[case])}" for case in cases if case in values)


def _value_words(values: list[Any] | None) -> str:
    if not values:
        return "-"
    shown = ["(default)" if v is None else str(v) for v in dict.fromkeys(values)]
    return ", ".join(shown)


def _base_words(claim: dict) -> str:
    base = claim["base"]
    return f"Band `{claim['band']}`. Base: **{measured_cell(base, claim['cases'])}** ({base['text']})."


def to_blocks(data: dict, out: Path, figures: dict[str, Path]) -> list[tuple[str, Any]]:
    """sweep.md as raidlab.report.render's blocks."""
    blocks: list[tuple[str, Any]] = [("h1", f"Sweep: {data['title'] or data['scenario']}")]
    runs = sum(v["runs"] for v in data["variants"] if v["runs_in"] == v["id"])
    intro = (f"Scenario `{data['scenario']}` ({data['scenario_file']}), runner {data['runner']}, "
             f"{len(data['variants'])} variants ({runs} runs: the claim cases only). One assumption at a time: "
             "each row changes one assumption and keeps every other at the scenario's value. A sweep judges "
             "nothing of its own: each verdict is the one the variant's own report gives, and the scenario's "
             "values stay the ones its report judges.")
    blocks.append(("p", intro))
    if data["quick"]:
        blocks.append(("p", "**Quick size**: the runs used the scenario's [quick] sizes, at which no claim is "
                            "judged; the values are shown, and nothing flips."))
    if data.get("status") != "complete":
        blocks.append(("p", f"**Sweep {data.get('status')}**: variants not run are marked; "
                            "continue it with `raidlab sweep --resume`."))
    if data["skipped_claims"]:
        blocks.append(("p", "Left out (no case runs at this size): " + ", ".join(data["skipped_claims"]) + "."))
    blocks.append(("h2", "Assumptions"))
    blocks.append(("table", (["assumption", "key", "base value", "swept values", "why"],
                             [[a.get("label") or a["key"], f"`{a['key']}`", _value_words(a.get("base")),
                               ", ".join(a["values"]), a.get("reason", "")] for a in data["assumptions"]])))
    for claim in data["claims"]:
        blocks.append(("h2", f"`{claim['id']}`: {claim['text']}"))
        blocks.append(("p", _base_words(claim)))
        rows = []
        for row in claim["assumptions"]:
            cells = "; ".join(f"{p['value']} → {measured_cell(p, claim['cases'])} ({p['text']})"
                              for p in row["points"])
            rows.append([row["label"] or row["key"], cells, row["flips"]])
        blocks.append(("table", (["assumption", "values → measured (verdict)", "flips at"], rows)))
        if claim["id"] in figures:
            blocks.append(("img", (figures[claim["id"]], f"tornado of {claim['id']}")))
    blocks.append(("h2", "Variants"))
    blocks.append(("table", (["variant", "assumption", "value", "runs", "status", "results"],
                             [[v["id"], v["key"] or "-", v["value"] if v["key"] else "-", v["runs"],
                               f"{v['status']}: {v['ok']} ok, {v['failed']} failed" if v["status"] != NOT_RUN
                               else NOT_RUN,
                               f"[{v['runs_in']}/]({v['runs_in']}/)" + ("" if v["runs_in"] == v["id"]
                                                                       else " (the same runs)")]
                              for v in data["variants"]])))
    return blocks


def figure_name(claim_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", claim_id) + ".png"


def tornado(claim: dict, path: Path) -> Path | None:
    """The claim's tornado chart (module doc); None when no assumption has a measured value."""
    bars = []
    multi = len(claim["cases"]) > 1
    for row in claim["assumptions"]:
        for case, (lo, hi) in row["range"].items():
            at = {p["values"][case]: p["value"] for p in row["points"] if case in p["values"]}
            name = (row["label"] or row["key"]) + (f" ({case})" if multi else "")
            bars.append((name, lo, hi, at[lo], at[hi], claim["base"]["values"].get(case)))
    if not bars:
        return None
    bars.sort(key=lambda b: b[2] - b[1])  # the widest on top (drawn last, at the highest y)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 1.4 + 0.55 * len(bars)), layout="constrained")
    numbers = [x for b in bars for x in (b[1], b[2], b[5]) if x is not None]
    numbers += [x for x in (claim["min"], claim["max"]) if x is not None]
    left, right = min(numbers), max(numbers)
    pad = (right - left) * 0.15 or abs(right) * 0.05 or 0.05
    left, right = left - pad, right + pad
    lo = claim["min"] if claim["min"] is not None else left
    hi = claim["max"] if claim["max"] is not None else right
    ax.axvspan(lo, hi, color="tab:green", alpha=0.15, label=f"band: {claim['band']}")
    for y, (name, low, high, low_at, high_at, base) in enumerate(bars):
        ax.barh(y, max(high - low, (right - left) * 0.004), left=low, height=0.5, color="tab:blue")
        if low_at != high_at:  # one value (or two that measure the same): named once, at the right
            ax.annotate(str(low_at), (low, y), xytext=(-4, 0), textcoords="offset points", ha="right",
                        va="center", fontsize=8)
        ax.annotate(str(high_at), (high, y), xytext=(4, 0), textcoords="offset points", ha="left", va="center",
                    fontsize=8)
        if multi and base is not None:
            ax.vlines(base, y - 0.4, y + 0.4, color="black", linewidth=1.5)
    bases = [b[5] for b in bars if b[5] is not None]
    if not multi and bases:
        ax.axvline(bases[0], color="black", linewidth=1.5, label=f"base {_num(bases[0])}")
    elif multi and bases:
        ax.plot([], [], color="black", linewidth=1.5, label="base (per case)")
    ax.set_xlim(left, right)
    ax.set_yticks(range(len(bars)), [b[0] for b in bars], fontsize=9)
    ax.set_ylim(-0.7, len(bars) - 0.3)
    what = {"ratio": "ratio", "value": labels.axis_label(claim["metric"]),
            "order": "margin of the closest pair (holds above 1)"}[claim["kind"]]
    ax.set_xlabel(f"{what} — {claim['metric']}" if claim["kind"] == "ratio" else what)
    ax.set_title(f"{claim['id']}: what it hinges on", fontsize=11)
    fig.legend(loc="outside lower center", fontsize=8, frameon=False, ncol=2)
    write_whole(regular_or_absent(path, "sweep figure"), lambda partial: fig.savefig(partial, dpi=DPI, format="png"))
    plt.close(fig)
    return path


def write_sweep_report(out: Path) -> list[Path]:
    """sweep.md, sweep.json and figures/<claim>.png in sweep directory `out`."""
    out = Path(out)
    data = sweep_data(out)
    figures: dict[str, Path] = {}
    if data["claims"]:
        make_dirs(out / FIGURES, "--out")
    for claim in data["claims"]:
        drawn = tornado(claim, out / FIGURES / figure_name(claim["id"]))
        if drawn is not None:
            figures[claim["id"]] = drawn
    for claim in data["claims"]:
        claim["figure"] = str(figures[claim["id"]].relative_to(out)) if claim["id"] in figures else None
    md = to_markdown(to_blocks(data, out, figures), out)
    text = json.dumps(data, indent=2, default=str)
    written = [write_whole(regular_or_absent(out / REPORT_MD, "sweep report"), lambda p: p.write_text(md)),
               write_whole(regular_or_absent(out / REPORT_JSON, "sweep report"), lambda p: p.write_text(text))]
    return written + list(figures.values())
