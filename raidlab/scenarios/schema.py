"""The scenario file's schema: every table's closed set of keys, the references resolved,
and the loaded Scenario as plain frozen data (the package doc says why a strict loader)."""


from __future__ import annotations

import contextlib
import dataclasses
import os
import pwd
import subprocess
import tomllib
from pathlib import Path
from typing import Any

from raidlab import archs, units, workloads
from raidlab.archs import REGISTRY as ARCHITECTURES
from raidlab.archs.tss import FAMILY as TSS
from raidlab.disks import catalog
from raidlab.disks.bus import parse_bus
from raidlab.disks.disk import FLUSH_SETTINGS, SPANS, WRITE_CACHE_SETTINGS
from raidlab.policies import make_policy
from raidlab.scenarios.axes import ARCH_X_FIELDS, pattern_x
from raidlab.errors import UsageError
from raidlab.outputs import trusted_uids
from raidlab.tools.mkfs import check_mkfs_options
from raidlab.vm.hosted import MIN_AVAILABLE_MIB
from raidlab.workloads import trace as trace_workload

# The papers (`paper = "000"` names seeds/000_*.txt; seeds/INDEX.md): how a report cites them.
PAPERS = {  # seed: (the system it describes, the citation)
    "000": ("VC-RAID", 'He & Yang, "On Design and Implementation of a Large Virtual NVRAM Cache for '
                       'Software RAID" (VC-RAID)'),
    "001": ("statically adaptive RAID0", 'McCormick, "Implementing a Statically Adaptive Software RAID System"'),
    "002": ("DCD", 'Hu & Yang, "DCD - Disk Caching Disk" (ISCA 1996)'),
    "003": ("TSS", 'Pallipadi & Gopinath, "Design, Implementation and Policy Framework for a Linux Based '
                   'Temperature Sensitive Storage" (TSS)'),
    "004": ("RAID-x", 'Hwang, Jin & Ho, "Orthogonal Striping and Mirroring in Distributed RAID for I/O-Centric '
                      'Cluster Computing" (RAID-x)'),
}


# Each paper's short name: the prefix of its scenarios' ids, and what `raidlab reproduce` takes.
PAPER_SHORT_NAMES = {"000": "vcraid", "001": "sa-raid", "002": "dcd", "003": "tss", "004": "raidx"}


def paper_citation(paper: str) -> str:
    """The paper a scenario reproduces, as a report names it (its seed number in brackets)."""
    return f"{PAPERS[paper][1]} [seed {paper}]" if paper in PAPERS else (paper or "-")


KINDS = ("live", "sim")
RUNNERS = ("native", "vm")
# "ext2": the VC-RAID paper's filesystem (§3, ext2 with 1 KiB blocks), no journal; made by
# mke2fs and mounted by the ext4 driver where the kernel has no ext2 of its own (Debian's).
# "none": raw-device workload (fio), mountpoint None.
FILESYSTEMS = ("ext4", "ext2", "none")
MOUNTED_FILESYSTEMS = ("ext4", "ext2")
CLAIM_KINDS = ("order", "ratio", "value")
REPORT_STYLES = ("bars", "lines")
BETTER = ("higher", "lower")


class ScenarioError(UsageError):
    """A scenario file is wrong. Fields: path, key. One line: '<file>: <key>: <what>'."""

    def __init__(self, path: Path | str, key: str, message: str, *, hint: str | None = None):
        super().__init__(f"{path}: {key}: {message}", hint=hint, path=str(path), key=key)
        self.path = str(path)
        self.key = key
        self.what = message


@dataclasses.dataclass(frozen=True)
class ArchEntry:
    label: str
    arch: str
    disks: int
    disk_model: str
    disk_size: int
    chunk: int
    discipline: str = "fifo"
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    series: str = ""  # report line this arch belongs to (default: its label)
    policy: str | None = None  # a TSS policy beside the replay or the live workload (raidlab.policies)
    policy_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    bus: str | None = None  # one bus the drives share (raidlab.disks.bus.parse_bus)
    drives: int | None = None  # members are partitions of this many drives, sim scenarios
    partitions: str | None = None  # members are these partitions of whole drives (raidlab.disks.partitions)
    write_cache: str = "model"  # every drive's write cache: model (its default) | on | off
    flushes: str = "honoured"  # the host's flushes and FUA at every drive: honoured | dropped (disks.disk)
    span: str | None = None  # every drive's bytes over its whole stroke (full) or at its start (start)
    # live: the members are the disks of a cluster of this many nodes, one disk each, brought
    # up for the run (raidlab.cluster; the array runs on node 0); None: the lab's own disks
    cluster_nodes: int | None = None


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    params: dict[str, Any]  # workload.params merged with the case's params
    filesystem: str = "ext4"
    mkfs_options: tuple[str, ...] = ()
    mount_options: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class PaperValue:
    arch: str
    case: str
    metric: str
    value: float
    unit: str = ""
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Claim:
    id: str
    text: str
    kind: str  # order | ratio | value
    metric: str
    cases: tuple[str, ...]
    better: str = "higher"
    order: tuple[str, ...] = ()
    num: str = ""
    den: str = ""
    min: float | None = None
    max: float | None = None
    source: str = ""
    arch: str = ""  # kind = "value": the [[arch]] label whose mean must lie in [min, max]
    den_case: str = ""  # kind = "ratio": the denominator's case (default: each claimed case itself)


@dataclasses.dataclass(frozen=True)
class Control:
    """[control]: the runner-fairness control. `engine` labels the engine's raid5, served as
    the engine's other architectures are; `md` labels md's raid5 on the same drives. The
    report flags a case and metric whose ratio engine / md of the means lies outside `band`."""

    engine: str
    md: str
    band: tuple[float, float] = (0.8, 1.25)
    text: str = ""


