"""`raidlab run SCENARIO`: every architecture x case x repetition, each on a fresh array.

This module is the loop and its record: the results directory, the manifest (environment,
tools, disk models, the code's revision), one JSON per run, progress, and what happens on
failure and interruption. Planning the runs is the scenario's (raidlab.scenarios.plan_runs);
executing one is the runner's (raidlab.runners.run_case: a fresh live array, or a
virtual-time replay for kind = "sim"). Repetitions are the outer loop so that a slow drift
of the host (other load, thermal) spreads over all architectures instead of biasing one.

Virtual-time runs (kind = "sim") are deterministic and independent, so `jobs` > 1 runs them
in that many spawned worker processes, each run file written as its run ends; the files are
those a serial loop writes, but for wall-clock fields and `beside` (the runs that were
running at some moment of this one). A live scenario's runs share this host's devices and
its timing, so they run one at a time whatever `jobs` says, and the manifest says so.
With a Dask scheduler (`cluster`, raidlab.scaleout) the runs go to other machines' workers
instead, each run file written as its task completes, through the same record.

Robustness rules: a run that fails is recorded with status "failed" and its error, and the
loop goes on; Ctrl-C or SIGTERM stops after unmounting and destroying the current array
(cleanup runs with further signals deferred, raidlab.signals), keeps every finished run
file and marks the manifest interrupted. A run killed outright (SIGKILL) leaves its array;
the next run, or `raidlab lab cleanup`, destroys it (raidlab.runners.live.OWNER_FILE).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from raidlab import __version__, runners, workloads
from raidlab.disks import catalog
from raidlab.errors import LabInterrupted, MissingToolError, RaidlabError, UsageError
from raidlab.lab import process_start_time, same_process
from raidlab.lab.proc import boot_id
from raidlab.outputs import PARTIAL, make_dirs, new_stamped_dir, owned_dir, read_regular, remove_partials, write_whole
from raidlab.signals import Signalled, terminate_as_interrupt
from raidlab.runners import live
from raidlab.scenarios import MOUNTED_FILESYSTEMS, PlannedRun, Scenario, validate_arch
from raidlab.tools.base import PACKAGES, require, version_of

MANIFEST = "manifest.json"
SCENARIO_COPY = "scenario.toml"
RUNS_DIR = "runs"
WORKLOAD_PROGRAMS = ("mount", "umount")  # and mkfs.<filesystem> of each case


def results_dir(root: Path, scenario: Scenario) -> Path:
    """A new <root>/<scenario>/<time>/ with its runs/ (raidlab.outputs.make_dirs: made one
    directory at a time, never through someone else's link); a second run in the same second
    gets <time>-2, -3, ..."""
    out = new_stamped_dir(root / scenario.id, "--results")
    make_dirs(out / RUNS_DIR, "--results")
    return out


def _write_json(path: Path, doc: dict) -> Path:
    text = json.dumps(doc, indent=2, default=str)
    return write_whole(path, lambda partial: partial.write_text(text))


# --- environment record -----------------------------------------------------------------

@functools.lru_cache(maxsize=None)  # once, when the run starts: the code that ran
def git_revision(ignore: str | os.PathLike | None = None) -> dict[str, Any]:
    """The commit of the code running and whether the tree has uncommitted changes, not
    counting `ignore` (a tracked file the command itself is about to write over)."""
    repo = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=repo, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=repo, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {"revision": None}
    skip = os.path.relpath(os.path.abspath(ignore), repo) if ignore is not None else None
    changed = [line for line in dirty.stdout.splitlines() if line[3:].strip() != skip]
    return {"revision": rev.stdout.strip() or None, "dirty": bool(changed)}


CODE_PATHS = ("raidlab", "scripts", "pyproject.toml")


def code_revision() -> dict[str, Any]:
    """What the code running is, apart from the commit that holds it: a hash of the trees of
    CODE_PATHS at HEAD (the same for every commit that changes only results or docs), and
    whether those paths have uncommitted changes. {"code": None} outside a git checkout."""
    repo = Path(__file__).resolve().parent.parent
    try:
        trees = subprocess.run(["git", "rev-parse", *(f"HEAD:{path}" for path in CODE_PATHS)],
                               capture_output=True, text=True, cwd=repo, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS],
                               capture_output=True, text=True, cwd=repo, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {"code": None}
    if trees.returncode != 0 or dirty.returncode != 0:
        return {"code": None}
    code = hashlib.sha1(trees.stdout.encode()).hexdigest()
    return {"code": code, "dirty": bool(dirty.stdout.strip())}


def _tool_versions(scenario: Scenario, runner: str) -> dict[str, str | None]:
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
    pkg = PACKAGES.get(prog, prog)
    try:
        proc = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{pkg} {proc.stdout.strip()}" if proc.returncode == 0 and proc.stdout.strip() else None


def _disk_models(scenario: Scenario) -> dict[str, Any]:
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
        "boot_id": boot_id(),
        "started": started,
        "finished": finished,
        "command_line": command_line,
        "planned_runs": [p.run_id for p in planned],
        "raidlab": __version__,
        "git": git_revision(),
        "kernel": platform.release(),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                 "memory_bytes": _memory_bytes()},
        "tools": _tool_versions(scenario, runner),
        "disk_models": _disk_models(scenario),
        "seeds": {c.name: c.params.get("seed") for c in scenario.cases if "seed" in c.params},
        **(extra or {}),
    }
    _write_json(out / MANIFEST, doc)


def manifest_status(man: dict) -> str:
    """The manifest's status for a report. "running" is only believed while the process that
    wrote it still runs (same boot, same pid and start time: raidlab.lab.same_process);
    otherwise the run was killed before it could close its manifest, and the report says so."""
    status = str(man.get("status"))
    if status != "running":
        return status
    pid, started = man.get("pid"), man.get("pid_start_time")
    if (isinstance(pid, int) and started is not None and man.get("boot_id") == boot_id()
            and same_process(pid, started)):
        return f"running (pid {pid})"
    return "not finished (the run stopped without closing its manifest, e.g. killed)"


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def _write_run(out: Path, run: PlannedRun, doc: dict) -> Path:
    return _write_json(out / RUNS_DIR / f"{run.run_id}.json", doc)


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
    for i, entry in enumerate(scenario.archs):
        if only and entry.label not in only:
            continue
        try:
            validate_arch(entry, runner)
        except RaidlabError as exc:
            raise UsageError(f"{scenario.path}: arch[{i}] ({entry.label}) with --runner {runner}: {exc}") from None


def check_programs(scenario: Scenario, runner: str) -> None:
    """Natively, every program the runs need must be here before anything starts."""
    if runner != "native":
        return
    needed: list[str] = []
    if scenario.kind == "live":
        for fstype in dict.fromkeys(c.filesystem for c in scenario.cases if c.filesystem in MOUNTED_FILESYSTEMS):
            needed += [f"mkfs.{fstype}", *WORKLOAD_PROGRAMS]
        workload = workloads.get(scenario.workload)
        needed += list(getattr(workload, "programs", ()) or ())
    for prog in dict.fromkeys(needed):
        require(prog)


def resume_plan(out: Path) -> tuple[Scenario, dict, list[PlannedRun], set[str]]:
    """What `raidlab run --resume OUT` continues: the scenario as it ran (OUT's copy), the
    manifest, the runs it planned (in order) and those already ok (kept).

    OUT must be a directory of the caller's (raidlab.outputs.owned_dir: not a link, not
    another user's, whoever the caller is), since the run writes into it; its files are read
    without following links (raidlab.outputs.read_regular). A run file that is not a regular
    file is not kept: the run is made again and its file replaces what was there."""
    from raidlab import scenarios

    owned_dir(out, "--resume")
    if os.path.lexists(out / RUNS_DIR):
        owned_dir(out / RUNS_DIR, "--resume")
    try:
        man = json.loads(read_regular(out / MANIFEST))
    except (OSError, ValueError):
        raise UsageError(f"{out} is not a results directory of `raidlab run` (no readable {MANIFEST})",
                         hint="give the <results>/<scenario>/<time> directory of the run to continue") from None
    if manifest_status(man).startswith("running"):
        raise UsageError(f"the run of {out} is still going (pid {man.get('pid')})", hint="let it finish, or stop it")
    try:
        scenario_text = read_regular(out / SCENARIO_COPY).decode()
    except (OSError, ValueError) as exc:
        raise UsageError(f"{out / SCENARIO_COPY}: {getattr(exc, 'strerror', None) or exc}",
                         hint="a results directory of `raidlab run` keeps the scenario it ran") from None
    scenario = scenarios.loads(scenario_text, out / SCENARIO_COPY)
    wanted = list(man.get("planned_runs", []))
    reps = max((int(r.rsplit("--r", 1)[1]) for r in wanted if "--r" in r), default=scenario.repeat)
    by_id = {p.run_id: p for p in scenarios.plan_runs(scenario, quick=bool(man.get("quick")), repeat=reps)}
    missing = [r for r in wanted if r not in by_id]
    if missing:
        raise UsageError(f"{out}: planned run {missing[0]} is not in its scenario copy", hint="start a new run")
    done = set()
    for path in (out / RUNS_DIR).glob("*.json"):
        if PARTIAL in path.name:
            continue
        try:
            if json.loads(read_regular(path)).get("status") == "ok":
                done.add(path.stem)
        except (OSError, ValueError, UsageError):
            continue
    return scenario, man, [by_id[r] for r in wanted], done


def run_scenario(scenario: Scenario, planned: list[PlannedRun], *, runner: str, results_root: Path,
                 quick: bool = False, home: str | None = None, progress: Progress | None = None,
                 command_line: list[str] | None = None,
                 after_run: Callable[[PlannedRun, dict], None] | None = None,
                 resume: Path | None = None, jobs: int = 1, cluster: Any = None) -> RunSummary:
    """Execute `planned`; write runs/*.json and manifest.json under a new results directory,
    or (`resume`) into an interrupted run's directory: its ok runs are kept, the others (the
    interrupted one, failed ones, those never started) run again, and the manifest records
    each resumption with the code's revision and host kernel then, beside those of the part
    before it (the top-level fields describe the last part). `cluster` (a raidlab.scaleout.
    Cluster) runs them on its workers; the manifest then names the scheduler and the workers."""
    progress = progress or Progress()
    argv = command_line if command_line is not None else sys.argv
    resumed: list[dict] = []
    done: set[str] = set()
    if resume is not None:
        out = resume
        _scenario, previous, _planned, done = resume_plan(out)
        make_dirs(out / RUNS_DIR, "--resume")
        for directory in (out, out / RUNS_DIR):
            remove_partials(directory)
        started = previous.get("started")
        resumed = list(previous.get("resumed", [])) + [{
            "at": dt.datetime.now().isoformat(timespec="seconds"), "git": git_revision(),
            "previous_git": previous.get("git"), "previous_status": previous.get("status"),
            "previous_kernel": previous.get("kernel"), "previous_host": previous.get("host"),
            "kept": sorted(done), "command_line": argv}]
        argv = previous.get("command_line", argv)
        scenario_file = previous.get("scenario_file") or str(scenario.path)
    else:
        out = results_dir(results_root, scenario)
        write_whole(out / SCENARIO_COPY, lambda partial: partial.write_text(scenario.text))
        started = dt.datetime.now().isoformat(timespec="seconds")
    manifest = dict(scenario=scenario, runner=runner, quick=quick, planned=planned, started=started,
                    command_line=argv)
    jobs = max(1, jobs) if scenario.kind == "sim" else 1  # module doc: live runs one at a time
    # a resumed run's manifest names the scenario file it was started from, not OUT's copy
    extra_base = {"resumed": resumed, "scenario_file": scenario_file} if resumed else {}
    extra_base["jobs"] = jobs
    write_manifest(out, **manifest, finished=None, status="running",
                   extra={**extra_base, **(cluster.manifest() if cluster is not None else {})})
    summary = RunSummary(out, ok=len(done))
    if scenario.kind == "live" and cluster is None:  # a worker does this before each live run
        for line in live.remove_abandoned_scratch_arrays(home):
            progress.notice(line)
    progress.start(len(planned))
    todo = [(index, run) for index, run in enumerate(planned) if run.run_id not in done]
    try:
        with terminate_as_interrupt():
            if cluster is not None:
                cluster.run(todo, scenario, runner, home, out, summary, progress, after_run)
            elif jobs > 1 and len(todo) > 1:
                _run_in_pool(todo, scenario, runner, jobs, out, summary, progress, after_run)
            else:
                for index, run in todo:
                    progress.run_started(index, run)
                    doc = execute_run(run, scenario, runner=runner, home=home, status=progress.step)
                    _record(doc, run, out, summary, progress, index, after_run)
                    if summary.missing_tool:
                        break
    except Signalled as sig:
        summary.interrupted, summary.signum = True, sig.signum
    except KeyboardInterrupt:
        summary.interrupted, summary.signum = True, signal.SIGINT
    finally:
        finished = dt.datetime.now().isoformat(timespec="seconds")
        write_manifest(out, **manifest, finished=finished,
                       status="interrupted" if summary.interrupted
                       else "stopped: missing program" if summary.missing_tool else "complete",
                       extra={**extra_base, **(cluster.manifest() if cluster is not None else {}),
                              "ok": summary.ok, "failed": summary.failed})
    return summary


def execute_run(run: PlannedRun, scenario: Scenario, *, runner: str, home: str | None = None,
                status: Callable[[str], None] | None = None) -> dict:
    """One run through its runner: the run file's document, status "ok" or "failed" (a
    failure is a result, not the end of the loop; `missing_program` marks a program the
    runner lacks, which every later run would lack too)."""
    begun = time.monotonic()
    stamp = dt.datetime.now().isoformat(timespec="seconds")
    try:
        doc = runners.run_case(run, scenario, runner=runner, home=home, status=status or (lambda _m: None))
        doc = {**doc, "status": "ok", "error": None}
    except MissingToolError as exc:
        doc = {"workload": scenario.workload, "params": dict(run.case.params), "metrics": {}, "commands": [],
               "raw": {}, "status": "failed", "error": str(exc), "error_type": type(exc).__name__,
               "missing_program": [exc.fields.get("tool"), exc.fields.get("package")]}
    except Exception as exc:  # noqa: BLE001 - a failed run is a result, not the end
        doc = {"workload": scenario.workload, "params": dict(run.case.params), "metrics": {},
               "commands": [], "raw": {}, "status": "failed", "error": str(exc)
               or type(exc).__name__, "error_type": type(exc).__name__}
        if not isinstance(exc, RaidlabError):
            doc["traceback"] = traceback.format_exc()
    doc.update(arch=run.arch.label, arch_id=run.arch.arch, case=run.case.name,
               repetition=run.repetition, started=stamp,
               seconds=round(time.monotonic() - begun, 3), runner=runner,
               filesystem=run.case.filesystem)
    doc.setdefault("mount_options", list(run.case.mount_options))
    return doc


def _record(doc: dict, run: PlannedRun, out: Path, summary: RunSummary, progress: Progress, index: int,
            after_run: Callable[[PlannedRun, dict], None] | None) -> None:
    missing = doc.pop("missing_program", False)
    if doc["status"] == "ok":
        summary.ok += 1
    else:
        summary.failed += 1
        summary.failures.append(f"{run.run_id}: {doc['error']}")
        if missing:
            summary.missing_tool = MissingToolError(*missing)
    _write_run(out, run, doc)
    progress.run_finished(index, run, doc)
    if after_run:
        after_run(run, doc)


_started = None  # a worker's queue of (run id, "start") events to its parent (_worker_init)


def _worker_init(started) -> None:
    """A pool worker ignores Ctrl-C (the terminal sends it to the whole process group); its
    parent ends the pool when the loop is interrupted, and a virtual-time run leaves nothing
    behind but its unwritten run file, which --resume runs again."""
    global _started
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _started = started


def _worker_run(run: PlannedRun, scenario: Scenario, runner: str) -> dict:
    _started.put(run.run_id)
    return execute_run(run, scenario, runner=runner)


def _run_in_pool(todo: list[tuple[int, PlannedRun]], scenario: Scenario, runner: str, jobs: int, out: Path,
                 summary: RunSummary, progress: Progress,
                 after_run: Callable[[PlannedRun, dict], None] | None) -> None:
    """The virtual-time runs of `todo` in `jobs` spawned workers (module doc); each run file is
    written as its run ends, with `beside`: the runs running at some moment of it."""
    import multiprocessing
    import queue as queue_module

    context = multiprocessing.get_context("spawn")
    started = context.Queue()
    running: dict[str, set[str]] = {}  # run id -> the runs seen running beside it so far
    index_of = {run.run_id: (index, run) for index, run in todo}

    def drain() -> None:
        while True:
            try:
                run_id = started.get_nowait()
            except queue_module.Empty:
                return
            for other, beside in running.items():
                beside.add(run_id)
            running[run_id] = set(running)
            index, run = index_of[run_id]
            progress.run_started(index, run)

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # workers start with Ctrl-C ignored
    try:
        pool = context.Pool(jobs, initializer=_worker_init, initargs=(started,))
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        pending = {run.run_id: pool.apply_async(_worker_run, (run, scenario, runner)) for _index, run in todo}
        while pending:
            drain()
            finished = [run_id for run_id, result in pending.items() if result.ready()]
            if not finished:
                time.sleep(0.05)
                continue
            drain()
            for run_id in finished:
                doc = pending.pop(run_id).get()
                beside = running.pop(run_id, set())
                doc["beside"] = sorted(beside)
                index, run = index_of[run_id]
                _record(doc, run, out, summary, progress, index, after_run)
        pool.close()
    finally:
        pool.terminate()
        pool.join()
        started.close()


def interrupted_error(summary: RunSummary) -> LabInterrupted:
    err = LabInterrupted(int(summary.signum or signal.SIGINT))
    err.message = (f"interrupted by {signal.Signals(summary.signum).name}: the current array was destroyed; "
                   f"{summary.ok + summary.failed} finished runs kept in {summary.out}")
    return err
