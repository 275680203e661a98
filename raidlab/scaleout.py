"""A scenario's runs spread over machines with Dask distributed.

`raidlab worker ADDRESS` makes a machine a Dask worker of the scheduler at ADDRESS; `raidlab
run SCENARIO --scheduler ADDRESS` submits each planned run there as one task and writes each
run file as its task completes, through the same record as the local loop
(raidlab.run._record), so the results directory is the one a local run writes. `--scheduler
local:N` starts a cluster of N single-threaded worker processes on this machine instead.

Resources. A worker declares `cores` (virtual-time runs it may run at once: by default the
machine's cores) and `live` (1 when the machine may run a live run: root and the lab's
programs present; else 0). A virtual-time run's task needs {"cores": 1}, a live run's
{"live": 1}: so a machine runs one live run at a time, beside nothing else of that
scenario, and as many virtual-time runs as it has cores. Every task runs its run in a
process of its own (raidlab.onerun, which says why), started and awaited by the worker's
event loop; the worker keeps one such process started ahead, raidlab imported, for its next
run.

Revisions. A result is only worth combining with others if the same code made it. Each
worker carries a plugin (RaidlabWorker) that holds its code revision (raidlab.run.
code_revision, with a hash of the uncommitted changes to that code when there are some),
host name, kernel and a machine-speed probe measured once when it starts. Before submitting
anything the client asks every worker for them and keeps only the workers at its own
revision; each other one is named in one line with both revisions, and if none is left
the run is refused with that line. Tasks are restricted to the kept workers; a worker that
joins later is asked too, and kept (added to the tasks' restrictions) or refused alike.

Failures. A worker that dies during a task (killed, or its machine lost) is noticed by the
scheduler, which runs the task again on another kept worker; a task that fails otherwise
(its run's process crashed) is tried once more (retries=1). Only a completed task writes a
run file: a run whose task failed for good is recorded as a failed run naming the error,
which `--resume` runs again like any failed run. Ctrl-C or SIGTERM cancels every task
(a cancelled task's worker stops its run's process: SIGTERM, which unwinds like Ctrl-C),
and raidlab.run marks the manifest interrupted; `raidlab run --resume DIR --scheduler ...`
continues it.

Security. Whoever can submit tasks to a scheduler runs code as its workers' user, root on
a lab machine. `local:N` therefore speaks TLS with a key made for that cluster alone and
kept in memory (distributed.security.Security.temporary), on the loopback interface; a
scheduler on the network should be reached over tls:// with the certificates Dask's own
configuration names (docs/scale-out.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
import pickle
import platform
import queue as queue_module
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from distributed import Client, WorkerPlugin, get_worker

from raidlab import __version__
from raidlab.errors import UsageError
from raidlab.run import CODE_PATHS, Progress, RunSummary, _record, code_revision
from raidlab.scenarios import PlannedRun, Scenario

PLUGIN = "raidlab"
STARTED = "raidlab-run-started"  # the topic of a task's "my run starts" event
LOCAL = "local:"
PROBE_LOOPS = 1_000_000          # the speed probe: iterations of a fixed loop, the best of PROBE_REPEATS
PROBE_REPEATS = 3
CONNECT_TIMEOUT = 30             # seconds to reach a scheduler and to see a first worker
ADOPT_EVERY = 2.0                # seconds between two looks for workers that joined
STOP_GRACE = 60                  # seconds a cancelled run's process gets to unwind (a live array) before SIGKILL


# --- the worker's side ------------------------------------------------------------------

def worker_revision() -> dict[str, Any]:
    """This checkout's code revision (raidlab.run.code_revision), with `changes`: a hash of
    the uncommitted changes to CODE_PATHS when there are some (two dirty trees at one commit
    are the same code only if they differ from it alike), and the raidlab version."""
    rev = {**code_revision(), "raidlab": __version__}
    if rev.get("dirty"):
        repo = Path(__file__).resolve().parent.parent
        try:
            diff = subprocess.run(["git", "diff", "HEAD", "--", *CODE_PATHS], capture_output=True, cwd=repo,
                                  timeout=30)
            rev["changes"] = hashlib.sha1(diff.stdout).hexdigest() if diff.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            rev["changes"] = None
    return rev


def same_revision(mine: dict, theirs: dict | None) -> bool:
    """Both are known, and the same code: one tree hash, and the same uncommitted changes."""
    if not theirs or not mine.get("code") or not theirs.get("code"):
        return False
    keys = ("code", "dirty", "changes")
    return all(mine.get(k) == theirs.get(k) for k in keys)


def show_revision(rev: dict | None) -> str:
    if not rev:
        return "unknown (not a raidlab worker)"
    if not rev.get("code"):
        return f"unknown (raidlab {rev.get('raidlab')}, not a git checkout)"
    text = f"code {str(rev['code'])[:12]}"
    if rev.get("dirty"):
        text += f" + uncommitted changes {str(rev.get('changes') or '?')[:12]}"
    return text


def speed_probe(loops: int = PROBE_LOOPS, repeats: int = PROBE_REPEATS) -> dict[str, Any]:
    """Seconds a fixed pure-Python loop of `loops` iterations takes, the best of `repeats`
    (raidlab.runners.speed's host loop): how fast one core of this machine runs raidlab."""
    from raidlab.runners.speed import host_us_per_loop

    return {"loops": loops, "seconds": round(host_us_per_loop(loops, repeats) * loops / 1e6, 4)}


def live_capable() -> tuple[bool, str]:
    """Whether this machine may run a live run: what `raidlab run` checks before one."""
    from raidlab.errors import RaidlabError
    from raidlab.export.serve import check_live_prerequisites

    try:
        check_live_prerequisites("raidlab worker")
    except RaidlabError as exc:
        return False, str(exc)
    return True, "root, with the lab's programs and FUSE"


# Dask's own periodic work, made rarer in raidlab's clusters: a worker process here shares its
# machine's cores with the runs it serves, which measure machine time. By default each of
# the scheduler's and workers' event loops wakes every 20 ms to measure its own latency
# (admin.tick), a nanny reads its worker's memory every 100 ms, every server samples its
# process every 500 ms (system-monitor), and a worker samples its threads' stacks every 10 ms
# for the dashboard's profile, which raidlab does not serve. An idle two-worker local cluster
# used 2.8-3.6 CPU-seconds in 30 s with the defaults and 0.45-0.47 with these (2026-12-07,
# results/bench/scaleout/NOTES.md). What they slow: a blocked event loop is reported after a
# second instead of 20 ms, a worker over its memory limit is stopped up to a second later.
QUIET_CONFIG = {
    "distributed.admin.tick.interval": "1s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.profile.enabled": False,
}


class RaidlabWorker(WorkerPlugin):
    """What a raidlab worker says about itself (module doc): set up when the worker starts.

    `revision` is the worker's own unless given (a test's stand-in for a worker of another
    checkout); `ignore_sigint` is for the worker processes of a local cluster, which share
    the terminal of the command that started them and are stopped by it."""

    name = PLUGIN

    def __init__(self, revision: dict | None = None, ignore_sigint: bool = False):
        self.revision = revision
        self.ignore_sigint = ignore_sigint
        self.info: dict[str, Any] = {}
        # Run processes with raidlab imported, each waiting for a run on stdin
        # (raidlab.onerun): a task takes one, and gives it back after a virtual-time run;
        # a new one is started ahead only when none is left, so a run neither waits for
        # Python and raidlab to load nor shares its core with another process's imports.
        self.spares: list[asyncio.subprocess.Process] = []

    def setup(self, worker) -> None:
        if self.ignore_sigint and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.info = {"host": socket.gethostname(), "kernel": platform.release(),
                     "python": platform.python_version(), "cpus": os.cpu_count(),
                     "revision": self.revision or worker_revision(), "speed": speed_probe()}

    async def run_process(self) -> asyncio.subprocess.Process:
        """A run's process: a spare that is still waiting, else a new one; when that leaves
        no spare, one is started ahead for the next run."""
        proc = None
        while self.spares and proc is None:
            spare = self.spares.pop()
            if spare.returncode is None:
                proc = spare
        if proc is None:
            proc = await _start_run_process()
        if not self.spares:
            self.spares.append(await _start_run_process())
        return proc

    def give_back(self, proc: asyncio.subprocess.Process) -> None:
        """A process whose virtual-time run ended well waits for the next run."""
        if proc.returncode is None:
            self.spares.append(proc)

    def teardown(self, worker) -> None:
        for spare in self.spares:  # each waits on stdin; without its run it just ends
            with contextlib.suppress(ProcessLookupError):
                spare.kill()
        self.spares.clear()


async def _exchange(proc: asyncio.subprocess.Process, job: tuple) -> bytes | None:
    """Hand a run process its run and read back its document (raidlab.onerun): the pickled
    document after its 8-byte length, or None if the process ended without one."""
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(pickle.dumps(job))
        await proc.stdin.drain()
        size = struct.unpack("<Q", await proc.stdout.readexactly(8))[0]
        return await proc.stdout.readexactly(size)
    except (asyncio.IncompleteReadError, BrokenPipeError, ConnectionResetError):
        return None


async def _start_run_process() -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, "-m", "raidlab.onerun", stdin=subprocess.PIPE,
                                                stdout=subprocess.PIPE)


