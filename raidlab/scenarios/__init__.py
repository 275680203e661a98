"""Scenario files (scenarios/*.toml): one paper table or figure as data, checked before a run.

Why a strict loader: a scenario decides hours of runs and which published number is set
beside which measurement. A misspelt key (`disk_modle`), an unknown architecture, workload or
drive model must be refused at load time with one line naming the file and the key,
before any array is created; silently ignoring it would produce a plausible but
wrong comparison. So every table has a closed set of keys, every reference (arch ids, drive
models, workload names and parameters, labels used by [[paper]] and [[claim]]) is resolved
here, and the loaded Scenario is plain frozen data that `raidlab run` and `raidlab report`
both read. The schema is documented for authors in scenarios/README.md.

Beyond architectures, cases and the paper's numbers: [[arch]] may carry `series` and the
report may take its x value from an architecture option (the RAM-buffer sweep of VC-RAID
Fig. 6 varies an arch option, not a workload parameter); [workload] and [[case]] may carry
`filesystem`, `mkfs_options`, `mount_options` (Fig. 7 runs each program on a `-o sync` and
an async mount); [report] describes how the figure is drawn; [[claim]] may name several
cases; [control] names the engine's raid5 and md's raid5 run side by side on the same drives,
whose ratio tells whether an engine-vs-md difference comes from the two ways of running an
array rather than from the architecture compared.

The package: `schema` (the tables, their checks and the loaded Scenario), `plan` (the runs a
scenario asks for, pure), `axes` (where a report's x values come from). Everything a caller
uses is named here.
"""

from __future__ import annotations

from raidlab.scenarios.axes import ARCH_X_FIELDS, pattern_x, x_value
from raidlab.scenarios.plan import PlannedRun, plan_runs
from raidlab.scenarios.schema import (
    BETTER,
    CLAIM_KINDS,
    CONTROL_BAND,
    CONTROL_SAME,
    FILE_PARAMS,
    FILESYSTEMS,
    KINDS,
    MOUNT_OPTIONS,
    MOUNTED_FILESYSTEMS,
    PAPER_SHORT_NAMES,
    PAPERS,
    REPORT_STYLES,
    RUNNERS,
    SIM_WORKLOADS,
    ArchEntry,
    Case,
    Claim,
    Control,
    PaperValue,
    ReportSpec,
    Scenario,
    ScenarioError,
    allowed_mount_options,
    check_mount_options,
    load,
    load_doc,
    loads,
    paper_citation,
    parse_size,
    quick_params,
    validate_arch,
)

__all__ = [
    "ARCH_X_FIELDS", "BETTER", "CLAIM_KINDS", "CONTROL_BAND", "CONTROL_SAME", "FILESYSTEMS", "FILE_PARAMS", "KINDS",
    "MOUNTED_FILESYSTEMS", "MOUNT_OPTIONS", "PAPER_SHORT_NAMES", "PAPERS", "REPORT_STYLES", "RUNNERS", "SIM_WORKLOADS", "ArchEntry", "Case",
    "Claim", "Control", "PaperValue", "PlannedRun", "ReportSpec", "Scenario", "ScenarioError",
    "allowed_mount_options", "check_mount_options", "load", "load_doc", "loads", "paper_citation", "parse_size",
    "pattern_x", "plan_runs", "quick_params", "validate_arch", "x_value",
]
