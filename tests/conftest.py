"""Shared test set-up.

Markers (pyproject.toml): root, live, vm, md, slow; and `long`, registered below: the tests
`make test` leaves to `make test-long`. A test marked `root` is skipped with a one-line
reason only when the process is not root; on the project's machines (root) it runs.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

import start_order

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def _seconds(durations: dict[str, float]):
    """A test's recorded seconds; a test of a recorded module that is not in the record took
    under a second; a test of a module never recorded is estimated from its markers."""
    recorded_modules = {nodeid.split("::")[0] for nodeid in durations}

    def seconds(item) -> float:
        if item.nodeid in durations:
            return durations[item.nodeid]
        if item.nodeid.split("::")[0] in recorded_modules:
            return start_order.RECORD_BELOW / 2
        kind = "vm" if "vm" in item.keywords else "live" if "live" in item.keywords else "other"
        return start_order.ESTIMATE[kind]
    return seconds


def _shared_fixture_module(item) -> str | None:
    """The module of a test that uses a module- or class-scoped fixture (a booted VM, an
    array built once for several tests): such tests stay on one worker."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        if defs and defs[-1].scope in ("module", "class", "package"):
            return item.nodeid.split("::")[0]
    return None


def pytest_configure(config):
    # Registered here beside the suite's start order rather than in pyproject.toml's list:
    # it says how `make test` and `make test-long` divide the suite, not what a test needs.
    config.addinivalue_line(
        "markers", "long: a whole-system check of a minute or more (the labs as written, the demo, "
                   "the campaigns' documents, cluster and lab-VM failures and rebuilds): run by "
                   "`make test-long`, left out of `make test`")


def pytest_addoption(parser):
    parser.addoption("--record-durations", metavar="FILE", default=None,
                     help="write each test's seconds (setup, call and teardown), where at least 1 s, to FILE "
                          "as JSON: the start order reads tests/durations.json")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    is_root = os.geteuid() == 0
    for item in items:
        if "root" in item.keywords and not is_root:
            item.add_marker(pytest.mark.skip(reason="needs root (loop devices, mounts)"))
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    items[:] = start_order.arrange(items, workers, _seconds(start_order.load_durations()),
                                   _shared_fixture_module)


_recorded: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _recorded[report.nodeid] = _recorded.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session):
    path = session.config.getoption("--record-durations")
    if path and not hasattr(session.config, "workerinput"):
        kept = {k: round(v, 1) for k, v in sorted(_recorded.items()) if v >= start_order.RECORD_BELOW}
        Path(path).write_text(json.dumps(kept, indent=1) + "\n")


@pytest.fixture
def raidlab_cmd() -> list[str]:
    """argv prefix that runs the installed `raidlab` console script of this venv."""
    exe = VENV_BIN / "raidlab"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "raidlab.cli"]


def _sigint_as_at_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def terminal_sigint():
    """preexec_fn for a child a test sends SIGINT: SIGINT's default disposition, as a foreground
    command at a terminal has. A suite started in the background (nohup, `&`) ignores SIGINT,
    as POSIX has background jobs do; children inherit that and would never see the Ctrl-C."""
    return _sigint_as_at_a_terminal


@pytest.fixture(autouse=True)
def _own_raidlab_home(tmp_path_factory, monkeypatch):
    """Every test gets a RAIDLAB_HOME of its own unless it sets one: without it labs would go
    to the user's default home, shared by the suite's parallel workers."""
    if "RAIDLAB_HOME" not in os.environ:
        monkeypatch.setenv("RAIDLAB_HOME", str(tmp_path_factory.mktemp("home") / "raidlab"))
