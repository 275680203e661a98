"""The runner-fairness control of a scenario with [control]: engine raid5 / md raid5.

Why a control: VC-RAID's data array is the engine's raid5, served to the lab VM by the host,
while its baseline is md's raid5, run by the guest kernel. A difference between the two may
come from VC-RAID or from the two ways of running an array. The scenario therefore runs the
engine's plain raid5, served exactly as VC-RAID is, beside md's raid5 on the same drives;
their ratio of means, per case and metric, says how far the two paths differ for the same
algorithm. Outside the band ([control].band, 0.8..1.25 by default) the case and metric are
"runner-biased", and every claim there that puts md's label, or an engine architecture
beside an md one, into its comparison carries that note beside its verdict: the control
cannot say which side the difference lies on, so md's own level is as suspect as the
engine's.

Pure functions over the aggregated statistics, like the claims beside them. A mean that is
missing (the control's architecture not run in that case, all its runs failed, or the
metric not reported) makes the row "not measured", never a guessed ratio.
"""

from __future__ import annotations

import dataclasses

from raidlab import archs
from raidlab.report.results import Stat
from raidlab.scenarios import Claim, Control, Scenario

OK = "ok"
BIASED = "runner-biased"
NOT_MEASURED = "not measured"


@dataclasses.dataclass(frozen=True)
class ControlRow:
    case: str
    metric: str
    engine: Stat | None
    md: Stat | None
    ratio: float | None  # engine mean / md mean; None when either is missing or md's is 0
    verdict: str  # ok | runner-biased | not measured
    planned: bool = True  # False: the case was not in the run's plan (a --quick subset)


def band_text(control: Control) -> str:
    lo, hi = control.band
    return f"{lo:g}..{hi:g}"


def evaluate(control: Control, stats: dict[tuple[str, str, str], Stat], cases: list[str], metrics: list[str],
             planned_cases: set[str] | None = None) -> list[ControlRow]:
    """One row per case and metric, in the order given."""
    lo, hi = control.band
    rows = []
    for case in cases:
        for metric in metrics:
            engine, md = stats.get((control.engine, case, metric)), stats.get((control.md, case, metric))
            planned = planned_cases is None or case in planned_cases
            if engine is None or md is None:
                rows.append(ControlRow(case, metric, engine, md, None, NOT_MEASURED, planned))
            elif md.mean == 0:  # no ratio: equal zeros agree, anything else against 0 does not
                rows.append(ControlRow(case, metric, engine, md, None, OK if engine.mean == 0 else BIASED, planned))
            else:
                ratio = engine.mean / md.mean
                rows.append(ControlRow(case, metric, engine, md, ratio, OK if lo <= ratio <= hi else BIASED, planned))
    return rows


def runner_path(arch_id: str) -> str | None:
    """"md" for the kernel's md, "engine" for what the engine's service host serves (its
    layouts and caches), None for an id the registry does not know here."""
    declared = archs.REGISTRY.get(arch_id)
    if declared is None:
        return None
    return "md" if declared.family == "md" else "engine"


def compared_labels(claim: Claim) -> tuple[str, ...]:
    return {"order": claim.order, "value": (claim.arch,)}.get(claim.kind, (claim.num, claim.den))


def concerns(claim: Claim, control: Control, scenario: Scenario) -> bool:
    """Whether the control bears on `claim`: it compares md's label of the control, or an
    architecture the engine serves with one md runs."""
    labels = compared_labels(claim)
    if control.md in labels:
        return True
    paths = set()
    for label in labels:
        try:
            paths.add(runner_path(scenario.arch(label).arch))
        except KeyError:
            continue
    return {"md", "engine"} <= paths


def claim_notes(claim: Claim, control: Control, scenario: Scenario, rows: list[ControlRow],
                cases: list[str]) -> list[str]:
    """The runner-biased notes for `claim` judged on `cases`: one per flagged case of its metric."""
    if not concerns(claim, control, scenario):
        return []
    notes = []
    for row in rows:
        if row.verdict == BIASED and row.metric == claim.metric and row.case in cases:
            notes.append(f"{BIASED}: engine raid5 / md raid5 = {ratio_text(row)} outside {band_text(control)} "
                         f"({row.case})")
    return notes


def ratio_text(row: ControlRow) -> str:
    if row.ratio is not None:
        return f"{row.ratio:.2f}"
    if row.engine is None or row.md is None:
        return ""
    return "- (both 0)" if row.engine.mean == 0 else "inf (md mean 0)"
