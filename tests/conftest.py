"""Shared test set-up.

Markers (pyproject.toml): root, live, vm, md, slow. A test marked `root` is skipped with a
one-line reason only when the process is not root; on the project's machines (root) it runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def pytest_collection_modifyitems(config, items):
    is_root = os.geteuid() == 0
    for item in items:
        if "root" in item.keywords and not is_root:
            item.add_marker(pytest.mark.skip(reason="needs root (loop devices, mounts)"))


@pytest.fixture
def raidlab_cmd() -> list[str]:
    """argv prefix that runs the installed `raidlab` console script of this venv."""
    exe = VENV_BIN / "raidlab"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "raidlab.cli"]
