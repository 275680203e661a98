"""Verdicts on a scenario's claims: holds / does not hold / not judged / not measured, with
what was measured and, for a claim that does not hold, on which side of its band it fell.

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
* not judged (quick size): the runs used the scenario's quick sizes (`raidlab run --quick`,
  recorded in the manifest). A claim is written for the paper's sizes, so a quick run's
  means are shown and never judged: "does not hold" at a size the paper never ran would
  read as a refutation that nothing supports.
* not measured: a needed mean is missing (architecture not run, all its runs failed, or the
  workload did not report the metric) and every case that could be judged holds. A claim
  stated for every named case is refuted by one case that fails, so a failing case makes the
  verdict "does not hold" even while another case has no result; the missing cases are named
  beside it either way.
* calibration (not judged): a model parameter was calibrated on this claim's row (the
  scenario's [host] names the claim in `calibrated_on`), so it holds by construction; its
  measured value is shown, and it is not counted as evidence either way.

A verdict that does not hold says why, case by case, in the words a reader checks it with:
a ratio or value "above" or "below" its band (`hplajw 219.94 above 100-210`), an order by
the pair that came out the other way (`small: raid0 939 below scd 1630`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection

from raidlab.report.results import Stat
from raidlab.scenarios import Claim

HOLDS = "holds"
FAILS = "does not hold"
NOT_JUDGED = "not judged (quick size)"
NOT_MEASURED = "not measured"
CALIBRATION = "calibration (not judged)"
VERDICTS = (HOLDS, FAILS, NOT_JUDGED, NOT_MEASURED, CALIBRATION)  # the banner's order


@dataclasses.dataclass(frozen=True)
class Verdict:
    claim: Claim
    verdict: str
    measured: str  # one line: the ratio(s) or ordering actually measured
    ratios: dict[str, float] = dataclasses.field(default_factory=dict)  # case -> ratio (ratio claims)
    why: tuple[str, ...] = ()  # does not hold: per failing case, the value and the side of the band

    @property
    def text(self) -> str:
        """The verdict cell: `does not hold: hplajw 219.94 above 100-210`, or the verdict alone."""
        return f"{self.verdict}: {'; '.join(self.why)}" if self.why and self.verdict == FAILS else self.verdict


def _better(a: float, b: float, better: str) -> bool:
    return a > b if better == "higher" else a < b


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def _same(name: str) -> str:
    return name


def evaluate(claim: Claim, stats: dict[tuple[str, str, str], Stat],
             planned_cases: set[str] | None = None, *, quick: bool = False,
             name: Callable[[str], str] = _same, calibration: Collection[str] = ()) -> Verdict:
    """`planned_cases`: the cases the run planned (a --quick run plans a subset). A claim is
    judged on its cases that were planned and says which were not run; if none was planned
    it is not measured. `quick`: the runs were quick-size, so nothing is judged (the
    measured line is still given). `name`: how an [[arch]] label is shown (the report names
    architectures as its figures do). `calibration`: ids of claims whose row a model
    parameter was calibrated on (the scenario's [host] `calibrated_on`): such a claim holds
    by construction, so it is shown with its measured value but not judged."""
    cases = [c for c in claim.cases if planned_cases is None or c in planned_cases]
    skipped = [c for c in claim.cases if c not in cases]
    if not cases:
        return Verdict(claim, NOT_JUDGED if quick else NOT_MEASURED, f"case {', '.join(skipped)} not run")
    verdict = _evaluate(claim, stats, cases, name)
    if skipped:
        verdict = dataclasses.replace(verdict, measured=verdict.measured + f" (only {', '.join(cases)} run; "
                                      f"{', '.join(skipped)} not run)")
    if quick:
        verdict = dataclasses.replace(verdict, verdict=NOT_JUDGED, why=())
    elif claim.id in calibration:
        verdict = dataclasses.replace(verdict, verdict=CALIBRATION, why=())
    return verdict


def band_range(claim: Claim) -> str:
    """A ratio's or value's band in a verdict: `100-210`, `>= 1.3`, `<= 0.8`."""
    if claim.min is not None and claim.max is not None:
        return f"{claim.min:g}-{claim.max:g}"
    if claim.min is not None:
        return f">= {claim.min:g}"
    return f"<= {claim.max:g}"


def _side(claim: Claim, value: float) -> str | None:
    """"above" / "below" the band, or None inside it."""
    if claim.min is not None and value < claim.min:
        return "below"
    if claim.max is not None and value > claim.max:
        return "above"
    return None


def _evaluate(claim: Claim, stats: dict[tuple[str, str, str], Stat], cases: list[str],
              name: Callable[[str], str]) -> Verdict:
    missing = []
    parts = []
    why: list[str] = []
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
                missing.append(f"{name(label)}/{where}")
            else:
                means[side if claim.kind == "ratio" else label] = stat.mean
        if len(means) < len(labels):
            continue
        if claim.kind == "order":
            holds = all(_better(means[a], means[b], claim.better) for a, b in zip(labels, labels[1:]))
            measured_order = sorted(labels, key=lambda l: means[l], reverse=claim.better == "higher")
            rel = " > " if claim.better == "higher" else " < "  # best first, numerically true
            shown = f"{name(measured_order[0])} {_fmt(means[measured_order[0]])}"
            for prev, label in zip(measured_order, measured_order[1:]):
                shown += (" = " if means[prev] == means[label] else rel) + f"{name(label)} {_fmt(means[label])}"
            parts.append(f"{case}: " + shown)
            for a, b in zip(labels, labels[1:]):
                if not _better(means[a], means[b], claim.better):
                    side = "equal to" if means[a] == means[b] else ("below" if means[a] < means[b] else "above")
                    why.append(f"{case}: {name(a)} {_fmt(means[a])} {side} {name(b)} {_fmt(means[b])}")
        elif claim.kind == "value":
            value = means[claim.arch]
            side = _side(claim, value)
            holds = side is None
            parts.append(f"{case}: {name(claim.arch)} = {_fmt(value)}")
            if side:
                why.append(f"{case} {_fmt(value)} {side} {band_range(claim)}")
        else:
            den_where = f" in {claim.den_case}" if claim.den_case else ""
            if means[1] == 0:
                parts.append(f"{case}: {name(claim.den)}{den_where} mean is 0, ratio undefined")
                why.append(f"{case}: ratio undefined")
                holds = False
            else:
                ratio = means[0] / means[1]
                ratios[case] = ratio
                side = _side(claim, ratio)
                holds = side is None
                parts.append(f"{case}: {name(claim.num)}/{name(claim.den)}{den_where} = {ratio:.2f}")
                if side:
                    why.append(f"{case} {ratio:.2f} {side} {band_range(claim)}")
        ok = ok and holds
    if missing:
        return Verdict(claim, NOT_MEASURED if ok else FAILS, "no result for " + ", ".join(missing)
                       + (("; " + "; ".join(parts)) if parts else ""), ratios, tuple(why))
    return Verdict(claim, HOLDS if ok else FAILS, "; ".join(parts), ratios, tuple(why))


def band(claim: Claim, name: Callable[[str], str] = _same) -> str:
    if claim.kind == "order":
        return (" > " if claim.better == "higher" else " < ").join(map(name, claim.order)) + f" ({claim.better} is better)"
    lo = "" if claim.min is None else f"{claim.min:g} <= "
    hi = "" if claim.max is None else f" <= {claim.max:g}"
    subject = name(claim.arch) if claim.kind == "value" else f"{name(claim.num)}/{name(claim.den)}"
    if claim.kind == "ratio" and claim.den_case:
        subject = f"{name(claim.num)}/({name(claim.den)} in {claim.den_case})"
    return f"{lo}{subject}{hi}"
