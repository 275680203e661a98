"""A damaged member superblock, array spec or lab state file is refused in one line (exit 2)
with what is damaged and what to do, and nothing is written; once the file is restored the
array assembles and its data is there.

The array is stopped the hard way (SIGKILL of its daemon, then `raidlab lab cleanup`), as a
crash or a reboot leaves it, so `assemble` reads the member images.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import time
from pathlib import Path

import pytest

import test_dcd_vcraid_live
from lab_leftovers import leftovers

pytestmark = [pytest.mark.root, pytest.mark.live]

SLOT = 4096  # raidlab.engine.metadata.SLOT_SIZE: two superblock slots at the start of a member


class Raidlab(test_dcd_vcraid_live.Raidlab):
    def refused(self, *args: str) -> str:
        """Exit 2 and one error line, the last (status lines of a daemon that started and
        stopped may come before it), and no traceback."""
        proc = self(*args, check=False)
        assert proc.returncode == 2, (args, proc.returncode, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert "Traceback" not in proc.stderr, proc.stderr
        assert [line for line in lines if line.startswith("raidlab: error:")] == lines[-1:], proc.stderr
        return lines[-1]


@pytest.fixture
def rl(raidlab_cmd, tmp_path):
    r = Raidlab(raidlab_cmd, tmp_path / "home")
    yield r
    r("destroy", "x", check=False)


def crash(rl: Raidlab) -> None:
    pid = json.loads(rl("status", "x", "--json").stdout)["pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    rl("lab", "cleanup", "x")


def write_pattern(device: str) -> str:
    data = random.Random(7).randbytes(4 << 20)  # every chunk different: a misplaced one shows
    with open(device, "r+b") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return hashlib.sha256(data).hexdigest()


def read_pattern(device: str) -> str:
    with open(device, "rb") as f:
        return hashlib.sha256(f.read(4 << 20)).hexdigest()


def test_damage_is_refused_in_one_line_and_repair_brings_the_array_back(rl):
    device = rl("create", "x", "--arch", "raid5", "--disks", "3", "--disk-size", "32M").stdout.strip()
    digest = write_pattern(device)
    crash(rl)
    lab = rl.home / "labs" / "x"

    # A member's superblock slots damaged (a few bytes inside each frame: the checksum fails).
    image = lab / "images" / "d1.img"
    original = image.read_bytes()[: 2 * SLOT]
    with open(image, "r+b") as f:
        for slot in (0, SLOT):
            f.seek(slot + 40)
            f.write(b"\xff" * 16)
    damaged = image.read_bytes()
    message = rl.refused("assemble", "x")
    assert "d1.img carries no valid raidlab superblock" in message and "damaged" in message
    assert image.read_bytes() == damaged  # nothing was written while refusing
    with open(image, "r+b") as f:
        f.write(original)

    # The array's spec damaged three ways.
    spec = (lab / "array.json").read_text()
    for text, expected in [('{"name": "x", "arch": ', "array.json is damaged"),
                           ('{"name": "x", "arch": "raid5"}', "field 'disks' is missing"),
                           (spec.replace('"disks": 3', '"disks": "three"'), "field 'disks' is 'three'"),
                           ("[1, 2]", "not a JSON object")]:
        (lab / "array.json").write_text(text)
        assert expected in rl.refused("assemble", "x"), text
    (lab / "array.json").write_text(spec)

    # The lab's state file damaged: cleanup and assemble refuse rather than guess.
    state = (lab / "state.json").read_text()
    for text in ("{garbage", '{"resources": 5}', '{"resources": [{"id": "a"}]}'):
        (lab / "state.json").write_text(text)
        assert "lab state" in rl.refused("lab", "cleanup", "x"), text
    (lab / "state.json").write_text(state)

    ready = json.loads(rl("assemble", "x", "--json").stdout)
    assert read_pattern(ready["device"]) == digest
    rl("destroy", "x")
    assert leftovers(lab, "x") == {} and not lab.exists()
