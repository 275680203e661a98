"""Verdicts on a scenario's claims: holds / does not hold / not measured, with what was measured.

Pure functions over the aggregated statistics. The rules are deliberately plain so a reader
can check a verdict by hand from the tables beside it:

* order (labels best first): holds when, in every named case, each architecture's mean is
  better than the next one's (strictly: higher, or lower for time metrics). The measured
  ordering and every mean are reported; overlapping spreads are shown, not used to soften
  the verdict, because the paper states its orderings on means of 3 runs too.
* ratio (num / den of the means): holds when it lies in [min, max] in every named case; the
  measured ratio of each case is reported. With `den_case` the denominator is den's mean in
  that case (a growth between cases, such as RAID-x's improvement factor from 1 to 16
  clients).
* value (one architecture's mean): holds when it lies in [min, max] in every named case (a
  level the paper states, such as "tops out at 65 MB/s").
* not measured: a needed mean is missing (architecture not run, all its runs failed, or the
  workload did not report the metric) and every case that could be judged holds. A claim
  stated for every named case is refuted by one case that fails, so a failing case makes the
  verdict "does not hold" even while another case has no result; the missing cases are named
  beside it either way.
"""

from __future__ import annotations

import dataclasses

from raidlab.report.results import Stat
from raidlab.scenarios import Claim

HOLDS = "holds"
FAILS = "does not hold"
NOT_MEASURED = "not measured"


@dataclasses.dataclass(frozen=True)
class Verdict:
    claim: Claim
    verdict: str
    measured: str  # one line: the ratio(s) or ordering actually measured
    ratios: dict[str, float] = dataclasses.field(default_factory=dict)  # case -> ratio (ratio claims)


def _better(a: float, b: float, better: str) -> bool:
    return a > b if better == "higher" else a < b


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def evaluate(claim: Claim, stats: dict[tuple[str, str, str], Stat],
             planned_cases: set[str] | None = None) -> Verdict:
    """`planned_cases`: the cases the run planned (a --quick run plans a subset). A claim is
    judged on its cases that were planned and says which were not run; if none was planned
    it is not measured."""
    cases = [c for c in claim.cases if planned_cases is None or c in planned_cases]
    skipped = [c for c in claim.cases if c not in cases]
    if not cases:
        return Verdict(claim, NOT_MEASURED, f"case {', '.join(skipped)} not run")
    verdict = _evaluate(claim, stats, cases)
    if skipped:
        verdict = dataclasses.replace(verdict, measured=verdict.measured + f" (only {', '.join(cases)} run; "
                                      f"{', '.join(skipped)} not run)")
    return verdict


def _evaluate(claim: Claim, stats: dict[tuple[str, str, str], Stat], cases: list[str]) -> Verdict:
    missing = []
    parts = []
    ok = True
    ratios: dict[str, float] = {}
    for case in cases:
        labels = {"order": claim.order, "value": (claim.arch,)}.get(claim.kind, (claim.num, claim.den))
        wanted = [(label, case) for label in labels]
        if claim.kind == "ratio" and claim.den_case:
            wanted = [(claim.num, case), (claim.den, claim.den_case)]
        means = {}
        for side, (label, where) in enumerate(wanted):
            stat = stats.get((label, where, claim.metric))
            if stat is None:
                missing.append(f"{label}/{where}")
            else:
                means[side if claim.kind == "ratio" else label] = stat.mean
        if len(means) < len(labels):
            continue
        if claim.kind == "order":
            holds = all(_better(means[a], means[b], claim.better) for a, b in zip(labels, labels[1:]))
            measured_order = sorted(labels, key=lambda l: means[l], reverse=claim.better == "higher")
            rel = " > " if claim.better == "higher" else " < "  # best first, numerically true
            shown = f"{measured_order[0]} {_fmt(means[measured_order[0]])}"
            for prev, label in zip(measured_order, measured_order[1:]):
                shown += (" = " if means[prev] == means[label] else rel) + f"{label} {_fmt(means[label])}"
            parts.append(f"{case}: " + shown)
        elif claim.kind == "value":
            value = means[claim.arch]
            holds = claim.min <= value <= claim.max
            parts.append(f"{case}: {claim.arch} = {_fmt(value)}")
        else:
            den_where = f" in {claim.den_case}" if claim.den_case else ""
            if means[1] == 0:
                parts.append(f"{case}: {claim.den}{den_where} mean is 0, ratio undefined")
                holds = False
            else:
                ratio = means[0] / means[1]
                ratios[case] = ratio
                holds = (claim.min is None or ratio >= claim.min) and (claim.max is None or ratio <= claim.max)
                parts.append(f"{case}: {claim.num}/{claim.den}{den_where} = {ratio:.2f}")
        ok = ok and holds
    if missing:
        return Verdict(claim, NOT_MEASURED if ok else FAILS, "no result for " + ", ".join(missing)
                       + (("; " + "; ".join(parts)) if parts else ""), ratios)
    return Verdict(claim, HOLDS if ok else FAILS, "; ".join(parts), ratios)


def band(claim: Claim) -> str:
    if claim.kind == "order":
        return (" > " if claim.better == "higher" else " < ").join(claim.order) + f" ({claim.better} is better)"
    lo = "" if claim.min is None else f"{claim.min:g} <= "
    hi = "" if claim.max is None else f" <= {claim.max:g}"
    subject = claim.arch if claim.kind == "value" else f"{claim.num}/{claim.den}"
    if claim.kind == "ratio" and claim.den_case:
        subject = f"{claim.num}/({claim.den} in {claim.den_case})"
    return f"{lo}{subject}{hi}"
