"""Workload drivers: the papers' benchmarks run on an array through a RunnerSession.

`get(name)` returns the driver; each has `validate(params)`, `resolve(params)` (defaults
filled in), `mount_options(params)` (options the runner mounts with), `needs_mountpoint`
(False: it can run on the raw device), `raw_device_only` (True: never on a file system, fio),
`programs` (program -> Debian package, needed on the runner) and
`run(session, mountpoint, params, progress) -> result document` (see base.py for the schema).
The parameter declarations are documented, with the paper's cases, in workloads/*.toml at
the top of the repository.

Drivers are imported lazily so `import raidlab.workloads` stays cheap for the CLI.
"""

from __future__ import annotations

import importlib

from raidlab.errors import UsageError

# name -> module defining WORKLOAD
_MODULES = {
    "untar_copy_remove": "raidlab.workloads.untar",
    "postmark": "raidlab.workloads.postmark",
    "bonnie": "raidlab.workloads.bonnie",
    "tps": "raidlab.workloads.tps",
    "fio": "raidlab.workloads.fio",
    "seqfile": "raidlab.workloads.seqfile",
    "andrew": "raidlab.workloads.andrew",
    "replay": "raidlab.workloads.replay",
}

NAMES = tuple(_MODULES)
# name -> module whose `resolve_sim` checks the workload's parameters in virtual time (the
# trace replay's own parameters are raidlab.workloads.trace.validate_params)
_SIM_MODULES = {
    "seqfile": "raidlab.workloads.seqfile",
    "parallel": "raidlab.workloads.parallel",
    "bonnie": "raidlab.workloads.bonnie",
    "andrew": "raidlab.workloads.andrew",
}


def get(name: str):
    """The driver of workload `name`; UsageError naming the known ones otherwise."""
    module = _MODULES.get(name)
    if module is None:
        raise UsageError(f"unknown workload {name!r}", hint=f"known: {', '.join(NAMES)}",
                         workload=name)
    return importlib.import_module(module).WORKLOAD


def resolve_sim(name: str, params: dict) -> dict:
    """Workload `name`'s virtual-time parameters, defaults filled in and checked (UsageError
    naming the key or the constraint)."""
    module = _SIM_MODULES.get(name)
    if module is None:
        raise UsageError(f"workload {name!r} has no virtual-time parameters of its own",
                         hint=f"those that do: {', '.join(_SIM_MODULES)}")
    return importlib.import_module(module).resolve_sim(params)
