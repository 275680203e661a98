"""`raidlab crashtest` on md in the lab VM: the untar, the fsyncs and the checks run in the
guest (busybox sh: `sync FILE` is fsync), the daemon (and with it the drives' power) is cut on
the host, md assembles in a fresh VM, e2fsck and the fsync'ed files' checksums are read there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from lab_leftovers import leftovers

pytestmark = [pytest.mark.root, pytest.mark.vm, pytest.mark.md]


@pytest.mark.long
@pytest.mark.parametrize("target, mode", [("md-raid5", "power-random"),
                                          pytest.param("md-raid5-journal", "power", marks=pytest.mark.slow)])
def test_md_keeps_every_fsynced_file_across_power_cuts(raidlab_cmd, tmp_path, target, mode):
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
    home = tmp_path / "home"
    proc = subprocess.run([*raidlab_cmd, "crashtest", target, "--points", "2", "--mode", mode, "--json"],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "RAIDLAB_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["points"] == summary["passed"] == 2, summary
    assert summary["fsynced_files_checked"] > 0 and summary["fsynced_files_lost"] == 0, summary
    for point in summary["results"]:
        assert point["fsck_clean"] and point["intact"] == point["fsynced"] > 0, point
        assert set(point["power_cut"]) >= {"d0.img", "d1.img", "d2.img", "d3.img"}, point   # every drive cut
    assert leftovers(home / "labs" / f"crashtest-{target}", f"crashtest-{target}") == {}


def test_md_in_the_papers_world_is_forced_where_mdadm_refuses_an_unclean_start(raidlab_cmd, tmp_path):
    """Drives that never get a flush (flushes=dropped): a power cut may take md's superblock
    writes, so the members disagree and mdadm refuses to start the array unclean (13 of seed
    1's 20 points did, its point 0 among them, in a campaign before the forced path existed).
    Held to the drives' report, the point then assembles with --force, counted as forced, and
    passes; losses are the promise's to allow."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
    home = tmp_path / "home"
    target = "md-raid5-paper-world"
    proc = subprocess.run([*raidlab_cmd, "crashtest", target, "--points", "1", "--seed", "1", "--mode",
                           "power-random", "--json"], capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "RAIDLAB_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["promise"] == "report"
    assert summary["points"] == summary["passed"] == 1 and summary["errors"] == 0, summary
    assert summary["forced"] == sum(p["forced"] is not None for p in summary["results"])
    for point in summary["results"]:
        assert point["forced"] is None or "refused" in point["forced"], point
        assert point["fsck_clean"] is not None, point
    assert leftovers(home / "labs" / f"crashtest-{target}", f"crashtest-{target}") == {}
