"""What every workload driver shares: parameters, the command record, the result document.

Why drivers run everything through a RunnerSession (raidlab.runners.session): the same
driver must work on the host and inside the lab VM, so it never calls subprocess or
tools.base.run for work on the array; it hands argv lists to `session.exec` and copies files
with `session.put`. `Commands` wraps the session so that every command line, its exit status
and its duration land in the result document (results keep the exact command lines that
produced them).

Why parameters are declared (`Param`) rather than read ad hoc: scenario files name them, so a
misspelt key must be refused before anything starts (UsageError naming the key), and the
definitions under workloads/*.toml document the same declarations (a unit test keeps the two
in step).

Result document, the same for every workload (and for a virtual-time run, raidlab.runners.sim):
    {"workload": name, "params": {...resolved, defaults filled in...},
     "metrics": {"tps": {"value": 123.4, "unit": "tx/s"}, ...},
     "commands": [{"argv": [...], "rc": 0, "seconds": 1.2, "where": "runner"|"host"}],
     "raw": {...program output...}, "notes": [...]}
A figure a program did not measure (bonnie++ prints "+++++" for a test that ran too briefly)
is left out of "metrics" and named in "notes": no invented numbers.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from raidlab.errors import MissingToolError, ToolFailedError, UsageError, WorkloadError
from raidlab.tools.base import PACKAGES, CommandResult

Progress = Callable[[str], None]


def no_progress(_message: str) -> None:
    """Default progress callback: say nothing."""


@runtime_checkable
class RunnerSession(Protocol):
    """Where a workload's commands run: the host (NativeSession) or the lab VM through the
    array daemon (DaemonSession), both in raidlab.runners.session. Declared here, with the
    drivers that use it, so the runners implement what the workloads ask for."""

    runner: str
    device: str
    scratch: str

    def exec(self, argv: list[str], *, timeout: float, stdin: bytes | None = None,
             check: bool = True) -> CommandResult: ...

    def put(self, local: Path, remote: str) -> None: ...

    def get(self, remote: str, local: Path) -> None: ...


# ---------------------------------------------------------------------------- parameters

@dataclasses.dataclass(frozen=True)
class Param:
    """One workload parameter: its type, default, bounds and meaning."""

    kind: type            # int, float, str, bool or list (of ints)
    default: Any
    help: str
    choices: tuple | None = None
    minimum: float | None = None
    maximum: float | None = None

    def check(self, workload: str, key: str, value: Any) -> Any:
        where = f"workload {workload!r} parameter {key!r}"
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if self.kind is list:
            if not isinstance(value, list) or not value or not all(
                    isinstance(v, int) and not isinstance(v, bool) for v in value):
                raise UsageError(f"{where} must be a non-empty list of integers, got {value!r}")
            items = value
        else:
            if not isinstance(value, self.kind) or (self.kind is int and isinstance(value, bool)):
                raise UsageError(f"{where} must be {self.kind.__name__}, got {value!r}")
            items = [value]
        for item in items:
            if self.choices is not None and item not in self.choices:
                raise UsageError(f"{where} must be one of {', '.join(map(str, self.choices))}, "
                                 f"got {item!r}")
            if self.minimum is not None and item < self.minimum:
                raise UsageError(f"{where} must be >= {self.minimum:g}, got {item!r}")
            if self.maximum is not None and item > self.maximum:
                raise UsageError(f"{where} must be <= {self.maximum:g}, got {item!r}")
        return value


# The network of the cluster's twin, as every virtual-time workload over it takes it
# (raidlab.cluster.twin.twin_network reads them; `nodes` each workload states itself). What
# a node's processor costs (the cooperative disk driver's work per message) is not a
# workload parameter: every node is a machine of the scenario's [host] (raidlab.disks.host).
TWIN_NETWORK_PARAMS: dict[str, Param] = {
    "disks_per_node": Param(int, 1, "array members on each node, in node order (the paper: 1)", minimum=1),
    "link_mb_s": Param(float, 12.5, "each direction of a node's switch port, MB/s (the paper: 12.5)", minimum=0.001),
    "latency_us": Param(float, 20.0, "one hop's latency beyond the frames' own time, µs (assumed)", minimum=0),
}


def sim_resolver(workload: str, declared: dict[str, Param],
                 combination: Callable[[dict[str, Any]], None] | None = None) -> Callable[[dict], dict]:
    """The `resolve_sim` of a workload that runs in virtual time: its parameters with the
    declarations' defaults filled in, each value checked by its declaration, then
    `combination` (constraints between values, raising UsageError); UsageError for an
    unknown key."""
    def resolve_sim(params: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(params) - set(declared))
        if unknown:
            raise UsageError(f"{workload} in virtual time has no parameter {unknown[0]!r}",
                             hint=f"its parameters: {', '.join(declared)}")
        out = {key: spec.check(workload, key, params.get(key, spec.default)) for key, spec in declared.items()}
        if combination is not None:
            combination(out)
        return out

    resolve_sim.__doc__ = f"{workload}'s virtual-time parameters, defaults filled in and checked (sim_resolver)."
    return resolve_sim


class Workload:
    """Base of the drivers. Subclasses set name/title/source/params and implement `execute`."""

    name: str = ""
    title: str = ""
    source: str = ""                 # paper section it follows
    needs_mountpoint: bool = True    # False: may run on session.device, without a file system
    raw_device_only: bool = False    # True: always on session.device, whatever the case's file system (fio)
    params: dict[str, Param] = {}
    programs: dict[str, str] = {}    # program on the runner -> Debian package
    default_timeout: float = 3600.0

    def validate(self, params: dict) -> None:
        """Refuse unknown keys and bad values (UsageError naming the key); start nothing."""
        self.resolve(params)

    def resolve(self, params: dict | None) -> dict:
        """The parameters with defaults filled in, checked."""
        params = dict(params or {})
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise UsageError(f"workload {self.name!r} has no parameter {unknown[0]!r}",
                             hint=f"known: {', '.join(sorted(self.params))}", key=unknown[0])
        out = {}
        for key, spec in self.params.items():
            value = params.get(key, spec.default)
            out[key] = value if value is None else spec.check(self.name, key, value)
        self.check_combination(out)
        return out

    def check_combination(self, params: dict) -> None:
        """Constraints between parameters (override)."""

    def mount_options(self, params: dict) -> list[str]:
        """Options the runner passes to `mount -o` for this workload (e.g. ["sync"])."""
        return []

    def run(self, session: RunnerSession, mountpoint: str | None, params: dict,
            progress: Progress = no_progress) -> dict:
        resolved = self.resolve(params)
        if self.needs_mountpoint and not mountpoint:
            raise UsageError(f"workload {self.name!r} needs a mounted filesystem (mountpoint)")
        commands = Commands(session)
        commands.require(self.programs)
        result = self.execute(session, commands, mountpoint, resolved, progress)
        doc = {"workload": self.name, "params": resolved, "runner": session.runner,
               "metrics": result.metrics, "commands": commands.records, "raw": result.raw,
               "notes": result.notes}
        doc.update(result.extra)
        return doc

    def execute(self, session: RunnerSession, commands: Commands, mountpoint: str | None,
                params: dict, progress: Progress) -> Outcome:
        raise NotImplementedError


@dataclasses.dataclass
class Outcome:
    metrics: dict[str, dict] = dataclasses.field(default_factory=dict)
    raw: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def metric(self, name: str, value: float | int | None, unit: str) -> None:
        if value is not None:
            self.metrics[name] = {"value": value, "unit": unit}


# ---------------------------------------------------------------------------- commands

class Commands:
    """Runs argv lists through the session and keeps the command record."""

    def __init__(self, session: RunnerSession):
        self.session = session
        self.records: list[dict] = []

    def run(self, argv: Sequence[str], *, timeout: float, stdin: bytes | None = None,
            check: bool = True, label: str | None = None) -> CommandResult:
        argv = [str(a) for a in argv]
        start = time.monotonic()
        try:
            result = self.session.exec(argv, timeout=timeout, stdin=stdin, check=False)
        except BaseException:
            self.records.append({"argv": argv, "rc": None, "where": "runner",
                                 "seconds": round(time.monotonic() - start, 6),
                                 **({"label": label} if label else {})})
            raise
        record = {"argv": argv, "rc": result.rc, "seconds": round(result.seconds, 6),
                  "where": "runner"}
        if label:
            record["label"] = label
        self.records.append(record)
        if check and result.rc != 0:
            if result.rc == 127 and argv[0] in PACKAGES:
                raise MissingToolError(argv[0], PACKAGES.get(argv[0]))
            raise ToolFailedError(argv, result.rc, text(result.stderr) or text(result.stdout))
        return result

    def shell(self, script: str, *args: str, timeout: float, check: bool = True,
              label: str | None = None) -> CommandResult:
        """`sh -c SCRIPT sh ARGS...` (busybox sh in the VM): arguments stay out of the script."""
        return self.run(["sh", "-c", script, "sh", *args], timeout=timeout, check=check,
                        label=label)

    def idle(self, seconds: float, label: str) -> None:
        """`sleep SECONDS` on the runner (untimed): an idle period in which a write-back cache
        under the filesystem (VC-RAID's log, DCD's) can destage. Nothing when 0."""
        if seconds > 0:
            self.run(["sleep", f"{seconds:g}"], timeout=seconds + 60, label=label)

    def host(self, record: dict) -> None:
        """Add a command that ran on the host (e.g. bon_csv2html) to the record."""
        self.records.append({**record, "where": "host"})

    def require(self, programs: dict[str, str]) -> None:
        """One MissingToolError naming the first program the runner lacks, and its package."""
        if not programs:
            return
        names = list(programs)
        probe = ('for p in "$@"; do command -v "$p" >/dev/null 2>&1 || echo "$p"; done')
        result = self.shell(probe, *names, timeout=60, label="check programs")
        missing = text(result.stdout).split()
        if missing:
            raise MissingToolError(missing[0], programs[missing[0]])


def text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


def join(path: str, *parts: str) -> str:
    """A path on the runner (POSIX, whatever the host is)."""
    return "/".join([path.rstrip("/"), *parts])


def mount_entry(commands: Commands, mountpoint: str) -> tuple[str, list[str]] | None:
    """(fstype, options) of the filesystem mounted at `mountpoint` on the runner, or None."""
    result = commands.run(["cat", "/proc/mounts"], timeout=30, label="read mount table")
    found = None
    for line in text(result.stdout).splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1].replace("\\040", " ") == mountpoint.rstrip("/"):
            found = (fields[2], fields[3].split(","))   # the last mount on a path wins
    return found


def require_empty_target(commands: Commands, path: str) -> None:
    """Refuse to run over something already there (a leftover from an earlier run)."""
    probe = commands.shell('[ -e "$1" ] && echo exists; true', path, timeout=30,
                           label="check target")
    if "exists" in text(probe.stdout):
        raise WorkloadError(f"{path} already exists on the runner; remove it or use a fresh "
                            f"filesystem", path=path)
