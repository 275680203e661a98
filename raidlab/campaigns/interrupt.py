"""The interrupt campaign: SIGINT, SIGTERM or SIGKILL at a random moment of a raidlab command,
and afterwards nothing of it left on the host.

Each point runs one command as a user would (a child process with its own RAIDLAB_HOME),
sends the signal after a random delay, and waits for the command to end. After a SIGKILL the
user's remedy is run, `raidlab lab cleanup NAME` for every lab the command made (a killed
process cannot release anything itself). Then the host is searched without raidlab's records
(raidlab.lab.held_under: loop devices, mounts and processes naming the home) and the home's
labs must be released. A command that ended before the signal counts as "finished first": it
tests nothing and is reported apart.

The commands: create (an engine array), destroy (of one just created), crashtest (one point),
run (a quick live scenario) and report (of a committed results directory, copied). What is
checked of member images: an array interrupted while being destroyed assembles again or is
gone, never half there. What is checked of a report: every file it had written is whole
(byte for byte the file an uninterrupted report writes), and no partial file stays after
SIGINT or SIGTERM; after a SIGKILL the user's remedy is to run the report again, which must
then be whole with no partial file left (raidlab.outputs.write_whole).
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raidlab.lab import Lab, held_under

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}
COMMANDS = ("create", "destroy", "crashtest", "run", "report")
# When the signal comes: a random moment within about the command's own duration here.
DELAYS = {"create": (0.05, 2.0), "destroy": (0.02, 0.6), "crashtest": (0.2, 4.0), "run": (0.5, 12.0),
          "report": (0.2, 2.5)}
SUBJECT = "raid5"  # the engine array create and destroy make and crashtest cuts (one point)
RUN_SCENARIO = "scenarios/raidx-fig7-andrew-phases.toml"  # live, native, about 10 s
REPORT_RESULTS = "results/raidx-fig7-andrew-phases"    # its newest run: 5 figures, about 2 s


@dataclasses.dataclass
class InterruptPoint:
    command: str
    signal: str
    delay_s: float
    finished_first: bool = False
    returncode: int | None = None
    cleanup_needed: bool = False
    leaks: list[str] = dataclasses.field(default_factory=list)
    labs_left: list[str] = dataclasses.field(default_factory=list)
    damage: list[str] = dataclasses.field(default_factory=list)  # of the files it writes (report)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.leaks and not self.labs_left and not self.damage

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


def _raidlab() -> list[str]:
    return [sys.executable, "-c", "from raidlab.cli import main; import sys; sys.exit(main())"]


def _report_source(repo: Path) -> Path:
    runs = sorted(p for p in (repo / REPORT_RESULTS).iterdir() if (p / "manifest.json").is_file())
    if not runs:
        raise FileNotFoundError(f"no results directory under {repo / REPORT_RESULTS}")
    return runs[-1]


def _fresh_results(repo: Path, where: Path) -> Path:
    """A copy of the report's results directory without its report."""
    shutil.rmtree(where, ignore_errors=True)
    shutil.copytree(_report_source(repo), where, ignore=shutil.ignore_patterns("report"))
    return where


def _report_files(results: Path) -> dict[str, bytes]:
    out = results / "report"
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} \
        if out.is_dir() else {}


def _report_damage(results: Path, reference: dict[str, bytes]) -> list[str]:
    """What is wrong with a report directory: files not whole, partial files left."""
    from raidlab.outputs import PARTIAL

    wrong = []
    for name, data in _report_files(results).items():
        if PARTIAL in name:
            wrong.append(f"partial file left: {name}")
        elif reference.get(name) != data:
            wrong.append(f"not whole: {name} ({len(data)} of {len(reference.get(name, b''))} bytes)")
    return wrong


def _argv(command: str) -> list[str]:
    if command == "create":
        return ["create", "i", "--arch", SUBJECT, "--disks", "3", "--disk-size", "32M"]
    if command == "destroy":
        return ["destroy", "i"]
    if command == "crashtest":
        return ["crashtest", SUBJECT, "--points", "1"]
    if command == "report":
        return ["report"]
    return ["run", RUN_SCENARIO, "--quick"]


