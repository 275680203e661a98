"""Shared test set-up.

Markers (pyproject.toml): root, live, vm, md, slow. A test marked `root` is skipped with a
one-line reason only when the process is not root; on the project's machines (root) it runs.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def _start_order(item) -> int:
    """VM tests first, then live ones, then the rest: the long tests start early, so that
    parallel workers (`make test` runs pytest-xdist) end together instead of one of them
    finishing a three-minute VM test alone while the others are idle."""
    if "vm" in item.keywords:
        return 0
    return 1 if "live" in item.keywords else 2


def pytest_collection_modifyitems(config, items):
    is_root = os.geteuid() == 0
    for item in items:
        if "root" in item.keywords and not is_root:
            item.add_marker(pytest.mark.skip(reason="needs root (loop devices, mounts)"))
    items.sort(key=_start_order)  # stable: files and tests keep their order within a group


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
