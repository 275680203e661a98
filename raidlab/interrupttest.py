"""The interrupt campaign: SIGINT, SIGTERM or SIGKILL at a random moment of a raidlab command,
and afterwards nothing of it left on the host.

Each point runs one command as a user would (a child process with its own RAIDLAB_HOME),
sends the signal after a random delay, and waits for the command to end. After a SIGKILL the
user's remedy is run, `raidlab lab cleanup NAME` for every lab the command made (a killed
process cannot release anything itself). Then the host is searched without raidlab's records
(raidlab.lab.held_under: loop devices, mounts and processes naming the home) and the home's
labs must be released. A command that ended before the signal counts as "finished first": it
tests nothing and is reported apart.

The commands: create (an engine array), destroy (of one just created), crashtest (one point)
and run (a quick live scenario). What is checked of member images: an array interrupted
while being destroyed assembles again or is gone, never half there.
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
COMMANDS = ("create", "destroy", "crashtest", "run")
# When the signal comes: a random moment within about the command's own duration here.
DELAYS = {"create": (0.05, 2.0), "destroy": (0.02, 0.6), "crashtest": (0.2, 4.0), "run": (0.5, 12.0)}
RUN_SCENARIO = "scenarios/raidx-fig7-andrew-phases.toml"  # live, native, about 10 s


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
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.leaks and not self.labs_left

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


def _raidlab() -> list[str]:
    return [sys.executable, "-c", "from raidlab.cli import main; import sys; sys.exit(main())"]


def _argv(command: str) -> list[str]:
    if command == "create":
        return ["create", "i", "--arch", "raid5", "--disks", "3", "--disk-size", "32M"]
    if command == "destroy":
        return ["destroy", "i"]
    if command == "crashtest":
        return ["crashtest", "raid5", "--points", "1"]
    return ["run", RUN_SCENARIO, "--quick"]


def run_point(command: str, signame: str, rng: random.Random, scratch: Path, repo: Path) -> InterruptPoint:
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
    for command in commands or list(COMMANDS):
        for signame in SIGNALS:
            for _ in range(points):
                results.append(run_point(command, signame, rng, scratch, repo))
                done(results[-1])
    shutil.rmtree(scratch / "home", ignore_errors=True)
    rows = []
    for command in commands or list(COMMANDS):
        for signame in SIGNALS:
            mine = [r for r in results if r.command == command and r.signal == signame]
            rows.append({"command": command, "signal": signame, "points": len(mine),
                         "interrupted": sum(not r.finished_first for r in mine),
                         "passed": sum(r.ok for r in mine), "leaks": sum(len(r.leaks) for r in mine),
                         "labs_left": sum(len(r.labs_left) for r in mine)})
    return {"seed": seed, "points": len(results), "passed": sum(r.ok for r in results),
            "failed": sum(not r.ok for r in results), "rows": rows, "results": [r.as_json() for r in results]}