@dataclasses.dataclass(frozen=True)
class ReportSpec:
    style: str = "bars"  # bars: groups = cases, one bar per arch (or, with x an [[arch]] field such as
    #                      partitions: a panel per case, groups = its values, a bar per series);
    #                      lines: metric against x
    metrics: tuple[str, ...] = ()  # metrics to draw (default: those of [[paper]] and [[claim]])
    better: dict[str, str] = dataclasses.field(default_factory=dict)  # metric -> higher|lower
    x: str = ""  # lines: a case parameter or arch option giving the x value
    x_label: str = ""
    panel: str = ""  # lines: the case parameter named first in panel titles (one panel per
    #                  set of case parameters other than x)
    y_label: str = ""


@dataclasses.dataclass(frozen=True)
class Scenario:
    path: Path
    id: str
    title: str
    paper: str
    source: str
    kind: str
    runner: str
    repeat: int
    description: str
    vm_available_mib: int | None  # runner vm: MemAvailable the workload gets (None: all of the VM's)
    archs: tuple[ArchEntry, ...]
    workload: str
    cases: tuple[Case, ...]
    paper_values: tuple[PaperValue, ...]
    claims: tuple[Claim, ...]
    report: ReportSpec
    quick: dict[str, Any]
    text: str  # the file as read, kept in every results directory
    control: Control | None = None  # [control], if the scenario has one
    cold_start: bool = True  # live runs: settle the array and drop the page cache after mkfs (raidlab.runners.live)
    host: dict[str, Any] | None = None  # [host]: the machine virtual time charges (raidlab.disks.host.resolve)

    def arch(self, label: str) -> ArchEntry:
        for entry in self.archs:
            if entry.label == label:
                return entry
        raise KeyError(label)

    def case(self, name: str) -> Case:
        for case in self.cases:
            if case.name == name:
                return case
        raise KeyError(name)

    def better(self, metric: str) -> str:
        if metric in self.report.better:
            return self.report.better[metric]
        for pattern, value in self.report.better.items():
            if "{x}" in pattern and pattern_x(pattern, metric) is not None:
                return value
        return "higher"


# --- the schema: table -> allowed keys ---------------------------------------------------

_TOP = {"scenario", "arch", "workload", "case", "quick", "paper", "claim", "report", "control", "host", "sweep"}
_SCENARIO = {"id", "title", "paper", "source", "kind", "runner", "repeat", "description", "vm_available_memory",
             "cold_start"}
_ARCH = {"label", "arch", "disks", "disk_model", "disk_size", "chunk", "discipline", "options", "series", "policy",
         "cluster_nodes",
         "policy_options", "bus", "drives", "partitions", "write_cache", "flushes", "span"}
_WORKLOAD = {"name", "params", "filesystem", "mkfs_options", "mount_options"}
_CASE = {"name", "params", "filesystem", "mkfs_options", "mount_options"}
_QUICK = {"repeat", "disk_size", "params", "cases", "archs", "case_params"}
_PAPER = {"arch", "case", "metric", "value", "unit", "note"}
_CLAIM = {"id", "text", "kind", "metric", "case", "cases", "better", "order", "num", "den", "min", "max", "source",
          "den_case",
          "arch"}
_REPORT = {"style", "metrics", "better", "x", "x_label", "panel", "y_label"}
_CONTROL = {"engine", "md", "band", "text"}
_SWEEP = {"key", "values", "label", "reason"}


def parse_size(text: Any, path: Path, key: str) -> int:
    """'256M', '1G', '512K' (raidlab.units.parse_size) or an int of bytes; a bad value is a
    ScenarioError naming the file and the key."""
    try:
        return int(text) if isinstance(text, int) else units.parse_size(str(text))
    except (UsageError, ValueError) as exc:
        raise ScenarioError(path, key, f"bad size {text!r} ({exc})") from None


