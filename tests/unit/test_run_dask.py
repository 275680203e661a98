"""`raidlab run --scheduler`: a scenario's runs as tasks of a Dask scheduler give the run files
a serial loop gives, but for wall-clock fields and the worker that ran each; a worker killed
during a run costs nothing but time; a worker at another code revision is refused; Ctrl-C or
SIGTERM leaves no process behind and an interrupted directory that --resume completes."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from distributed import Client, LocalCluster

from raidlab.scaleout import RaidlabWorker, worker_revision
from test_run_jobs import SCENARIO, _in_session, _runs, _without_wall

# What may differ from a serial loop: the wall clock, who ran beside, and who ran it.
WORKER_FIELDS = {"worker"}
OTHER_REVISION = {"code": "0" * 40, "dirty": False, "raidlab": "0.1.0"}


def _cluster(n: int, plugin: RaidlabWorker | None = None) -> LocalCluster:
    return LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                        dashboard_address="127.0.0.1:0", resources={"cores": 1, "live": 0},
                        plugins=(plugin or RaidlabWorker(),), silence_logs=logging.ERROR)


def _raidlab(raidlab_cmd, tmp_path: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*raidlab_cmd, "run", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path)


def _directory(proc: subprocess.CompletedProcess) -> Path:
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip().splitlines()[-1])


def _scenario(tmp_path: Path, repeat: int = 2) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(SCENARIO.replace("repeat = 2", f"repeat = {repeat}"))
    return path


def test_runs_on_dask_workers_write_what_a_serial_loop_writes(tmp_path, raidlab_cmd):
    path = _scenario(tmp_path)
    serial = _directory(_raidlab(raidlab_cmd, tmp_path, str(path), "--results", str(tmp_path / "serial")))
    with _cluster(2) as cluster:
        address = cluster.scheduler_address
        spread = _directory(_raidlab(raidlab_cmd, tmp_path, str(path), "--results", str(tmp_path / "dask"),
                                     "--scheduler", address))
    one, two = _runs(serial), _runs(spread)
    assert len(one) == 12 and one.keys() == two.keys()
    for name in one:
        assert one[name]["status"] == "ok", name
        assert _without_wall({k: v for k, v in one[name].items() if k not in WORKER_FIELDS}) == \
            _without_wall({k: v for k, v in two[name].items() if k not in WORKER_FIELDS}), name
    # each run names the worker that ran it: its host, kernel and speed probe
    manifest = json.loads((spread / "manifest.json").read_text())
    workers = {w["address"]: w for w in manifest["workers"]}
    assert len(workers) == 2 and manifest["scheduler"]["address"] == address
    for doc in two.values():
        assert doc["worker"]["address"] in workers
        assert doc["worker"]["host"] == os.uname().nodename and doc["worker"]["kernel"] == os.uname().release
        assert doc["worker"]["speed"]["seconds"] > 0 and doc["worker"]["speed"]["loops"] > 0
        assert set(doc["beside"]) <= {n.removesuffix(".json") for n in two}
    assert {doc["worker"]["address"] for doc in two.values()} == set(workers)  # both took runs
    assert manifest["status"] == "complete" and manifest["workers_refused"] == {}


def _run_processes(parents: set[int]) -> list[int]:
    """The run processes (raidlab.onerun) whose parent is one of `parents`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid in parents and b"raidlab.onerun" in cmdline:
            found.append(int(pid))
    return found


