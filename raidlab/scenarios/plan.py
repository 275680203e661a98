"""Planning a scenario's runs (pure): which architecture, case and repetition run, in which
order, narrowed by --only, --case and --quick."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from raidlab.errors import UsageError
from raidlab.scenarios.schema import ArchEntry, Case, Scenario, quick_params


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    arch: ArchEntry
    case: Case
    repetition: int  # 1-based

    @property
    def run_id(self) -> str:
        return f"{self.arch.label}--{self.case.name}--r{self.repetition}"


def plan_runs(scenario: Scenario, *, quick: bool = False, repeat: int | None = None,
              only: tuple[str, ...] = (), cases_only: tuple[str, ...] = ()) -> list[PlannedRun]:
    """The runs in execution order (pure). `only` keeps those arch labels, `cases_only` those
    cases; `quick` applies the scenario's [quick] table (sizes, parameters, subsets, repeat)."""
    archs = list(scenario.archs)
    cases = list(scenario.cases)
    reps = scenario.repeat
    if quick:
        q = scenario.quick
        if "archs" in q:
            archs = [a for a in archs if a.label in q["archs"]]
        if "cases" in q:
            cases = [c for c in cases if c.name in q["cases"]]
        if "disk_size" in q:
            # A partition's size is the drive's partition table's, not a quick size.
            archs = [a if a.partitions is not None else dataclasses.replace(a, disk_size=q["disk_size"])
                     for a in archs]
        cases = [dataclasses.replace(c, params=quick_params(scenario, c)) for c in cases]
        reps = q.get("repeat", reps)
    archs = _select(archs, only, [a.label for a in scenario.archs], lambda a: a.label,
                    "--only", "architecture labelled", "labels", scenario.path)
    cases = _select(cases, cases_only, [c.name for c in scenario.cases], lambda c: c.name,
                    "--case", "case named", "cases", scenario.path)
    if repeat is not None:
        reps = repeat
    return [PlannedRun(a, c, k) for k in range(1, reps + 1) for a in archs for c in cases]


def _select(planned: list, wanted: tuple[str, ...], known: list[str], key, option: str, what: str,
            plural: str, path: Path) -> list:
    """`planned` narrowed to the entries `wanted` names (all of them when nothing is wanted);
    a name the scenario does not have, or a choice that leaves nothing to run, is refused."""
    if not wanted:
        return planned
    for name in wanted:
        if name not in known:
            raise UsageError(f"{option} {name}: no {what} {name!r} in {path}",
                             hint=f"{plural}: {', '.join(known)}")
    chosen = [p for p in planned if key(p) in wanted]
    if not chosen:
        raise UsageError(f"{option} {','.join(wanted)}: none of these runs in the --quick subset of {path}")
    return chosen