class _Reader:
    """Typed access to one TOML table with the file and key path for every error."""

    def __init__(self, path: Path, key: str, table: Any, allowed: set[str]):
        self.path, self.key = path, key
        if not isinstance(table, dict):
            raise ScenarioError(path, key, "must be a table")
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise ScenarioError(path, f"{key}.{unknown[0]}" if key else unknown[0], "unknown key",
                                hint=f"allowed here: {', '.join(sorted(allowed))}")
        self.table = table

    def where(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def get(self, name: str, kind: type | tuple, default: Any = dataclasses.MISSING) -> Any:
        if name not in self.table:
            if default is dataclasses.MISSING:
                raise ScenarioError(self.path, self.where(name), "missing")
            return default
        value = self.table[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise ScenarioError(self.path, self.where(name), f"must be {names}, not {value!r}")
        return value

    def choice(self, name: str, choices: tuple[str, ...], default: Any = dataclasses.MISSING) -> str:
        value = self.get(name, str, default)
        if value not in choices:
            raise ScenarioError(self.path, self.where(name), f"unknown value {value!r}",
                                hint=f"choose one of: {', '.join(choices)}")
        return value

    def strings(self, name: str, default: Any = ()) -> tuple[str, ...]:
        value = self.get(name, list, list(default))
        if not all(isinstance(v, str) for v in value):
            raise ScenarioError(self.path, self.where(name), "must be a list of strings")
        return tuple(value)

    def run_file_part(self, name: str, what: str, taken: set[str], rule: str = "") -> str:
        """A name that becomes part of the run files' names (`Run.name`: label, case,
        repetition joined by '--'): unique among `taken`, with no '/', space, backslash or
        '--'. `rule` follows the message for a name that breaks that."""
        value = self.get(name, str)
        if value in taken:
            raise ScenarioError(self.path, self.where(name), f"duplicate {what} {value!r}")
        if not value or any(c in value for c in "/ \\") or "--" in value:
            raise ScenarioError(self.path, self.where(name), f"{value!r} cannot name a run file{rule}")
        return value

    def tables(self, name: str) -> list[Any]:
        value = self.table.get(name, [])
        if not isinstance(value, list):
            raise ScenarioError(self.path, self.where(name), f"must be an array of tables ([[{name}]])")
        return value


def load(path: str | Path, *, check_references: bool = True) -> Scenario:
    """Read and validate a scenario file; raise ScenarioError naming file and key.

    check_references=False skips the registry look-ups (architectures, models, workloads):
    the report uses it to read the copy kept in a results directory on a machine where a
    family that ran then is not importable now."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read scenario {path}: {exc.strerror}",
                         hint="give the path of a scenarios/*.toml file") from None
    return loads(text, path, check_references=check_references, file_checks=True)


# The case parameters that name a file raidlab opens.
FILE_PARAMS = ("trace",)


def _check_named_files(scenario: Scenario, path: Path) -> None:
    """A scenario file another user wrote (a student's, run by root) names only files that
    user could read: each is opened by a child process running as the file's owner (`test
    -r`), so root never reads for them what they could not (ScenarioError otherwise)."""
    owner = os.stat(path).st_uid
    if owner in trusted_uids():
        return
    for i, case in enumerate(scenario.cases):
        for key in FILE_PARAMS:
            if key not in case.params:
                continue
            named = str(case.params[key])
            try:
                readable = subprocess.run(["test", "-r", named], user=owner, group=_primary_gid(owner),
                                          extra_groups=[], capture_output=True, timeout=30).returncode == 0
            except (OSError, subprocess.SubprocessError):
                readable = False
            if not readable:
                raise ScenarioError(path, f"case[{i}].params.{key}",
                                    f"{named!r} is not a file the scenario's owner (uid {owner}) can read",
                                    hint="a scenario names only files its author may read")


def _primary_gid(uid: int) -> int:
    """The primary group of `uid` (the nogroup of `nobody` where the user is unknown)."""
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return 65534


def _check_sim_references(scenario: Scenario) -> Scenario:
    """A kind = "sim" scenario's references checked against virtual time: architectures that
    run there (the registry's, with the traditional single `disk` that no array daemon
    builds), one drive model per [[arch]], each architecture's own check for virtual time,
    and the trace workload's case parameters. ScenarioError (one line naming file and key) before anything
    runs."""
    where = scenario.path
    known = archs.names("sim")
    for i, entry in enumerate(scenario.archs):
        if entry.arch not in known:
            raise ScenarioError(where, f"arch[{i}].arch", f"unknown architecture {entry.arch!r}",
                                hint=f"replayable: {', '.join(known)}")
        if entry.cluster_nodes is not None:
            raise ScenarioError(where, f"arch[{i}].cluster_nodes", "a live cluster is for live scenarios",
                                hint="virtual time runs the cluster's twin: the workload parallel")
        if "," in entry.disk_model and scenario.workload == "trace":
            raise ScenarioError(where, f"arch[{i}].disk_model",
                                "a replay takes one disk model for every member, not a list",
                                hint="per-member models are for live arrays and the seqfile workload")
        for model in entry.disk_model.split(","):
            if model not in catalog.names():
                raise ScenarioError(where, f"arch[{i}].disk_model", f"unknown disk model {model!r}")
        try:  # the architecture's own check, for virtual time
            archs.validate(entry.arch, entry.disks, entry.disk_size, entry.chunk, dict(entry.options), "sim",
                           disk_model=entry.disk_model, partitions=entry.partitions)
        except UsageError as exc:
            raise ScenarioError(where, f"arch[{i}].options", str(exc)) from None
    if scenario.workload not in SIM_WORKLOADS:
        raise ScenarioError(where, "workload.name", f"{scenario.workload!r} does not run in virtual time",
                            hint=f"sim scenarios run: {', '.join(SIM_WORKLOADS)}")
    if scenario.workload == "trace":
        check = trace_workload.validate_params
    else:
        def check(params: dict) -> None:
            workloads.resolve_sim(scenario.workload, params)
    for i, case in enumerate(scenario.cases):
        for variant, params in (("params", case.params), ("quick params", quick_params(scenario, case))):
            try:
                check(dict(params))
            except UsageError as exc:
                raise ScenarioError(where, f"case[{i}] ({case.name}) {variant}", str(exc)) from None
    return scenario


# a block trace replayed; seqfile's requests (raidlab.runners.stream); parallel clients on the
# cluster's twin (raidlab.runners.parallel); Bonnie from one node of the twin
# (raidlab.runners.bonnie); Andrew on every client node of the twin (raidlab.runners.andrew)
SIM_WORKLOADS = ("trace", "seqfile", "parallel", "bonnie", "andrew")


def loads(text: str, path: Path | str = "<scenario>", *, check_references: bool = True,
          file_checks: bool = False) -> Scenario:
    path = Path(path)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(path, "(syntax)", str(exc)) from None
    return load_doc(doc, text, path, check_references=check_references, file_checks=file_checks)


def load_doc(doc: dict[str, Any], text: str, path: Path | str = "<scenario>", *, check_references: bool = True,
             file_checks: bool = False) -> Scenario:
    """A scenario from its parsed TOML document `doc`, whose text is `text` (kept as
    Scenario.text); `loads` is this after parsing. `raidlab sweep` builds each variant here
    from the base document with one assumption changed, so a variant passes every check a
    file does.

    file_checks: also make the checks `load` makes of a file: the files the cases name must
    be readable by the owner of `path` (a variant's `path` is its base file), and a sim
    scenario's references are checked against virtual time. [[sweep]] tables (the
    assumptions `raidlab sweep` varies when given none) are checked here for their keys and
    types; what each key names is resolved by raidlab.sweep."""
    path = Path(path)
    top = _Reader(path, "", doc, _TOP)
    for i, table in enumerate(top.tables("sweep")):
        r = _Reader(path, f"sweep[{i}]", table, _SWEEP)
        r.get("key", str), r.get("label", str, ""), r.get("reason", str, "")
        if not r.get("values", list):
            raise ScenarioError(path, r.where("values"), "needs at least one value")

    head = _Reader(path, "scenario", doc.get("scenario"), _SCENARIO) if "scenario" in doc else None
    if head is None:
        raise ScenarioError(path, "scenario", "missing [scenario] table")
    scenario_id = head.get("id", str)
    paper = head.get("paper", str, "")
    if paper and paper not in PAPERS:
        raise ScenarioError(path, "scenario.paper", f"unknown paper {paper!r}",
                            hint="known: " + ", ".join(f"{k} ({system})" for k, (system, _) in PAPERS.items()))
    if not scenario_id or any(c in scenario_id for c in "/ \\") or scenario_id.startswith("."):
        raise ScenarioError(path, "scenario.id", f"{scenario_id!r} cannot name a results directory")
    kind = head.choice("kind", KINDS, "live")
    runner = head.choice("runner", RUNNERS, "native")
    repeat = head.get("repeat", int, 1)
    if repeat < 1:
        raise ScenarioError(path, "scenario.repeat", "must be at least 1")

    errors: list[ScenarioError] = []  # problems in one [[arch]], [[paper]], [[claim]] or case: all are listed
    archs = _load_archs(path, top.tables("arch"), check_references and kind == "live", runner, errors)
    if kind == "live":
        for i, entry in enumerate(archs):
            if entry.drives is not None:
                raise ScenarioError(path, f"arch[{i}].drives", "drives is for sim scenarios (kind = \"sim\")",
                                    hint="live members are whole drives, or partitions named by `partitions`")
            declared = ARCHITECTURES.get(entry.arch)
            if entry.policy is not None and declared is not None and declared.family != TSS.name:
                raise ScenarioError(path, f"arch[{i}].policy", f"{entry.arch} has no control interface for a policy",
                                    hint="policies manage arrays of the tss family")
    workload_name, cases = _load_workload(path, doc, top.tables("case"))
    # An [[arch]] with a problem keeps its label here, so what refers to it is not also refused.
    labels = {a.label for a in archs} | {t["label"] for t in top.tables("arch")
                                         if isinstance(t, dict) and isinstance(t.get("label"), str)}
    case_names = {c.name for c in cases}
    paper_values = _load_paper(path, top.tables("paper"), labels, case_names, errors)
    claims = _load_claims(path, top.tables("claim"), labels, case_names, errors)
    report = _load_report(path, doc.get("report", {}), claims)
    control = None
    if "control" in doc:
        with _collecting(errors):
            control = _load_control(path, doc["control"], labels, archs, check_references)
    quick = _load_quick(path, doc.get("quick", {}), labels, case_names)
    host = _load_host(path, doc.get("host"), kind, {c.id for c in claims}, errors)
    vm_available_mib = None
    if "vm_available_memory" in head.table:
        key = "scenario.vm_available_memory"
        vm_available_mib = parse_size(head.get("vm_available_memory", (str, int)), path, key) >> 20
        if vm_available_mib < MIN_AVAILABLE_MIB:
            raise ScenarioError(path, key, f"{vm_available_mib} MiB: at least {MIN_AVAILABLE_MIB} MiB")
    scenario = Scenario(
        path=path, id=scenario_id, title=head.get("title", str), paper=paper,
        source=head.get("source", str, ""), kind=kind, runner=runner, repeat=repeat,
        vm_available_mib=vm_available_mib,
        description=head.get("description", str, ""), archs=archs, workload=workload_name, cases=cases,
        paper_values=paper_values, claims=claims, report=report, quick=quick, text=text, control=control,
        cold_start=head.get("cold_start", bool, True), host=host)
    if check_references and not errors:
        _check_workload_params(scenario, quick, errors)
    if errors:
        raise _all_of(errors)
    if file_checks:
        _check_named_files(scenario, path)
        if check_references and kind == "sim":
            # A replay's references are virtual time's: architectures no array daemon builds (the
            # traditional single `disk`) and the trace workload's case parameters.
            return _check_sim_references(scenario)
    return scenario


def _load_host(path: Path, table: Any, kind: str, claim_ids: set[str], errors: list) -> dict[str, Any] | None:
    """The [host] table as written (model, replaced values, `calibrated`), checked against the
    host catalog; virtual time only (a live run's host is this machine)."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ScenarioError(path, "host", "must be a table ([host])")
    if kind != "sim":
        raise ScenarioError(path, "host", "a host model is for sim scenarios (kind = \"sim\")",
                            hint="a live run's host is the machine it runs on")
    from raidlab.disks import host as hosts

    calibrated_on = table.get("calibrated_on", [])
    if not isinstance(calibrated_on, list) or not all(isinstance(c, str) for c in calibrated_on):
        raise ScenarioError(path, "host.calibrated_on", "must be a list of claim ids")
    unknown = [c for c in calibrated_on if c not in claim_ids]
    if unknown:
        raise ScenarioError(path, "host.calibrated_on", f"no claim {unknown[0]!r} in this scenario")
    if calibrated_on and "calibrated" not in table:
        raise ScenarioError(path, "host.calibrated", "say how the values were calibrated on the claims named "
                                                     "in calibrated_on")
    with _collecting(errors):
        try:
            hosts.resolve(table)
        except UsageError as exc:
            raise ScenarioError(path, "host", str(exc), hint=getattr(exc, "hint", None)) from None
    return dict(table)


@contextlib.contextmanager
def _collecting(errors: list | None):
    """Record a ScenarioError in `errors` and go on with the next entry (None: raise it)."""
    try:
        yield
    except ScenarioError as exc:
        if errors is None:
            raise
        errors.append(exc)


def _all_of(errors: list[ScenarioError]) -> ScenarioError:
    """One error naming every problem found (one line), keyed by the first."""
    first = errors[0]
    if len(errors) == 1:
        return first
    rest = "; ".join(f"{e.key}: {e.what}" for e in errors[1:])
    return ScenarioError(first.path, first.key, f"{first.what}; and {len(errors) - 1} more: {rest}", hint=first.hint)


def _load_archs(path: Path, tables: list, check: bool, runner: str = "native",
                errors: list | None = None) -> tuple[ArchEntry, ...]:
    if not tables:
        raise ScenarioError(path, "arch", "no [[arch]] entry")
    known_archs = None
    out: list[ArchEntry] = []
    for i, table in enumerate(tables):
        with _collecting(errors):
            r = _Reader(path, f"arch[{i}]", table, _ARCH)
            label = r.run_file_part("label", "label", {a.label for a in out}, " (no '/', space, '--')")
            arch = r.get("arch", str)
            options = r.get("options", dict, {})
            where = _partitions(r)
            disks = len(where.members) if where is not None and "disks" not in r.table else r.get("disks", int)
            if where is not None and disks != len(where.members):
                raise ScenarioError(path, r.where("disks"), f"{disks}, but partitions lists {len(where.members)} members")
            if where is not None and "disk_size" in r.table:
                raise ScenarioError(path, r.where("disk_size"), "a member's size comes from its partition",
                                    hint="leave disk_size out beside partitions")
            entry = ArchEntry(label=label, arch=arch, disks=disks, disk_model=_disk_model(r, disks),
                              disk_size=(where.member_bytes if where is not None else
                                         parse_size(r.get("disk_size", (str, int), "256M"), path, r.where("disk_size"))),
                              chunk=parse_size(r.get("chunk", (str, int), "512K"), path, r.where("chunk")),
                              discipline=r.choice("discipline", ("fifo", "sstf", "scan"), "fifo"),
                              options=options, series=r.get("series", str, label),
                              policy=r.get("policy", str, None), policy_options=r.get("policy_options", dict, {}),
                              bus=r.get("bus", (str, int, float), None), drives=r.get("drives", int, None),
                              partitions=where.text if where is not None else None,
                              write_cache=r.choice("write_cache", WRITE_CACHE_SETTINGS, "model"),
                              flushes=r.choice("flushes", FLUSH_SETTINGS, "honoured"),
                              span=r.choice("span", SPANS) if r.get("span", str, None) is not None else None,
                              cluster_nodes=r.get("cluster_nodes", int, None))
            if entry.cluster_nodes is not None and check:  # live; virtual time refuses it (the twin)
                _check_cluster_entry(path, r, entry, runner)
            if entry.drives is not None and entry.partitions is not None:
                raise ScenarioError(path, r.where("drives"), "give partitions or drives, not both")
            if entry.drives is not None and entry.drives < 1:
                raise ScenarioError(path, r.where("drives"), "must be at least 1")
            if entry.bus is not None:
                try:
                    parse_bus(entry.bus, entry.disk_model.split(","))
                except UsageError as exc:
                    raise ScenarioError(path, r.where("bus"), str(exc)) from None
            if entry.policy is not None:
                try:
                    make_policy(entry.policy, entry.policy_options)
                except UsageError as exc:
                    raise ScenarioError(path, r.where("policy"), str(exc)) from None
            if check:
                if known_archs is None:
                    known_archs = archs.names(runner)
                if arch not in known_archs:
                    raise ScenarioError(path, r.where("arch"), f"unknown architecture {arch!r}",
                                        hint=f"known here: {', '.join(known_archs)}")
                models = entry.disk_model.split(",")
                for j, model in enumerate(models):
                    _check_model(path, r.where("disk_model") + (f"[{j}]" if len(models) > 1 else ""), model)
                for key, value in options.items():  # cache-disk models are arch options
                    if key.endswith("model") and isinstance(value, str):
                        _check_model(path, f"{r.where('options')}.{key}", value)
                    elif key.endswith("models") and isinstance(value, list):
                        for j, model in enumerate(value):
                            _check_model(path, f"{r.where('options')}.{key}[{j}]", model)
                try:
                    validate_arch(entry, runner)
                except UsageError as exc:
                    raise ScenarioError(path, f"arch[{i}] ({label})", str(exc)) from None
                except TypeError as exc:  # an option the layout does not take
                    raise ScenarioError(path, r.where("options"), str(exc)) from None
            out.append(entry)
    return tuple(out)


def _check_cluster_entry(path: Path, r: "_Reader", entry: ArchEntry, runner: str) -> None:
    """[[arch]].cluster_nodes: an engine layout, run natively, over one disk per node."""
    if entry.cluster_nodes != entry.disks:
        raise ScenarioError(path, r.where("cluster_nodes"), f"{entry.cluster_nodes} nodes for disks = {entry.disks}",
                            hint="a cluster's array has one member per node here: give disks = cluster_nodes")
    if runner != "native":
        raise ScenarioError(path, r.where("cluster_nodes"), "a cluster runs on this host (runner native), "
                            f"not in runner {runner!r}")
    for key in ("partitions", "bus", "drives"):
        if key in r.table:
            raise ScenarioError(path, r.where(key), "not for an array over a cluster")
    family = archs.get(entry.arch).family if entry.arch in archs.names() else None
    if family not in (None, "engine"):
        raise ScenarioError(path, r.where("arch"), f"an array over a cluster is an engine layout, not {entry.arch}")


def validate_arch(entry: ArchEntry, runner: str) -> None:
    """The host family's own check of one [[arch]] for `runner` (md refuses the native runner
    on a kernel without md); raises UsageError / CapabilityError, starts nothing."""
    archs.validate(entry.arch, entry.disks, entry.disk_size, entry.chunk, dict(entry.options), runner,
                   disk_model=entry.disk_model, partitions=entry.partitions)


def _partitions(r: _Reader):
    """[[arch]].partitions, placed on the entry's drive model (raidlab.disks.partitions), or None."""
    text = r.get("partitions", str, None)
    if text is None:
        return None
    from raidlab.disks import partitions

    try:
        return partitions.layout(text, str(r.table.get("disk_model", "none")))
    except UsageError as exc:
        raise ScenarioError(r.path, r.where("partitions"), str(exc)) from None


def _disk_model(r: _Reader, disks: int) -> str:
    """[[arch]].disk_model: one name for every member, or one per member, in member order, as
    a TOML list or a comma-separated string, normalised to the string "m0,m1,..." that
    ArraySpec.disk_model keeps (raidlab.disks.catalog.member_models reads it)."""
    value = r.get("disk_model", (str, list), "none")
    if isinstance(value, list):
        if not value or not all(isinstance(v, str) for v in value):
            raise ScenarioError(r.path, r.where("disk_model"),
                                f"must be a model name or a list of names, not {value!r}")
        value = ",".join(value)
    models = [m.strip() for m in value.split(",")]
    if len(models) > 1 and len(models) != disks:
        raise ScenarioError(r.path, r.where("disk_model"), f"{len(models)} models for disks = {disks}",
                            hint="give one model per member, in member order, or one name for every member")
    return ",".join(models)


def _check_model(path: Path, key: str, model: str) -> None:
    if model not in catalog.names():
        raise ScenarioError(path, key, f"unknown disk model {model!r}",
                            hint=f"see `raidlab disk models`: {', '.join(catalog.names())}")


# The mount -o options a scenario may give, per file system (mount(8), ext4(5); Debian mounts
# ext2 with the ext4 driver): how the file system behaves, never a path, a device, an owner
# or another kind of mount. mkfs and mount run as root on a file anyone may have written, so
# `loop`, `offset=`, `journal_path=`, `usrjquota=`, `context=`, `uid=`/`resuid=`-style
# ownership, `user`/`owner`, `x-*` and `helper=` are refused, as is `errors=panic`, which
# would take the host down. Name -> its values: None a bare flag, a tuple the words it takes
# (None in it: bare too), a range the decimal numbers.
_MOUNT_EXT2: dict[str, Any] = {
    **dict.fromkeys(("sync", "async", "dirsync", "atime", "noatime", "relatime", "norelatime", "strictatime",
                     "nostrictatime", "lazytime", "nolazytime", "diratime", "nodiratime", "nodev", "nosuid", "noexec",
                     "user_xattr", "nouser_xattr", "acl", "noacl", "discard", "nodiscard", "block_validity",
                     "noblock_validity", "nombcache", "i_version")),
    "errors": ("continue", "remount-ro"),
    "stripe": range(1, 2 ** 32),
    "inode_readahead_blks": range(0, 2 ** 31),
}
MOUNT_OPTIONS = {
    "ext2": _MOUNT_EXT2,
    "ext4": {
        **_MOUNT_EXT2,
        **dict.fromkeys(("nobarrier", "journal_checksum", "nojournal_checksum", "journal_async_commit", "noload",
                         "norecovery", "delalloc", "nodelalloc", "auto_da_alloc", "noauto_da_alloc", "dioread_lock",
                         "dioread_nolock")),
        "data": ("journal", "ordered", "writeback"),
        "data_err": ("abort", "ignore"),
        "barrier": (None, "0", "1"),
        "commit": range(0, 86401),  # seconds
        "journal_ioprio": range(0, 8),
        "max_batch_time": range(0, 2 ** 31), "min_batch_time": range(0, 2 ** 31),  # microseconds
    },
}


def _mount_value_ok(values: Any, value: str | None) -> bool:
    if isinstance(values, range):
        return value is not None and value.isascii() and value.isdecimal() and int(value) in values
    return value in (values or (None,))


def allowed_mount_options(fstype: str) -> str:
    """What a scenario may give `mount -t FSTYPE -o`, as one line for a message."""
    def shown(name: str, values: Any) -> str:
        if values is None:
            return name
        if isinstance(values, range):
            return f"{name}={values.start}..{values.stop - 1}"
        words = "|".join(v for v in values if v is not None)
        return f"{name}[={words}]" if None in values else f"{name}={words}"

    return ", ".join(shown(name, values) for name, values in MOUNT_OPTIONS[fstype].items())


def check_mount_options(fstype: str, options: tuple[str, ...] | list[str]) -> None:
    """Refuse, with one line naming it, any mount option outside FSTYPE's allow-list
    (MOUNT_OPTIONS). The runner joins the options with commas, so each string is split on
    them and every part is checked."""
    allowed = MOUNT_OPTIONS[fstype]
    for option in options:
        for part in option.split(","):
            name, has_value, value = part.partition("=")
            if name not in allowed or not _mount_value_ok(allowed[name], value if has_value else None):
                raise UsageError(f"mount option {part!r} is not allowed for {fstype}",
                                 hint=f"allowed: {allowed_mount_options(fstype)}")


def _fs_fields(r: _Reader, base: dict) -> dict:
    """A [workload] or [[case]]'s file system and its mkfs and mount options (a case inherits
    the workload's), the options checked against the file system's allow-lists
    (raidlab.tools.mkfs.check_mkfs_options, check_mount_options). A "none" case runs neither
    mkfs nor mount; its options are checked as ext4's, so no scenario carries an option that
    would be refused were its file system changed."""
    fields = {
        "filesystem": r.choice("filesystem", FILESYSTEMS, base.get("filesystem", "ext4")),
        "mkfs_options": r.strings("mkfs_options", base.get("mkfs_options", ())),
        "mount_options": r.strings("mount_options", base.get("mount_options", ())),
    }
    fstype = fields["filesystem"] if fields["filesystem"] in MOUNTED_FILESYSTEMS else "ext4"
    for name, check in (("mkfs_options", check_mkfs_options), ("mount_options", check_mount_options)):
        try:
            check(fstype, fields[name])
        except UsageError as exc:
            key = r.where(name) if name in r.table else f"workload.{name} (inherited by {r.key})"
            raise ScenarioError(r.path, key, exc.message, hint=exc.hint) from None
    return fields


def _load_workload(path: Path, doc: dict, case_tables: list):
    if "workload" not in doc:
        raise ScenarioError(path, "workload", "missing [workload] table")
    w = _Reader(path, "workload", doc["workload"], _WORKLOAD)
    name = w.get("name", str)
    base_params = w.get("params", dict, {})
    base_fs = _fs_fields(w, {})
    cases: list[Case] = []
    for i, table in enumerate(case_tables or [{"name": "default"}]):
        r = _Reader(path, f"case[{i}]", table, _CASE)
        case_name = r.run_file_part("name", "case", {c.name for c in cases})
        params = {**base_params, **r.get("params", dict, {})}
        cases.append(Case(name=case_name, params=params, **_fs_fields(r, base_fs)))
    return name, tuple(cases)


def _check_workload_params(scenario: Scenario, quick: dict, errors: list | None = None) -> None:
    """Every case's parameters (and the quick variant) must be accepted by the driver."""
    if scenario.kind != "live":
        return
    try:
        workload = workloads.get(scenario.workload)
    except (UsageError, KeyError, LookupError) as exc:
        raise ScenarioError(scenario.path, "workload.name", f"unknown workload {scenario.workload!r}",
                            hint=getattr(exc, "hint", None) or str(exc)) from None
    for i, case in enumerate(scenario.cases):
        for variant, params in (("", case.params), ("quick ", quick_params(scenario, case))):
            with _collecting(errors):
                try:
                    workload.validate(dict(params))
                except UsageError as exc:
                    raise ScenarioError(scenario.path, f"case[{i}] ({case.name}) {variant}params",
                                        str(exc)) from None


def quick_params(scenario: Scenario, case: Case) -> dict:
    quick = scenario.quick
    return {**case.params, **quick.get("params", {}), **quick.get("case_params", {}).get(case.name, {})}


def _load_paper(path: Path, tables: list, labels: set, cases: set, errors: list | None = None
                ) -> tuple[PaperValue, ...]:
    out = []
    for i, table in enumerate(tables):
        with _collecting(errors):
            r = _Reader(path, f"paper[{i}]", table, _PAPER)
            value = PaperValue(arch=r.get("arch", str), case=r.get("case", str), metric=r.get("metric", str),
                               value=r.get("value", float), unit=r.get("unit", str, ""), note=r.get("note", str, ""))
            if value.arch not in labels:
                raise ScenarioError(path, r.where("arch"), f"no [[arch]] labelled {value.arch!r}")
            if value.case not in cases:
                raise ScenarioError(path, r.where("case"), f"no [[case]] named {value.case!r}")
            out.append(value)
    return tuple(out)


def _load_claims(path: Path, tables: list, labels: set, cases: set, errors: list | None = None
                 ) -> tuple[Claim, ...]:
    out = []
    for i, table in enumerate(tables):
        with _collecting(errors):
            r = _Reader(path, f"claim[{i}]", table, _CLAIM)
            kind = r.choice("kind", CLAIM_KINDS)
            if "case" in r.table and "cases" in r.table:
                raise ScenarioError(path, r.where("cases"), "give case or cases, not both")
            claim_cases = (r.get("case", str),) if "case" in r.table else r.strings("cases")
            if not claim_cases:
                raise ScenarioError(path, r.where("case"), "missing")
            for name in claim_cases:
                if name not in cases:
                    raise ScenarioError(path, r.where("case"), f"no [[case]] named {name!r}")
            fields = dict(id=r.get("id", str), text=r.get("text", str), kind=kind, metric=r.get("metric", str),
                          cases=claim_cases, better=r.choice("better", BETTER, "higher"), source=r.get("source", str, ""))
            if kind == "order":
                order = r.strings("order")
                if len(order) < 2:
                    raise ScenarioError(path, r.where("order"), "needs at least two labels, best first")
                for label in order:
                    if label not in labels:
                        raise ScenarioError(path, r.where("order"), f"no [[arch]] labelled {label!r}")
                fields["order"] = order
                for extra in ("num", "den", "min", "max", "arch", "den_case"):
                    if extra in r.table:
                        raise ScenarioError(path, r.where(extra), f"not for kind = \"order\"")
            elif kind == "value":
                fields["arch"] = r.get("arch", str)
                if fields["arch"] not in labels:
                    raise ScenarioError(path, r.where("arch"), f"no [[arch]] labelled {fields['arch']!r}")
                fields["min"] = r.get("min", float)
                fields["max"] = r.get("max", float)
                if fields["min"] > fields["max"]:
                    raise ScenarioError(path, r.where("min"), "min is above max")
                for extra in ("num", "den", "order", "den_case"):
                    if extra in r.table:
                        raise ScenarioError(path, r.where(extra), "not for kind = \"value\" (it takes arch, min, max)")
            else:
                for side in ("num", "den"):
                    fields[side] = r.get(side, str)
                    if fields[side] not in labels:
                        raise ScenarioError(path, r.where(side), f"no [[arch]] labelled {fields[side]!r}")
                fields["min"] = r.get("min", float, None)
                fields["max"] = r.get("max", float, None)
                fields["den_case"] = r.get("den_case", str, "")
                if fields["den_case"] and fields["den_case"] not in cases:
                    raise ScenarioError(path, r.where("den_case"), f"no [[case]] named {fields['den_case']!r}")
                if fields["min"] is None and fields["max"] is None:
                    raise ScenarioError(path, r.where("min"), "a ratio claim needs min, max or both")
                for extra in ("order", "arch"):
                    if extra in r.table:
                        raise ScenarioError(path, r.where(extra), "not for kind = \"ratio\"")
            if fields["id"] in {c.id for c in out}:
                raise ScenarioError(path, r.where("id"), f"duplicate claim id {fields['id']!r}")
            out.append(Claim(**fields))
    return tuple(out)


def _load_report(path: Path, table: Any, claims: tuple[Claim, ...]) -> ReportSpec:
    r = _Reader(path, "report", table, _REPORT)
    better = r.get("better", dict, {})
    for metric, value in better.items():
        if value not in BETTER:
            raise ScenarioError(path, f"report.better.{metric}", f"must be one of {', '.join(BETTER)}")
    for claim in claims:
        better.setdefault(claim.metric, claim.better)
    style = r.choice("style", REPORT_STYLES, "bars")
    x = r.get("x", str, "")
    if style == "lines" and not x:
        raise ScenarioError(path, "report.x", "a line figure needs x (a case parameter or arch option)")
    if style == "bars" and x and x not in ARCH_X_FIELDS:
        raise ScenarioError(path, "report.x", f"bars take x only from an [[arch]] field ({', '.join(ARCH_X_FIELDS)})",
                            hint="use style = \"lines\" for a case parameter or arch option")
    return ReportSpec(style=style, metrics=r.strings("metrics"), better=better, x=x,
                      x_label=r.get("x_label", str, x), panel=r.get("panel", str, ""),
                      y_label=r.get("y_label", str, ""))


CONTROL_BAND = (0.8, 1.25)  # [control].band when the scenario gives none
CONTROL_SAME = ("disks", "disk_model", "disk_size", "chunk", "partitions", "bus", "write_cache", "flushes", "span")  # what makes "the same drives"


def _load_control(path: Path, table: Any, labels: set, entries: tuple[ArchEntry, ...], check: bool) -> Control:
    """[control]: two [[arch]] labels, engine's raid5 and md's raid5, on the same drives
    (CONTROL_SAME); with registry look-ups, `md` must name an md architecture and `engine`
    one the engine serves. band = [lo, hi], 0 < lo < hi."""
    r = _Reader(path, "control", table, _CONTROL)
    engine, md = r.get("engine", str), r.get("md", str)
    for side, label in (("engine", engine), ("md", md)):
        if label not in labels:
            raise ScenarioError(path, r.where(side), f"no [[arch]] labelled {label!r}")
    if engine == md:
        raise ScenarioError(path, r.where("md"), f"{md!r} is also the engine's label",
                            hint="the control compares two [[arch]] entries: the engine's raid5 and md's")
    band = r.get("band", list, list(CONTROL_BAND))
    if len(band) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in band):
        raise ScenarioError(path, r.where("band"), f"must be two numbers [lo, hi], not {band!r}")
    lo, hi = float(band[0]), float(band[1])
    if not 0 < lo < hi:
        raise ScenarioError(path, r.where("band"), f"[{lo:g}, {hi:g}]: needs 0 < lo < hi")
    by_label = {a.label: a for a in entries}
    if engine in by_label and md in by_label:  # an [[arch]] with its own problem is refused there
        for field in CONTROL_SAME:
            mine, theirs = getattr(by_label[engine], field), getattr(by_label[md], field)
            if mine != theirs:
                raise ScenarioError(path, r.where("engine"), f"{engine!r} has {field} {mine!r} but {md!r} has "
                                    f"{theirs!r}", hint="the control's two arrays run on the same drives")
        if check:
            for side, label, want_md in (("engine", engine, False), ("md", md, True)):
                declared = archs.REGISTRY.get(by_label[label].arch)
                if declared is not None and (declared.family == "md") != want_md:
                    raise ScenarioError(path, r.where(side), f"{label!r} is {declared.name!r}, "
                                        + ("not an md architecture" if want_md else "an md architecture"),
                                        hint="engine names the engine's raid5, md names md's")
    return Control(engine=engine, md=md, band=(lo, hi), text=r.get("text", str, ""))


def _load_quick(path: Path, table: Any, labels: set, cases: set) -> dict:
    r = _Reader(path, "quick", table, _QUICK)
    out: dict[str, Any] = {}
    if "repeat" in r.table:
        out["repeat"] = r.get("repeat", int)
        if out["repeat"] < 1:
            raise ScenarioError(path, "quick.repeat", "must be at least 1")
    if "disk_size" in r.table:
        out["disk_size"] = parse_size(r.get("disk_size", (str, int)), path, "quick.disk_size")
    out["params"] = r.get("params", dict, {})
    case_params = r.get("case_params", dict, {})
    for name, params in case_params.items():
        if name not in cases:
            raise ScenarioError(path, f"quick.case_params.{name}", f"no [[case]] named {name!r}")
        if not isinstance(params, dict):
            raise ScenarioError(path, f"quick.case_params.{name}", "must be a table of parameters")
    out["case_params"] = case_params
    for key, known, what in (("cases", cases, "[[case]] named"), ("archs", labels, "[[arch]] labelled")):
        if key in r.table:
            chosen = r.strings(key)
            for name in chosen:
                if name not in known:
                    raise ScenarioError(path, f"quick.{key}", f"no {what} {name!r}")
            out[key] = chosen
    return out