def run_point(command: str, signame: str, rng: random.Random, scratch: Path, repo: Path,
              reference: dict[str, bytes] | None = None) -> InterruptPoint:
    home = scratch / "home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    env = {**os.environ, "RAIDLAB_HOME": str(home), "PYTHONPATH": str(repo)}
    point = InterruptPoint(command, signame, round(rng.uniform(*DELAYS[command]), 2))
    try:
        if command == "destroy":
            subprocess.run([*_raidlab(), *_argv("create")], env=env, cwd=repo, capture_output=True, check=True,
                           timeout=300)
        argv = _argv(command)
        if command == "run":
            argv += ["--results", str(scratch / "results")]
        if command == "report":
            argv.append(str(_fresh_results(repo, scratch / "results")))
        proc = subprocess.Popen([*_raidlab(), *argv], env=env, cwd=repo, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout=point.delay_s)
            point.finished_first = True
        except subprocess.TimeoutExpired:
            proc.send_signal(SIGNALS[signame])
        try:
            point.returncode = proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            point.returncode = proc.wait()
            point.error = f"still running 300 s after {signame}"
        labs = [p.name for p in (home / "labs").glob("*")] if (home / "labs").is_dir() else []
        if signame == "SIGKILL" and labs:
            # a killed raidlab releases nothing; its children die with it or are the cleanup's
            point.cleanup_needed = True
            time.sleep(0.5)
        for name in labs:  # what the user runs after an interrupt of any kind
            subprocess.run([*_raidlab(), "destroy", name], env=env, cwd=repo, capture_output=True, timeout=300)
            subprocess.run([*_raidlab(), "lab", "cleanup", name], env=env, cwd=repo, capture_output=True,
                           timeout=300)
        if command == "report":
            point.damage = _report_damage(scratch / "results", reference or {})
            if signame == "SIGKILL":  # the remedy: the report again, whole this time
                point.damage = [d for d in point.damage if not d.startswith("partial file left")]
                subprocess.run([*_raidlab(), *argv], env=env, cwd=repo, capture_output=True, timeout=300)
                again = _report_files(scratch / "results")
                point.damage += _report_damage(scratch / "results", reference or {})
                if set(again) != set(reference or {}):
                    point.damage.append("the report made again is not complete")
        point.leaks = held_under(home) + held_under(scratch / "results")
        point.labs_left = [p.name for p in (home / "labs").glob("*") if Lab(p.name, home=str(home)).resources()]
    except (OSError, subprocess.SubprocessError) as exc:
        point.error = f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(scratch / "results", ignore_errors=True)
    return point


def run_campaign(*, points: int, seed: int, scratch: Path, repo: Path,
                 commands: list[str] | None = None,
                 done: Callable[[InterruptPoint], None] = lambda p: None) -> dict[str, Any]:
    rng = random.Random(seed)
    results = []
    reference = None
    if "report" in (commands or COMMANDS):  # what an uninterrupted report writes
        source = _fresh_results(repo, scratch / "results")  # the points' path: the report names it
        subprocess.run([*_raidlab(), "report", str(source)], cwd=repo, capture_output=True, check=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(repo)})
        reference = _report_files(source)
        shutil.rmtree(source, ignore_errors=True)
    for command in commands or list(COMMANDS):
        for signame in SIGNALS:
            for _ in range(points):
                results.append(run_point(command, signame, rng, scratch, repo, reference))
                done(results[-1])
    shutil.rmtree(scratch / "home", ignore_errors=True)
    rows = []
    for command in commands or list(COMMANDS):
        for signame in SIGNALS:
            mine = [r for r in results if r.command == command and r.signal == signame]
            rows.append({"command": command, "signal": signame, "points": len(mine),
                         "interrupted": sum(not r.finished_first for r in mine),
                         "passed": sum(r.ok for r in mine), "leaks": sum(len(r.leaks) for r in mine),
                         "labs_left": sum(len(r.labs_left) for r in mine),
                         "damaged_files": sum(len(r.damage) for r in mine)})
    return {"seed": seed, "points": len(results), "passed": sum(r.ok for r in results),
            "failed": sum(not r.ok for r in results), "rows": rows, "results": [r.as_json() for r in results]}
