"""Runners: where an architecture's block layer and its workload actually execute.

* native: on this host's kernel (loop devices over the engine's FUSE files; mdadm when the
  kernel has md). Needs root.
* vm: inside the lab VM (raidlab.vm), booted from the distribution's kernel package, for
  hosts without md; the member disks and the engine's volume reach it as virtio disks. The
  array daemon boots it; commands reach it through a RunnerSession (runners.session).
* virtual: the same engine code replayed on a virtual clock (runners.virtual), for kind =
  "sim" scenarios (runners.sim) and `raidlab sim`.

Every architecture of one comparison runs in the same runner, never mixed, so a runner is
chosen per comparison, not per architecture. `run_case` is the one entry for a planned run
of a scenario, whatever its clock: live runs build a fresh array and run the workload on it
(runners.live), sim runs replay a trace (runners.sim); both return the run's result document.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raidlab.runners import live, sim
from raidlab.scenarios import PlannedRun, Scenario


def run_case(run: PlannedRun, scenario: Scenario, *, runner: str, home: str | None,
             status: Callable[[str], None]) -> dict[str, Any]:
    """One planned run of `scenario` on `runner` (native or vm; a sim scenario replays in
    virtual time whatever the runner): its result document."""
    if scenario.kind == "sim":
        return sim.run_case(scenario, run.arch, run.case, repetition=run.repetition)
    return live.run_case(run, scenario, runner, home=home, status=status)
