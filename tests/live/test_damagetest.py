"""`raidlab damagetest`: a VC-RAID whose drives' metadata is damaged, after a clean stop and
after a crash, is refused in one line or comes back with every byte as written; the campaign
leaves nothing behind (raidlab.campaigns.damage)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from lab_leftovers import loops_of

pytestmark = [pytest.mark.root, pytest.mark.live, pytest.mark.long]


def test_damaged_metadata_is_refused_or_recovered_never_read_wrong(raidlab_cmd, tmp_path):
    env = {**os.environ, "RAIDLAB_HOME": str(tmp_path / "home")}
    proc = subprocess.run([*raidlab_cmd, "damagetest", "vcraid-scd", "--trials", "8", "--seed", "3", "--json"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["trials"] == 8 and doc["passed"] == 8 and doc["wrong"] == 0 and doc["errors"] == 0
    kinds = [r["kind"] for r in doc["results"]]
    assert kinds[:6] == ["flip", "zero", "torn", "stale", "foreign", "swap"]
    assert [r["stop"] for r in doc["results"]] == ["clean"] * 6 + ["kill"] * 2
    # a foreign or exchanged member is never taken for the array's own
    assert all(r["outcome"] == "refused" for r in doc["results"] if r["kind"] in ("foreign", "swap"))
    assert doc["refused"] >= 2 and doc["refused"] + doc["recovered"] == 8
    assert not loops_of(tmp_path / "home" / "labs")
    assert not list((tmp_path / "home" / "labs").glob("dmg-*"))
