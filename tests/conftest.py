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


# The tests that took a minute or more in `make test` (pytest --durations), longest first.
LONGEST = (
    "tests/live/test_labs.py::test_lab_06_raidx_cluster",
    "tests/vm/test_demo.py::",
    "tests/live/test_faulttest.py::test_a_redundant_layout_keeps_the_data_and_rebuilds_under_load",
    "tests/live/test_faulttest.py::test_the_document_written_is_the_runs_it_reports",
    "tests/vm/test_run_vm.py::test_the_sa_raid_live_scenario_runs_quick_on_partitions_in_the_vm",
    "tests/live/test_cluster_hosts.py::test_an_array_over_listed_hosts_survives_a_pulled_cable",
    "tests/vm/test_md_crashtest.py::",
    "tests/live/test_labs.py::",
    "tests/vm/test_md_write_hole.py::",
    "tests/vm/test_run_vm.py::test_md_and_vcraid_scenario_runs_in_the_vm_and_reports",
)


def _start_order(item) -> tuple[int, int]:
    """The longest tests first (`LONGEST`), then the other VM tests, then live ones, then
    the rest: the long tests start early, so that parallel workers (`make test` runs
    pytest-xdist) end together instead of one of them finishing a four-minute lab alone
    while the others are idle."""
    for rank, prefix in enumerate(LONGEST):
        if item.nodeid.startswith(prefix):
            return 0, rank
    if "vm" in item.keywords:
        return 1, 0
    return (2 if "live" in item.keywords else 3), 0


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected: the list as it will run
def pytest_collection_modifyitems(config, items):
    is_root = os.geteuid() == 0
    for item in items:
        if "root" in item.keywords and not is_root:
            item.add_marker(pytest.mark.skip(reason="needs root (loop devices, mounts)"))
    items.sort(key=_start_order)  # stable: files and tests keep their order within a group
    # `--dist worksteal` gives each worker one contiguous share of this list at the start:
    # deal the list out like cards, back and forth (0 1 2 3 3 2 1 0 ...), so that each share
    # begins with its part of the longest tests instead of the first worker getting all of
    # them, one after another.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        hands: list[list] = [[] for _ in range(workers)]
        for j, item in enumerate(items):
            turn, seat = divmod(j, workers)
            hands[seat if turn % 2 == 0 else workers - 1 - seat].append(item)
        items[:] = [item for hand in hands for item in hand]


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