def describe_worker(dask_worker) -> dict[str, Any] | None:
    """Run on a worker (Client.run): its plugin's record, with its name, address and
    resources; None on a worker without the plugin (a plain `dask worker`)."""
    plugin = dask_worker.plugins.get(PLUGIN)
    if plugin is None or not getattr(plugin, "info", None):
        return None
    return {"name": str(dask_worker.name), "address": dask_worker.address,
            "resources": dict(dask_worker.state.total_resources), **plugin.info}


def _task_state(worker, key: str) -> str | None:
    try:
        ts = worker.state.tasks.get(key)
    except AttributeError:  # a Dask without this state: a cancelled run then ends on its own
        return "executing"
    return None if ts is None else ts.state


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM (the run unwinds as after Ctrl-C), then SIGKILL after STOP_GRACE."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        await asyncio.wait_for(proc.wait(), STOP_GRACE)
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


class RunCancelled(Exception):
    """The run's task was cancelled while its run ran; the run's process was stopped."""


async def run_task(run: PlannedRun, scenario: Scenario, runner: str, home: str | None, key: str) -> dict:
    """A run's task, on a worker: the run in a process of its own (raidlab.onerun), its
    document with the worker's host, kernel and speed probe, and when the run began and
    ended by the worker's clock ({"doc", "begun", "ended"}). The process is stopped if the
    task is cancelled or the worker closes (Ctrl-C at the worker)."""
    worker = get_worker()
    plugin = worker.plugins.get(PLUGIN)
    if plugin is None:
        raise RuntimeError(f"worker {worker.address} is not a raidlab worker (start it with `raidlab worker`)")
    info = plugin.info
    begun = time.time()
    worker.log_event(STARTED, {"run": run.run_id, "host": info["host"], "worker": worker.address, "at": begun})
    proc = await plugin.run_process()
    talk = asyncio.ensure_future(_exchange(proc, (run, scenario, runner, home)))
    try:
        while not talk.done():
            await asyncio.wait({talk}, timeout=0.5)
            if not talk.done() and _task_state(worker, key) in (None, "cancelled", "released"):
                await _stop(proc)
                raise RunCancelled(run.run_id)
        out = talk.result()
    except BaseException:
        await _stop(proc)
        talk.cancel()
        raise
    if out is None:
        await proc.wait()
        raise RuntimeError(f"the process of run {run.run_id} on {info['host']} ended with exit code "
                           f"{proc.returncode} and no result")
    if scenario.kind == "live":
        await proc.wait()
    else:
        plugin.give_back(proc)
    doc = pickle.loads(out)
    doc["worker"] = {"name": str(worker.name), "address": worker.address, "host": info["host"],
                     "kernel": info["kernel"], "speed": info["speed"]}
    return {"doc": doc, "begun": begun, "ended": time.time()}


