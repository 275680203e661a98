"""`raidlab destroy` of an array whose file system is still mounted says it unmounted it."""

from __future__ import annotations

import os
import subprocess

import pytest

from raidlab.tools.mkfs import mkfs_ext4
from raidlab.tools.mount import mount

pytestmark = [pytest.mark.root, pytest.mark.live]


def test_destroy_says_it_unmounted_the_array_file_system(raidlab_cmd, tmp_path):
    env = {**os.environ, "RAIDLAB_HOME": str(tmp_path / "home"), "COLUMNS": "200"}

    def rl(*args):
        proc = subprocess.run([*raidlab_cmd, *args], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc

    device = rl("create", "m", "--arch", "raid0", "--disks", "2", "--disk-size", "32M").stdout.strip()
    mkfs_ext4(device)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mount(device, mnt)
    out = rl("destroy", "m").stderr
    assert f"unmounted {mnt}" in out and device in out
    assert str(mnt) not in open("/proc/self/mounts").read()
