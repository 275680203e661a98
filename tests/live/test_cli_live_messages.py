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


def test_long_work_shows_lines_when_stderr_is_not_a_terminal(raidlab_cmd, tmp_path):
    """create (sa3's probe) and check print timestamped lines instead of a bar or spinner
    nobody sees redrawn."""
    env = {**os.environ, "RAIDLAB_HOME": str(tmp_path / "home"), "COLUMNS": "200"}

    def rl(*args):
        proc = subprocess.run([*raidlab_cmd, *args], capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr

    created = rl("create", "p", "--arch", "sa3", "--disks", "3", "--disk-size", "48M", "--disk-model",
                 "ibm-ultrastar-9lzx", "--chunk", "64K")
    assert all(f"p: probing bandwidth of member {k}" in created for k in range(3)), created
    env["COLUMNS"] = "80"
    status = subprocess.run([*raidlab_cmd, "status", "p"], capture_output=True, text=True, env=env, timeout=120).stdout
    env["COLUMNS"] = "200"
    assert "probe (write then read): d0 " in status and "virtual device array: entries per member d0 " in status
    assert "…" not in status  # nothing cut at 80 columns
    rl("destroy", "p")
    rl("create", "r", "--arch", "raid5", "--disks", "3", "--disk-size", "48M", "--disk-model", "ibm-ultrastar-9lzx")
    checked = rl("check", "r")
    assert "checking: " in checked and "(100%)" in checked and "no mismatch" in checked, checked
    rl("destroy", "r")


def test_a_warning_when_sparse_images_could_outgrow_the_free_space(raidlab_cmd, tmp_path):
    import shutil

    env = {**os.environ, "RAIDLAB_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    huge = shutil.disk_usage(tmp_path).free // 2**30 + 64      # GiB per member: more than the free space
    proc = subprocess.run([*raidlab_cmd, "create", "big", "--arch", "raid0", "--disks", "2", "--disk-size",
                           f"{huge}G"], capture_output=True, text=True, env=env, timeout=300)
    try:
        assert proc.returncode == 0, proc.stderr
        assert "warning: big's member images may grow to" in proc.stderr and "free" in proc.stderr
    finally:
        subprocess.run([*raidlab_cmd, "destroy", "big"], capture_output=True, env=env, timeout=300)