# --- the client's side --------------------------------------------------------------------

@dataclasses.dataclass
class Cluster:
    """A connected scheduler and the workers kept for this run (module doc)."""

    spec: str
    client: Client
    revision: dict
    kind: str
    local: Any = None                      # the LocalCluster's SpecCluster for local:N
    workers: dict[str, dict] = dataclasses.field(default_factory=dict)   # address -> describe_worker
    refused: dict[str, str] = dataclasses.field(default_factory=dict)    # address -> why
    notice: Callable[[str], None] = lambda _m: None

    @property
    def address(self) -> str:
        return self.client.scheduler.address

    def manifest(self) -> dict[str, Any]:
        return {"scheduler": {"given": self.spec, "address": self.address, "revision": self.revision},
                "workers": [{k: w.get(k) for k in ("name", "address", "host", "kernel", "cpus", "resources",
                                                   "speed")} for w in self.workers.values()],
                "workers_refused": dict(self.refused)}

    def resources(self) -> dict[str, float]:
        return {"live": 1} if self.kind == "live" else {"cores": 1}

    def _usable(self, info: dict) -> bool:
        return float(info.get("resources", {}).get(next(iter(self.resources())), 0)) >= 1

    def look(self, addresses: list[str] | None = None) -> list[str]:
        """Ask the workers at `addresses` (all connected ones: None) for their revision;
        keep those at the client's, refuse the others with one line each. The newly kept."""
        try:
            answers = self.client.run(describe_worker, workers=addresses, on_error="return")
        except Exception as exc:  # noqa: BLE001 - a worker that went away meanwhile
            self.notice(f"asking the workers their revision: {exc}")
            return []
        kept = []
        for address, info in sorted(answers.items()):
            if address in self.workers or address in self.refused:
                continue
            if isinstance(info, BaseException):
                info = None
            name = (info or {}).get("name") or address
            said = [address] if name != address else []
            said += [info["host"]] if info and info.get("host") else []
            where = f"worker {name}" + (f" ({', '.join(said)})" if said else "")
            if not same_revision(self.revision, (info or {}).get("revision")):
                why = (f"{where} is at {show_revision((info or {}).get('revision'))}, this client at "
                       f"{show_revision(self.revision)}")
                self.refused[address] = why
                self.notice(f"not used: {why}")
                continue
            if not self._usable(info):
                self.refused[address] = f"{where} offers no {next(iter(self.resources()))} slot"
                self.notice(f"not used: {self.refused[address]}")
                continue
            self.workers[address] = info
            kept.append(address)
        return kept

    def run(self, todo: list[tuple[int, PlannedRun]], scenario: Scenario, runner: str, home: str | None,
            out: Path, summary: RunSummary, progress: Progress,
            after_run: Callable[[PlannedRun, dict], None] | None) -> None:
        """raidlab.run.run_scenario's loop on this cluster (run_on_cluster)."""
        run_on_cluster(self, todo, scenario, runner, home, out, summary, progress, after_run)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close(timeout=10)
        if self.local is not None:
            with contextlib.suppress(Exception):
                self.local.close(timeout=STOP_GRACE)


