"""Per-member disk models on a live engine array: `raidlab create --disk-model a,b,c` builds
each member with its own timing model, `status --json` and `list --json` report them, and a
rebuilt member keeps its model.

Uses its own RAIDLAB_HOME (tmp_path), so the leftover checks see only its lab.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from lab_leftovers import leftovers

pytestmark = [pytest.mark.root, pytest.mark.live]

MODELS = ["ibm-dnes-318350", "seagate-st52160n", "hp-c2200a"]


class Raidlab:
    def __init__(self, cmd: list[str], home: Path):
        self.cmd, self.home = cmd, home
        self.env = {**os.environ, "RAIDLAB_HOME": str(home), "COLUMNS": "400"}

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([*self.cmd, *args], capture_output=True, text=True, env=self.env, timeout=600)
        if check and proc.returncode != 0:
            raise AssertionError(f"raidlab {' '.join(args)} -> {proc.returncode}\n{proc.stderr}")
        return proc


@pytest.fixture
def rl(raidlab_cmd, tmp_path):
    r = Raidlab(raidlab_cmd, tmp_path / "home")
    yield r
    for entry in (tmp_path / "home" / "labs").glob("*"):
        r("destroy", entry.name, check=False)


def test_raid5_over_three_different_models(rl):
    device = rl("create", "mm", "--arch", "raid5", "--disks", "3", "--disk-model", ",".join(MODELS),
                "--disk-size", "16M", "--chunk", "64K").stdout.strip()
    assert device.startswith("/dev/loop")
    status = json.loads(rl("status", "mm", "--json").stdout)
    assert status["member_models"] == MODELS
    assert [m["model"] for m in status["statistics"]["members"]] == MODELS
    assert status["spec"]["disk_model"] == ",".join(MODELS)
    listed = json.loads(rl("list", "--json").stdout)
    assert [a["disk_model"] for a in listed if a["name"] == "mm"] == [",".join(MODELS)]
    text = rl("status", "mm").stdout
    assert ", ".join(MODELS) in text and all(m in text for m in MODELS)

    # A replaced member is built with its own model again, not the first member's.
    rl("fail", "mm", "--disk", "1")
    rl("replace", "mm", "--disk", "1")
    status = json.loads(rl("status", "mm", "--json").stdout)
    assert [m["model"] for m in status["statistics"]["members"]] == MODELS
    assert status["statistics"]["state"] == "optimal"

    lab_dir = rl.home / "labs" / "mm"
    rl("destroy", "mm")
    assert leftovers(lab_dir, "mm") == {}
    assert not lab_dir.exists()
