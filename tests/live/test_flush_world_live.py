"""One durability world per comparison, live: an engine raid5 with `--flushes dropped` (the
papers' host, which sent no flush and no FUA) serves ext4's fsyncs without a single flush or
FUA write reaching a drive; with `--flushes honoured` every drive gets them. md's drives in
the lab VM are the same emulated drives (tests/vm/test_md_host.py checks md in both)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

pytestmark = [pytest.mark.root, pytest.mark.live]


@pytest.mark.parametrize("world", ["dropped", "honoured"])
def test_fsyncs_reach_no_drive_in_the_papers_world_and_every_drive_in_todays(raidlab_cmd, tmp_path, world):
    env = {**os.environ, "RAIDLAB_HOME": str(tmp_path / "home"), "COLUMNS": "300"}

    def rl(*args):
        proc = subprocess.run([*raidlab_cmd, *args], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, (args, proc.stderr)
        return proc

    ready = json.loads(rl("create", "w", "--arch", "raid5", "--disks", "3", "--disk-size", "64M", "--disk-model",
                          "none", "--flushes", world, "--json").stdout)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", ready["device"]], check=True, capture_output=True)
        subprocess.run(["mount", ready["device"], str(mnt)], check=True)
        try:
            for i in range(8):
                fd = os.open(mnt / f"f{i}", os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    os.write(fd, os.urandom(64 << 10))
                    os.fsync(fd)
                finally:
                    os.close(fd)
        finally:
            subprocess.run(["umount", str(mnt)], check=True)
        doc = json.loads(rl("status", "w", "--json").stdout)
        members = doc["statistics"]["members"]
        assert len(members) == 3 and all(m["flushes_setting"] == world for m in members)
        if world == "dropped":
            assert all(m["flushes"] == 0 and m["fua_writes"] == 0 for m in members), members
            assert all(m["flushes_dropped"] >= 8 for m in members), members
            assert "flushes and FUA never sent" in rl("status", "w").stdout
        else:
            assert all(m["flushes"] >= 8 and m["flushes_dropped"] == 0 and m["fua_dropped"] == 0
                       for m in members), members
    finally:
        rl("destroy", "w")
