"""`raidlab run SCENARIO`: every architecture x case x repetition on a fresh array.

Why each run builds its own array: the VC-RAID paper (§4.1) loaded the driver, ran the
benchmark, unloaded it and rebooted before every test so that each started from the same
state. The closest we can do is create -> mkfs.ext4 -> mount -> workload -> umount -> destroy
for every (architecture, case, repetition): no page cache, cache-disk log or destage backlog
carries over from one run to the next. Repetitions are the outer loop so that a slow drift of
the host (other load, thermal) spreads over all architectures instead of biasing one.

Arrays are made exactly as `raidlab create`/`destroy` make them (ArraySpec saved in a lab,
raidlab.service.control.start_daemon, then stop_daemon / release_leftovers / remove_lab), and
every command that touches the array (mkfs, mount, the workload, umount) goes through a
RunnerSession (raidlab.runners.session), so the same loop runs natively or inside the lab VM
that the array daemon owns. kind = "sim" scenarios have no array: each run is one call of
raidlab.runners.sim.run_case.

Robustness rules: a run that fails is recorded with status "failed" and its error,
and the loop goes on; Ctrl-C or SIGTERM stops after unmounting and destroying the current
array (cleanup runs with further signals deferred), keeps every finished run file and marks
the manifest interrupted. A run killed outright (SIGKILL) leaves its array; the next run, or
`raidlab lab cleanup`, destroys it (OWNER_FILE).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import json
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

from raidlab.errors import LabInterrupted, MissingToolError, RaidlabError, UsageError
from raidlab.lab import process_start_time, same_process
from raidlab.scenarios import MOUNTED_FILESYSTEMS, ArchEntry, Case, Scenario, quick_params

MANIFEST = "manifest.json"
SCENARIO_COPY = "scenario.toml"
RUNS_DIR = "runs"
MKFS_TIMEOUT = 3600.0
MOUNT_TIMEOUT = 600.0
UMOUNT_TIMEOUT = 3600.0  # umount writes back everything an async run left dirty
WORKLOAD_PROGRAMS = ("mount", "umount")  # and mkfs.<filesystem> of each case


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
            archs = [dataclasses.replace(a, disk_size=q["disk_size"]) for a in archs]
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


def results_dir(root: Path, scenario: Scenario) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = root / scenario.id
    out = base / stamp
    n = 1
    while out.exists():
        n += 1
        out = base / f"{stamp}-{n}"
    (out / RUNS_DIR).mkdir(parents=True)
    return out


# --- environment record -----------------------------------------------------------------

@functools.lru_cache(maxsize=None)  # once, when the run starts: the code that ran
def _git_revision() -> dict[str, Any]:
    repo = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=repo, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=repo, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {"revision": None}
    return {"revision": rev.stdout.strip() or None, "dirty": bool(dirty.stdout.strip())}


def _tool_versions(scenario: Scenario, runner: str) -> dict[str, str | None]:
    from raidlab.tools.base import version_of

    progs = {"mkfs.ext4": ("-V",), "tar": ("--version",), "postmark": None, "bonnie++": None,
             "fio": ("--version",), "mdadm": ("--version",)}
    if runner == "vm":
        progs["qemu-system-x86_64"] = ("--version",)
    out = {}
    for prog, args in progs.items():
        if args is None:  # postmark and bonnie++ print no version flag; the package version says it
            out[prog] = _package_version(prog)
        else:
            try:
                out[prog] = version_of(prog, args)
            except Exception:  # noqa: BLE001 - a version probe must never stop a run
                out[prog] = None
    return out


def _package_version(prog: str) -> str | None:
    from raidlab.tools.base import PACKAGES

    pkg = PACKAGES.get(prog, prog)
    try:
        proc = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{pkg} {proc.stdout.strip()}" if proc.returncode == 0 and proc.stdout.strip() else None


def _disk_models(scenario: Scenario) -> dict[str, Any]:
    from raidlab.disks import catalog

    # disk_model: one model for every member, or "m0,m1,...", one per member
    models = {m.strip() for a in scenario.archs for m in a.disk_model.split(",")}
    for a in scenario.archs:
        for key, value in a.options.items():
            if key.endswith("model") and isinstance(value, str):
                models.add(value)
            elif key.endswith("models") and isinstance(value, list):
                models.update(v for v in value if isinstance(v, str))
    out = {}
    for model in sorted(models):
        try:
            out[model] = catalog.raw_entry(model)
        except Exception:  # noqa: BLE001
            out[model] = None
    return out


def write_manifest(out: Path, scenario: Scenario, *, runner: str, quick: bool, planned: list[PlannedRun],
                   started: str, finished: str | None, status: str, command_line: list[str],
                   extra: dict | None = None) -> None:
    from raidlab import __version__

    doc = {
        "scenario": scenario.id,
        "title": scenario.title,
        "paper": scenario.paper,
        "source": scenario.source,
        "kind": scenario.kind,
        "scenario_file": str(scenario.path),
        "scenario_copy": SCENARIO_COPY,
        "runner": runner,
        "quick": quick,
        "status": status,  # running | complete | interrupted | stopped: missing program
        # who writes it: a "running" manifest whose process is gone was never closed (killed)
        "pid": os.getpid(),
        "pid_start_time": process_start_time(os.getpid()),
        "boot_id": _boot_id(),
        "started": started,
        "finished": finished,
        "command_line": command_line,
        "planned_runs": [p.run_id for p in planned],
        "raidlab": __version__,
        "git": _git_revision(),
        "kernel": platform.release(),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                 "memory_bytes": _memory_bytes()},
        "tools": _tool_versions(scenario, runner),
        "disk_models": _disk_models(scenario),
        "seeds": {c.name: c.params.get("seed") for c in scenario.cases if "seed" in c.params},
        **(extra or {}),
    }
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    os.replace(tmp, out / MANIFEST)


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def manifest_status(man: dict) -> str:
    """The manifest's status for a report. "running" is only believed while the process that
    wrote it still runs (same boot, same pid and start time: raidlab.lab.same_process);
    otherwise the run was killed before it could close its manifest, and the report says so."""
    status = str(man.get("status"))
    if status != "running":
        return status
    pid, started = man.get("pid"), man.get("pid_start_time")
    if (isinstance(pid, int) and started is not None and man.get("boot_id") == _boot_id()
            and same_process(pid, started)):
        return f"running (pid {pid})"
    return "not finished (the run stopped without closing its manifest, e.g. killed)"


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


# --- signals ----------------------------------------------------------------------------

class _Signalled(KeyboardInterrupt):
    """SIGTERM/SIGHUP during a run: unwinds exactly like Ctrl-C (a KeyboardInterrupt, so code
    that stops a half-started daemon on Ctrl-C, e.g. control.start_daemon, does it here too)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    def handler(signum, _frame):
        raise _Signalled(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def deferred_signals() -> Iterator[list[int]]:
    """Hold SIGINT/SIGTERM/SIGHUP while cleaning up (a second Ctrl-C must not leave an array
    behind); the first one received is re-raised afterwards."""
    received: list[int] = []

    def hold(signum, _frame):
        received.append(signum)

    old = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield received
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if received:
        if received[0] == signal.SIGINT:
            raise KeyboardInterrupt
        raise _Signalled(received[0])


# --- one run ----------------------------------------------------------------------------

@contextlib.contextmanager
def scratch_array(entry: ArchEntry, runner: str, *, home: str | None,
                  status: Callable[[str], None] = lambda s: None,
                  vm_available_mib: int | None = None) -> Iterator[Any]:
    """A fresh array for one run, exactly as `raidlab create` makes it; destroyed (images
    removed) on the way out whatever happens. Yields (lab, ready record). `vm_available_mib`
    (runner vm): the guest memory left to the workload, handed to the daemon as
    RAIDLAB_VM_AVAILABLE_MIB (see raidlab/vm/hosted.py, which also takes out what
    the array holds in host RAM, e.g. a VC-RAID RAM buffer)."""
    from raidlab.service import control
    from raidlab.service.daemon import SPEC_FILE, ArraySpec
    from raidlab.lab import Lab
    from raidlab.vm.hosted import AVAILABLE_ENV

    lab = Lab(_lab_name_for(entry), home=home, create=True)
    if (lab.path / SPEC_FILE).exists():  # a previous process with our pid left it: release it
        with deferred_signals():
            _destroy_scratch(lab)
        lab = Lab(lab.name, home=home, create=True)
    _claim_scratch(lab)
    ArraySpec(lab.name, entry.arch, entry.disks, entry.disk_model, entry.disk_size, entry.chunk,
              entry.discipline, dict(entry.options), runner).save(lab.path)
    try:
        status(f"creating {entry.arch}")
        env = {AVAILABLE_ENV: str(vm_available_mib)} if runner == "vm" and vm_available_mib else None
        ready = control.start_daemon(lab, "create", home=home, on_status=status, env=env)
        yield lab, ready
    finally:
        with deferred_signals():
            status(f"destroying {entry.arch}")
            _destroy_scratch(lab)


# Who made a scratch array: a `raidlab run` killed where it cannot clean up (SIGKILL, a lost
# session or machine) leaves its array -- daemon, mounts, 1 GiB-class member images -- and the
# next run, or `raidlab lab cleanup NAME`, destroys it once this owner is gone.
OWNER_FILE = "run-owner.json"


def _claim_scratch(lab, *, mountpoint: str | None = None) -> None:
    """Record this process as the owner of scratch array `lab` (and the host directory its
    file system is mounted on, natively)."""
    pid = os.getpid()
    (lab.path / OWNER_FILE).write_text(json.dumps(
        {"pid": pid, "start_time": process_start_time(pid), "boot_id": _boot_id(),
         "mountpoint": mountpoint}) + "\n")


def abandoned_owner(lab_path: Path) -> dict[str, Any] | None:
    """The owner record of a scratch array whose `raidlab run` is gone (another boot, or no
    process with that pid and start time); None for a live run's array or a user's array."""
    try:
        owner = json.loads((lab_path / OWNER_FILE).read_text())
        pid = int(owner["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if owner.get("boot_id") == _boot_id() and same_process(pid, owner.get("start_time")):
        return None
    return owner


def _destroy_scratch(lab) -> None:
    from raidlab.service import control

    try:
        control.stop_daemon(lab)
    finally:
        control.release_leftovers(lab)
        control.remove_lab(lab, keep_images=False)


def remove_abandoned_scratch(lab) -> str | None:
    """Destroy `lab` (daemon, mounts, loops, images) if it is a scratch array of a `raidlab
    run` that is gone; a line saying so, or None if it is not one."""
    owner = abandoned_owner(lab.path)
    if owner is None:
        return None
    with deferred_signals():
        _destroy_scratch(lab)  # unmounts what is on the array, lazily
    if owner.get("mountpoint"):
        _rmdir_quietly(str(owner["mountpoint"]))
    return f"destroyed scratch array {lab.name} left by a killed `raidlab run` (pid {owner['pid']})"


def remove_abandoned_scratch_arrays(home: str | None) -> list[str]:
    """Every scratch array left by a killed `raidlab run` under `home`: destroyed, one line
    each; one that cannot be released is named with the reason and left alone."""
    from raidlab.lab import Lab, labs_dir

    lines = []
    for owner_file in sorted(labs_dir(home).glob(f"*/{OWNER_FILE}")):
        try:
            line = remove_abandoned_scratch(Lab(owner_file.parent.name, home=home))
        except RaidlabError as exc:
            line = f"could not destroy scratch array {owner_file.parent.name}: {exc}"
        if line:
            lines.append(line)
    return lines


def _lab_name_for(entry: ArchEntry) -> str:
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in entry.label)
    return f"run{os.getpid()}-{safe}"[:64]


def _mountpoint(session) -> str:
    # A short path on purpose: PostMark 1.5x keeps path names in 80-byte buffers and crashes
    # or truncates under a deep directory (seen under pytest's tmp_path). Natively a fresh
    # empty directory of its own (removed with rmdir, never recursively, after umount); in
    # the VM a fixed directory of the guest's RAM root.
    if session.runner == "native":
        import tempfile

        return tempfile.mkdtemp(prefix="raidlab-mnt-", dir="/tmp")
    return "/mnt/raidlab"


def _rmdir_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(path)


STATUS_TIMEOUT = 120.0


def _array_status(lab, when: str) -> dict[str, Any]:
    """The daemon's status of the lab's array; a result stands without it, so a failure is
    recorded with its reason instead of raised."""
    from raidlab.service import control

    try:
        return control.request(lab, "status", timeout=STATUS_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - say why, keep the run
        return {"error": f"status {when} failed: {exc}"}


def run_live(run: PlannedRun, scenario: Scenario, runner: str, *, home: str | None,
             status: Callable[[str], None]) -> dict[str, Any]:
    """create -> mkfs.ext4 -> mount -> workload -> umount -> destroy; the result document."""
    import raidlab.workloads as workloads
    from raidlab.runners.session import open_session

    workload = workloads.get(scenario.workload)
    setup: list[dict] = []
    # `dirs` closes after the array is destroyed: a mount point left busy by an interrupt is
    # free by then (destroy lazily unmounts what is on the array), and removed.
    with contextlib.ExitStack() as dirs, scratch_array(run.arch, runner, home=home, status=status,
                                                        vm_available_mib=scenario.vm_available_mib) as (lab, ready):
        session = open_session(lab)
        mountpoint: str | None = None
        mounted = False
        mount_tried = False  # an interrupt may land after the kernel mounted, before exec returned
        mount_options = list(run.case.mount_options)
        if hasattr(workload, "mount_options"):  # e.g. the untar workload's sync mode
            resolved = workload.resolve(dict(run.case.params)) if hasattr(workload, "resolve") else run.case.params
            mount_options += [o for o in workload.mount_options(resolved) if o not in mount_options]
        try:
            uname = session.exec(["uname", "-r"], timeout=60, check=False)  # the VM's kernel differs
            runner_kernel = uname.stdout.decode(errors="replace").strip() if uname.rc == 0 else None
            fstype = run.case.filesystem
            if fstype in MOUNTED_FILESYSTEMS and getattr(workload, "needs_mountpoint", True):
                status(f"mkfs.{fstype}")
                mountpoint = _mountpoint(session)
                if session.runner == "native":  # rmdir only: never deletes through a mount
                    dirs.callback(_rmdir_quietly, mountpoint)
                    _claim_scratch(lab, mountpoint=mountpoint)  # for whoever cleans up after a SIGKILL
                setup.append(session.exec([f"mkfs.{fstype}", "-F", "-q", "-E", "nodiscard", *run.case.mkfs_options,
                                           session.device], timeout=MKFS_TIMEOUT).as_record())
                setup.append(session.exec(["mkdir", "-p", mountpoint], timeout=60).as_record())
                argv = ["mount", "-t", fstype]
                if mount_options:
                    argv += ["-o", ",".join(mount_options)]
                status("mount " + (",".join(mount_options) or "(defaults)"))
                mount_tried = True
                setup.append(session.exec(argv + [session.device, mountpoint], timeout=MOUNT_TIMEOUT).as_record())
                mounted = True
            # The array's account before the workload (after mkfs and mount): subtracted from
            # the one after umount, it leaves what the workload itself did (md's initial
            # resync, mkfs and the mount are in both).
            status_before = _array_status(lab, "before the workload")
            status(f"{scenario.workload} running")
            result = workload.run(session, mountpoint, dict(run.case.params),
                                  progress=status)  # the step line names the workload already
        finally:
            # Interrupted in the lab VM, this umount re-raises the interrupt at once instead of
            # queueing behind the guest's running command (raidlab.runners.session.DaemonSession);
            # the array is destroyed next and its daemon kills the VM.
            if mount_tried:
                with deferred_signals():
                    status("umount")
                    umount = session.exec(["umount", mountpoint], timeout=UMOUNT_TIMEOUT, check=False)
                    if mounted or umount.rc == 0:
                        setup.append(umount.as_record())
                    if umount.rc != 0:  # the array is destroyed next; a lazy umount lets it go
                        session.exec(["umount", "-l", mountpoint], timeout=60, check=False)
            close = getattr(session, "close", None)
            if close:
                close()
        # The array's own account of the run (member I/O, cache hits and destages, mdstat),
        # after umount so the filesystem's last writes are in it: what explains a result.
        array_status = _array_status(lab, "after the run")
    result = dict(result)
    result["array_status"] = array_status
    result["array_status_before"] = status_before
    result["setup_commands"] = setup
    result["mount_options"] = mount_options if mounted else None
    result["runner_kernel"] = runner_kernel
    result["array"] = {k: ready.get(k) for k in ("arch", "capacity", "state", "device", "guest_device")
                       if k in ready}
    if ready.get("vm"):  # the lab VM: its RAM and what was free for page cache before the run
        result["vm"] = ready["vm"]
    return result


def run_sim(run: PlannedRun, scenario: Scenario, out_dir: Path) -> dict[str, Any]:
    from raidlab.runners.sim import run_case

    return run_case(scenario, run.arch, run.case)


def _write_run(out: Path, run: PlannedRun, doc: dict) -> Path:
    path = out / RUNS_DIR / f"{run.run_id}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    os.replace(tmp, path)
    return path


@dataclasses.dataclass
class RunSummary:
    out: Path
    ok: int = 0
    failed: int = 0
    interrupted: bool = False
    signum: int | None = None
    failures: list[str] = dataclasses.field(default_factory=list)
    missing_tool: MissingToolError | None = None  # the runner lacks a program: the rest was not run


class Progress:
    """What `run_scenario` tells its caller (the CLI draws it with rich)."""

    def start(self, total: int) -> None: ...

    def run_started(self, index: int, run: PlannedRun) -> None: ...

    def step(self, message: str) -> None: ...

    def notice(self, message: str) -> None: ...

    def run_finished(self, index: int, run: PlannedRun, doc: dict) -> None: ...


def check_runner(scenario: Scenario, runner: str, only: Collection[str] = ()) -> None:
    """--runner may differ from the scenario's: every architecture that will run (all, or
    the `only` labels) must accept it (md has no native runner on a kernel without md).
    One line naming the file and arch."""
    if scenario.kind != "live":
        return
    from raidlab.errors import RaidlabError as _Err
    from raidlab.scenarios import validate_arch

    for i, entry in enumerate(scenario.archs):
        if only and entry.label not in only:
            continue
        try:
            validate_arch(entry, runner)
        except _Err as exc:
            raise UsageError(f"{scenario.path}: arch[{i}] ({entry.label}) with --runner {runner}: {exc}") from None


def check_programs(scenario: Scenario, runner: str) -> None:
    """Natively, every program the runs need must be here before anything starts."""
    if runner != "native":
        return
    from raidlab.tools.base import require

    needed: list[str] = []
    if scenario.kind == "live":
        import raidlab.workloads as workloads

        for fstype in dict.fromkeys(c.filesystem for c in scenario.cases if c.filesystem in MOUNTED_FILESYSTEMS):
            needed += [f"mkfs.{fstype}", *WORKLOAD_PROGRAMS]
        workload = workloads.get(scenario.workload)
        needed += list(getattr(workload, "programs", ()) or ())
    for prog in dict.fromkeys(needed):
        require(prog)


def run_scenario(scenario: Scenario, planned: list[PlannedRun], *, runner: str, results_root: Path,
                 quick: bool = False, home: str | None = None, progress: Progress | None = None,
                 command_line: list[str] | None = None,
                 after_run: Callable[[PlannedRun, dict], None] | None = None) -> RunSummary:
    """Execute `planned`; write runs/*.json and manifest.json under a new results directory."""
    progress = progress or Progress()
    out = results_dir(results_root, scenario)
    (out / SCENARIO_COPY).write_text(scenario.text)
    started = dt.datetime.now().isoformat(timespec="seconds")
    argv = command_line if command_line is not None else sys.argv
    manifest = dict(scenario=scenario, runner=runner, quick=quick, planned=planned, started=started,
                    command_line=argv)
    write_manifest(out, **manifest, finished=None, status="running")
    summary = RunSummary(out)
    if scenario.kind == "live":
        for line in remove_abandoned_scratch_arrays(home):
            progress.notice(line)
    progress.start(len(planned))
    try:
        with _terminate_as_interrupt():
            for index, run in enumerate(planned):
                progress.run_started(index, run)
                begun = time.monotonic()
                stamp = dt.datetime.now().isoformat(timespec="seconds")
                try:
                    if scenario.kind == "sim":
                        doc = run_sim(run, scenario, out)
                    else:
                        doc = run_live(run, scenario, runner, home=home, status=progress.step)
                    doc = {**doc, "status": "ok", "error": None}
                    summary.ok += 1
                except MissingToolError as exc:  # the runner lacks a program: every run would fail
                    summary.failed += 1
                    summary.failures.append(f"{run.run_id}: {exc}")
                    summary.missing_tool = exc
                    _write_run(out, run, {"workload": scenario.workload, "params": dict(run.case.params),
                                          "metrics": {}, "commands": [], "raw": {}, "status": "failed",
                                          "error": str(exc), "error_type": type(exc).__name__,
                                          "arch": run.arch.label, "arch_id": run.arch.arch, "case": run.case.name,
                                          "repetition": run.repetition, "started": stamp,
                                          "seconds": round(time.monotonic() - begun, 3), "runner": runner})
                    break
                except Exception as exc:  # noqa: BLE001 - a failed run is a result, not the end
                    doc = {"workload": scenario.workload, "params": dict(run.case.params), "metrics": {},
                           "commands": [], "raw": {}, "status": "failed", "error": str(exc)
                           or type(exc).__name__, "error_type": type(exc).__name__}
                    if not isinstance(exc, RaidlabError):
                        doc["traceback"] = traceback.format_exc()
                    summary.failed += 1
                    summary.failures.append(f"{run.run_id}: {doc['error']}")
                doc.update(arch=run.arch.label, arch_id=run.arch.arch, case=run.case.name,
                           repetition=run.repetition, started=stamp,
                           seconds=round(time.monotonic() - begun, 3), runner=runner,
                           filesystem=run.case.filesystem)
                doc.setdefault("mount_options", list(run.case.mount_options))
                _write_run(out, run, doc)
                progress.run_finished(index, run, doc)
                if after_run:
                    after_run(run, doc)
    except _Signalled as sig:
        summary.interrupted, summary.signum = True, sig.signum
    except KeyboardInterrupt:
        summary.interrupted, summary.signum = True, signal.SIGINT
    finally:
        finished = dt.datetime.now().isoformat(timespec="seconds")
        write_manifest(out, **manifest, finished=finished,
                       status="interrupted" if summary.interrupted
                       else "stopped: missing program" if summary.missing_tool else "complete",
                       extra={"ok": summary.ok, "failed": summary.failed})
    return summary


def interrupted_error(summary: RunSummary) -> LabInterrupted:
    err = LabInterrupted(int(summary.signum or signal.SIGINT))
    err.message = (f"interrupted by {signal.Signals(summary.signum).name}: the current array was destroyed; "
                   f"{summary.ok + summary.failed} finished runs kept in {summary.out}")
    return err