def test_a_worker_killed_during_a_run_leaves_every_run_complete(tmp_path, raidlab_cmd):
    path = _scenario(tmp_path)
    results = tmp_path / "results"
    with _cluster(2) as cluster, Client(cluster) as client:
        pids = client.run(os.getpid)
        proc = subprocess.Popen([*raidlab_cmd, "run", str(path), "--results", str(results),
                                 "--scheduler", cluster.scheduler_address],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        try:
            deadline = time.monotonic() + 240
            running: list[int] = []
            while time.monotonic() < deadline and not running and proc.poll() is None:
                running = _run_processes(set(pids.values()))
                time.sleep(0.05)
            assert running, "no run started"
            victim = int(Path(f"/proc/{running[0]}/stat").read_text().rsplit(")", 1)[1].split()[1])
            os.kill(victim, signal.SIGKILL)  # the worker process, while its run runs
            out, err = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    directory = Path(out.strip().splitlines()[-1])
    runs = _runs(directory)
    assert len(runs) == 12 and all(doc["status"] == "ok" for doc in runs.values())
    assert json.loads((directory / "manifest.json").read_text())["status"] == "complete"
    # the run the killed worker left stops itself once it sees its worker gone
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{running[0]}").exists():
        status = Path(f"/proc/{running[0]}/stat").read_text().rsplit(")", 1)[1].split()[0] \
            if Path(f"/proc/{running[0]}/stat").exists() else "Z"
        if status == "Z":
            break
        time.sleep(0.1)
    stat = Path(f"/proc/{running[0]}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_worker_at_another_revision_is_refused(tmp_path, raidlab_cmd):
    path = _scenario(tmp_path, repeat=1)
    mine = worker_revision()
    with _cluster(1, RaidlabWorker(revision=OTHER_REVISION)) as cluster, Client(cluster) as client:
        address = cluster.scheduler_address
        (other,) = client.scheduler_info()["workers"]
        refused = _raidlab(raidlab_cmd, tmp_path, str(path), "--results", str(tmp_path / "r"),
                           "--scheduler", address)
        assert refused.returncode == 2, refused.stderr
        line = [x for x in refused.stderr.splitlines() if x.startswith("raidlab: error:")]
        assert len(line) == 1, refused.stderr
        assert other in line[0] and "code 000000000000" in line[0] and f"code {mine['code'][:12]}" in line[0]
        assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("manifest.json"))
        # a worker of this checkout joins (the command itself): it is used, the other one is not
        worker = subprocess.Popen([*raidlab_cmd, "worker", address, "--cores", "1", "--no-live"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            client.wait_for_workers(2, timeout=120)
            used = _directory(_raidlab(raidlab_cmd, tmp_path, str(path), "--results", str(tmp_path / "r"),
                                       "--scheduler", address))
        finally:
            worker.send_signal(signal.SIGINT)  # Ctrl-C closes the worker
            _out, worker_err = worker.communicate(timeout=120)
    assert worker.returncode == 0, worker_err
    manifest = json.loads((used / "manifest.json").read_text())
    assert [w["address"] for w in manifest["workers"]] != [other] and len(manifest["workers"]) == 1
    assert list(manifest["workers_refused"]) == [other]
    runs = _runs(used)
    assert len(runs) == 6 and {doc["worker"]["address"] for doc in runs.values()} == \
        {manifest["workers"][0]["address"]}


def test_a_cancelled_run_leaves_no_process_and_resume_completes_it(tmp_path, raidlab_cmd):
    path = _scenario(tmp_path, repeat=4)
    results = tmp_path / "results"
    proc = subprocess.Popen([*raidlab_cmd, "run", str(path), "--results", str(results), "--scheduler", "local:2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            start_new_session=True)
    deadline = time.monotonic() + 240
    runs_dir = None
    while time.monotonic() < deadline and proc.poll() is None:  # interrupt once the first runs are written
        found = [p for p in results.glob("*/*/runs/*.json") if not p.name.startswith(".")]  # not a partial
        if found:
            runs_dir = found[0].parent
            break
        time.sleep(0.05)
    assert runs_dir is not None, proc.stderr.read() if proc.poll() is not None else "no run finished"
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=180)
    assert proc.returncode != 0, err
    directory = runs_dir.parent
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["status"] == "interrupted", err
    kept = _runs(directory)
    assert 0 < len(kept) < 24 and all(doc["status"] == "ok" for doc in kept.values())
    # nothing is left in the session the command led: no worker, no nanny, no run
    time.sleep(0.5)
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _in_session(int(pid), proc.pid)]
    again = _directory(_raidlab(raidlab_cmd, tmp_path, "--resume", str(directory), "--scheduler", "local:2"))
    assert again == directory
    assert len(_runs(directory)) == 24
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["resumed"]


def test_the_report_names_the_hosts_a_claim_compares(tmp_path, raidlab_cmd):
    path = _scenario(tmp_path, repeat=1)
    directory = _directory(_raidlab(raidlab_cmd, tmp_path, str(path), "--results", str(tmp_path / "r")))

    def report() -> str:
        proc = subprocess.run([*raidlab_cmd, "report", str(directory), "--format", "md"], capture_output=True,
                              text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return (directory / "report" / "report.md").read_text()

    assert "**Hosts**" not in report()  # one loop, one machine
    for run in (directory / "runs").glob("*.json"):  # as if two workers had made them
        doc = json.loads(run.read_text())
        host = "lab-b" if doc["arch"] == "raid0-64k" else "lab-a"
        doc["worker"] = {"name": host, "address": f"tcp://{host}:1", "host": host, "kernel": "6.1",
                         "speed": {"loops": 1, "seconds": 1.0}}
        run.write_text(json.dumps(doc))
    (line,) = [x for x in report().splitlines() if "**Hosts**" in x]
    # chunk-reads compares raid0-64k (lab-b) with raid0-4k (lab-a); level reads raid0-8k alone
    assert "claim `chunk-reads` compares runs made on lab-a, lab-b" in line and "`level`" not in line


@pytest.mark.root
@pytest.mark.live
def test_live_runs_on_a_local_cluster_take_its_one_live_slot(tmp_path, raidlab_cmd):
    from test_run_report import _no_leftovers
    from test_run_report import _scenario as live_scenario

    path = live_scenario(tmp_path, repeat=1, files=200, transactions=600, tiny=False)
    home = tmp_path / "home"
    proc = _raidlab(raidlab_cmd, tmp_path, str(path), "--home", str(home), "--results", str(tmp_path / "r"),
                    "--scheduler", "local:2", timeout=900)
    directory = _directory(proc)
    runs = _runs(directory)
    assert sorted(runs) == ["raid0--small--r1.json", "raid5--small--r1.json"]
    assert all(doc["status"] == "ok" and doc["metrics"]["tps"]["value"] > 0 for doc in runs.values())
    # one machine, one live slot: the first worker's; the other offers cores only
    assert {doc["worker"]["name"] for doc in runs.values()} == {"local-0"}
    assert not any(doc["beside"] for doc in runs.values())
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["status"] == "complete" and len(manifest["workers"]) == 1
    assert manifest["workers_refused"]  # the worker without a live slot, named
    _no_leftovers(home)


@pytest.mark.root
@pytest.mark.live
def test_a_live_run_cancelled_on_a_local_cluster_leaves_no_lab_loop_device_or_mount(tmp_path, raidlab_cmd):
    """SIGTERM at the client while a worker's live run has its array mounted: the task is
    cancelled, the run process destroys its array, and nothing of the lab is left."""
    from test_run_report import _no_leftovers, _workload_mounts
    from test_run_report import _scenario as live_scenario

    path = live_scenario(tmp_path, repeat=2, files=2000, transactions=40000, tiny=False)
    home, results = tmp_path / "home", tmp_path / "r"
    proc = subprocess.Popen([*raidlab_cmd, "run", str(path), "--home", str(home), "--results", str(results),
                             "--scheduler", "local:2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        seen: set[str] = set()
        while not seen and time.monotonic() < deadline and proc.poll() is None:
            seen = _workload_mounts(home) if home.exists() else set()
            time.sleep(0.2)
        assert seen, proc.stderr.read() if proc.poll() is not None else "the first run never mounted its array"
        time.sleep(2)  # PostMark is running on it
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0, err
    (directory,) = results.glob("*/*")
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["status"] == "interrupted", err
    assert all(doc["status"] == "ok" for doc in _runs(directory).values())  # no partial run kept
    time.sleep(0.5)
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _in_session(int(pid), proc.pid)]
    _no_leftovers(home, seen)


def test_a_worker_starts_each_run_process_ahead_and_ends_its_spare_on_teardown():
    """A task takes the process started for it ahead (raidlab imported, waiting for its run)
    and starts the next; a process given back after its run is the next one taken, and no
    new one is started then; a spare left when the worker closes is ended."""
    import asyncio

    async def main():
        plugin = RaidlabWorker()
        first = await plugin.run_process()
        [spare] = plugin.spares
        plugin.give_back(first)
        assert await plugin.run_process() is first and plugin.spares == [spare]
        second = await plugin.run_process()
        assert second is spare and first is not spare
        [third] = plugin.spares
        for proc in (first, second):  # given no run, a run process just ends
            proc.stdin.close()
            assert await asyncio.wait_for(proc.wait(), 60) == 0
        plugin.teardown(None)
        assert plugin.spares == [] and await asyncio.wait_for(third.wait(), 60) != 0

    asyncio.run(main())


def test_a_local_cluster_runs_with_dask_s_periodic_work_made_rarer():
    """The scheduler and every worker process of `--scheduler local:N` run with
    QUIET_CONFIG (the event loops' ticks, the memory monitor, the system monitor, the
    profiler): their periodic callbacks are set when each server is made."""
    import dask

    from raidlab.scaleout import connect

    def periodic(dask_scheduler=None, dask_worker=None) -> dict:
        server = dask_scheduler or dask_worker
        found = {name: pc.callback_time for name, pc in server.periodic_callbacks.items()}
        return {**found, "profile": dask.config.get("distributed.worker.profile.enabled")}

    with connect("local:1", "virtual") as cluster:
        on_workers = cluster.client.run(periodic)
        on_scheduler = cluster.client.run_on_scheduler(periodic)
    assert len(on_workers) == 1
    for found in on_workers.values():
        assert (found["tick"], found["monitor"], found["memory_monitor"], found["profile"]) == (1000, 5000, 1000, False)
    assert (on_scheduler["tick"], on_scheduler["monitor"]) == (1000, 5000)