def _local_cluster(n: int, live: bool):
    """N worker processes (Nanny) of one thread on the loopback interface, over TLS with a
    key of their own; the first may take a live run if this machine may (one live slot per
    machine), the others only virtual-time runs."""
    import dask
    from distributed import Nanny, Scheduler, SpecCluster
    from distributed.security import Security

    security = Security.temporary()
    quiet = logging.ERROR
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "protocol": "tls", "port": 0,
                                                "security": security, "dashboard": False,
                                                "dashboard_address": "127.0.0.1:0"}}
    workers = {f"local-{i}": {"cls": Nanny, "options": {
        "host": "127.0.0.1", "protocol": "tls", "security": security, "nthreads": 1,
        "resources": {"cores": 1, "live": 1 if live and i == 0 else 0}, "silence_logs": quiet,
        "plugins": (RaidlabWorker(ignore_sigint=True),)}} for i in range(n)}
    # the worker processes start with Ctrl-C ignored: the command stops them itself
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if threading.current_thread() is threading.main_thread() else None
    # no HTTP pages (task names, worker state, metrics) for other local users to read
    no_pages = {"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}
    try:
        with dask.config.set({**QUIET_CONFIG, **no_pages}):
            return SpecCluster(scheduler=scheduler, workers=workers, security=security, silence_logs=quiet,
                               name=f"raidlab local:{n}")
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def connect(spec: str, kind: str, notice: Callable[[str], None] = lambda _m: None) -> Iterator[Cluster]:
    """The scheduler `spec` names (a Dask address, or local:N), its workers asked for their
    revision and the usable ones kept (module doc); UsageError, before anything is run,
    when none is."""
    revision = worker_revision()
    local = None
    if spec.startswith(LOCAL):
        try:
            n = int(spec[len(LOCAL):])
        except ValueError:
            n = 0
        if n < 1:
            raise UsageError(f"--scheduler {spec}: local:N takes a number of worker processes, 1 or more")
        logging.getLogger("distributed").setLevel(logging.ERROR)
        live = kind == "live" and live_capable()[0]
        local = _local_cluster(n, live)
        try:
            client = Client(local, timeout=CONNECT_TIMEOUT)
            client.wait_for_workers(n, timeout=CONNECT_TIMEOUT)
        except BaseException:
            local.close()
            raise
    else:
        if "://" not in spec:
            raise UsageError(f"--scheduler {spec}: give a scheduler's address (tcp://HOST:PORT, tls://HOST:PORT) "
                             f"or local:N")
        try:
            client = Client(spec, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError, TypeError, ValueError) as exc:  # TypeError: tls:// without certificates
            raise UsageError(f"--scheduler {spec}: cannot reach the scheduler ({exc})",
                             hint="start one (`dask scheduler`) and its workers (`raidlab worker ADDRESS`); "
                                  "tls:// takes Dask's TLS configuration (docs/scale-out.md)") from None
        try:
            client.wait_for_workers(1, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError):
            client.close()
            raise UsageError(f"--scheduler {spec}: no worker connected in {CONNECT_TIMEOUT} s",
                             hint="start one on each machine: raidlab worker " + spec) from None
    cluster = Cluster(spec, client, revision, kind, local=local, notice=notice)
    try:
        cluster.look()
        if not cluster.workers:
            why = next(iter(cluster.refused.values()), "no worker")
            raise UsageError(f"--scheduler {spec}: no worker to use: {why}",
                             hint="start the workers from a checkout at this client's revision")
        yield cluster
    finally:
        cluster.close()


def _task_failed(run: PlannedRun, scenario: Scenario, runner: str, exc: BaseException) -> dict:
    """The run file of a run whose task failed for good (its worker died too often, or its
    process crashed twice): a failed run like any other, which --resume runs again."""
    return {"workload": scenario.workload, "params": dict(run.case.params), "metrics": {}, "commands": [],
            "raw": {}, "status": "failed", "error": f"its task failed on the Dask cluster: {exc}".rstrip(": "),
            "error_type": type(exc).__name__, "arch": run.arch.label, "arch_id": run.arch.arch,
            "case": run.case.name, "repetition": run.repetition, "started": None, "seconds": None,
            "runner": runner, "filesystem": run.case.filesystem, "mount_options": list(run.case.mount_options),
            "worker": None}


def run_on_cluster(cluster: Cluster, todo: list[tuple[int, PlannedRun]], scenario: Scenario, runner: str,
                   home: str | None, out: Path, summary: RunSummary, progress: Progress,
                   after_run: Callable[[PlannedRun, dict], None] | None) -> None:
    """Submit the runs of `todo`, one task each, and record each as its task completes, with
    `beside`: the runs that ran on the same host at some moment of it (by that host's clock:
    each task says when its run began, as it begins, and when it ended). Whatever ends the
    loop (done, a missing program, Ctrl-C) cancels the tasks still pending."""
    client = cluster.client
    cluster.notice = progress.notice
    started: queue_module.Queue = queue_module.Queue()
    client.subscribe_topic(STARTED, lambda event: started.put(event[1]))
    index_of = {run.run_id: (index, run) for index, run in todo}
    spans: dict[str, list] = {}  # run id -> [host, began, ended or None], the last attempt's
    recorded: set[str] = set()

    def drain() -> None:
        while True:
            try:
                event = started.get_nowait()
            except queue_module.Empty:
                return
            run_id = event.get("run")
            if run_id not in index_of or run_id in recorded:
                continue
            spans[run_id] = [event.get("host"), float(event.get("at", 0)), None]
            progress.run_started(*index_of[run_id])

    def beside(run_id: str, host: str, began: float, ended: float) -> list[str]:
        return sorted(other for other, (where, start, end) in spans.items()
                      if other != run_id and where == host and start < ended and (end is None or end > began))

    pending: dict[str, Any] = {}
    try:
        for _index, run in todo:
            key = f"raidlab-{run.run_id}-{uuid.uuid4().hex[:12]}"
            pending[run.run_id] = client.submit(run_task, run, scenario, runner, home, key, key=key, pure=False,
                                                resources=cluster.resources(), workers=list(cluster.workers),
                                                allow_other_workers=False, retries=1)
        looked = time.monotonic()
        while pending:
            drain()
            if time.monotonic() - looked > ADOPT_EVERY:
                looked = time.monotonic()
                _adopt(cluster, pending)
            finished = [run_id for run_id, future in pending.items() if future.done()]
            if not finished:
                time.sleep(0.05)
                continue
            drain()
            for run_id in finished:
                future = pending.pop(run_id)
                index, run = index_of[run_id]
                try:
                    done = future.result()
                    doc = done["doc"]
                    host = doc["worker"]["host"]
                    spans[run_id] = [host, done["begun"], done["ended"]]
                    doc["beside"] = beside(run_id, host, done["begun"], done["ended"])
                except Exception as exc:  # noqa: BLE001 - a task that failed for good is a failed run
                    doc = _task_failed(run, scenario, runner, exc)
                    spans.pop(run_id, None)
                    doc["beside"] = []
                recorded.add(run_id)
                _record(doc, run, out, summary, progress, index, after_run)
            if summary.missing_tool:
                break
    finally:
        if pending:
            with contextlib.suppress(Exception):
                client.cancel(list(pending.values()), force=True)
        with contextlib.suppress(Exception):
            client.unsubscribe_topic(STARTED)


def _adopt(cluster: Cluster, pending: dict[str, Any]) -> None:
    """Workers that joined since the start: asked and, if kept, added to every pending
    task's allowed workers."""
    try:
        connected = set(cluster.client.scheduler_info(n_workers=-1)["workers"])
    except Exception:  # noqa: BLE001 - asked again next time
        return
    new = sorted(connected - set(cluster.workers) - set(cluster.refused))
    if not new or not cluster.look(new) or not pending:
        return
    allowed = list(cluster.workers)
    with contextlib.suppress(Exception):
        cluster.client.sync(cluster.client.scheduler.set_restrictions,
                            worker={future.key: allowed for future in pending.values()})
