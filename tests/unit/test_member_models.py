"""Per-member disk models (VC-RAID Table 1: four different SCSI drives in one array): the
disk_model string "m0,m1,..." read by raidlab.disks.catalog.member_models, the scenario key
as a string or a TOML list, and every place that builds member disks from it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from raidlab import scenarios
from raidlab.disks import catalog
from raidlab.errors import UnknownModelError, UsageError
from raidlab.scenarios import ScenarioError

REPO = Path(__file__).resolve().parents[2]
TABLE1 = ["ibm-dnes-318350", "ibm-dnes-309170", "seagate-st52160n", "seagate-st32151n"]


# ------------------------------------------------------------------ catalog.member_models


def test_single_name_means_every_member():
    assert catalog.member_models("ibm-dnes-309170", 4) == ["ibm-dnes-309170"] * 4
    assert catalog.member_models("none", 1) == ["none"]


def test_list_one_per_member_in_order():
    assert catalog.member_models(",".join(TABLE1), 4) == TABLE1
    assert catalog.member_models(" ssd , none ,hp-c2200a", 3) == ["ssd", "none", "hp-c2200a"]


def test_list_of_the_wrong_length():
    with pytest.raises(UsageError) as info:
        catalog.member_models(",".join(TABLE1), 3)
    assert not isinstance(info.value, UnknownModelError)
    assert "4 models for 3 disks" in str(info.value) and "\n" not in str(info.value)


def test_unknown_name_in_a_list():
    with pytest.raises(UnknownModelError) as info:
        catalog.member_models("ssd,floppy,none", 3)
    assert info.value.fields["model"] == "floppy"
    with pytest.raises(UnknownModelError):
        catalog.member_models("floppy", 2)
    with pytest.raises(UnknownModelError):  # an empty element is no model either
        catalog.member_models("ssd,,none", 3)


# --------------------------------------------------------- users of catalog.member_models


def test_serve_request_builds_one_model_per_member():
    from raidlab.export.serve import ServeRequest

    req = ServeRequest(disks=3, model="ssd,none,hp-c2200a", size=1 << 20)
    req.check()
    assert req.member_specs() == [("ssd", 1 << 20), ("none", 1 << 20), ("hp-c2200a", 1 << 20)]
    assert ServeRequest(disks=2, model="ssd", size=4096).member_specs() == [("ssd", 4096)] * 2
    with pytest.raises(UnknownModelError):
        ServeRequest(disks=2, model="ssd,floppy", size=4096).check()
    with pytest.raises(UsageError):
        ServeRequest(disks=2, model="ssd,none,ssd", size=4096).check()


def test_cache_host_members_take_their_own_models():
    from raidlab import archs

    def plan_members(arch, disks, disk_size, disk_model, options):
        config = archs.Config(arch, disks, disk_size, 64 << 10, options, disk_model)
        return [(drive.model, drive.size) for drive in archs.get(arch).plan(config, archs.LIVE)]

    gib = 1 << 30
    models = ",".join(TABLE1)
    scd = plan_members("vcraid", 4, gib, models, {"config": "scd", "cache_model": "maxtor-91020d6"})
    assert [m for m, _ in scd] == [*TABLE1, "maxtor-91020d6"]
    assert [s for _, s in scd][:4] == [gib] * 4
    mcd = plan_members("vcraid", 4, gib, models, {"config": "mcd"})  # partitions on d0, d1
    assert [m for m, _ in mcd] == TABLE1
    assert mcd[0][1] > gib and mcd[1][1] > gib and mcd[2][1] == mcd[3][1] == gib
    # no cache_model: the cache disk is the first member's model
    assert plan_members("vcraid", 4, gib, models, {"config": "scd"})[-1][0] == TABLE1[0]
    with pytest.raises(UsageError):
        plan_members("vcraid", 3, gib, models, {"config": "scd"})


def test_crashtest_config_checks_each_member():
    from raidlab.campaigns.crash import config_for

    c = config_for("raid5", disks=3, options={}, disk_model="ssd,none,ssd", disk_size=64 << 20,
                   chunk=64 << 10, files=120)
    assert c.disk_model == "ssd,none,ssd"
    with pytest.raises(UsageError):
        config_for("raid5", disks=3, options={}, disk_model="ssd,none", disk_size=64 << 20, chunk=64 << 10,
                   files=120)


def test_cli_create_refuses_a_list_of_the_wrong_length(tmp_path, raidlab_cmd):
    home = tmp_path / "home"
    proc = subprocess.run(raidlab_cmd + ["create", "x", "--arch", "raid5", "--disks", "3", "--disk-model",
                                         "ssd,none", "--home", str(home)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--disk-model" in lines[0] and "2 models for 3 disks" in lines[0]
    assert not (home / "labs" / "x").exists()
    proc = subprocess.run(raidlab_cmd + ["create", "x", "--arch", "raid5", "--disks", "3", "--disk-model",
                                         "ssd,none,floppy", "--home", str(home)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "floppy" in proc.stderr


# ---------------------------------------------------------------------------- scenarios

from test_scenarios import GOOD, _load_error  # noqa: E402 - the scenario unit tests' fixture

# GOOD's r5 is 4 members of one model: here its disk_model is what each test writes.
SCENARIO = GOOD.replace('disk_model = "ibm-dnes-309170"', "disk_model = MODELS", 1)


def _scenario(tmp_path: Path, models: str) -> Path:
    path = tmp_path / "members.toml"
    path.write_text(SCENARIO.replace("MODELS", models))
    return path


def _error(path: Path) -> ScenarioError:
    return _load_error(path.parent, path.read_text())


def test_scenario_list_is_normalised_to_the_comma_string(tmp_path):
    scn = scenarios.load(_scenario(tmp_path, json.dumps(TABLE1)))
    assert scn.arch("r5").disk_model == ",".join(TABLE1)
    assert scn.arch("r0").disk_model == "ssd"
    scn = scenarios.load(_scenario(tmp_path, json.dumps(", ".join(TABLE1))))  # the string spelling
    assert scn.arch("r5").disk_model == ",".join(TABLE1)


def test_scenario_list_of_the_wrong_length_names_file_and_key(tmp_path):
    err = _error(_scenario(tmp_path, json.dumps(TABLE1[:3])))
    assert err.key == "arch[0].disk_model"
    assert "3 models for disks = 4" in str(err)
    err = _error(_scenario(tmp_path, json.dumps(",".join(TABLE1[:2]))))
    assert err.key == "arch[0].disk_model"


def test_scenario_list_elements_are_checked(tmp_path):
    err = _error(_scenario(tmp_path, json.dumps([*TABLE1[:3], "floppy"])))
    assert err.key == "arch[0].disk_model[3]" and "floppy" in str(err)
    err = _error(_scenario(tmp_path, "[1, 2, 3, 4]"))
    assert err.key == "arch[0].disk_model"


def test_manifest_records_every_member_model(tmp_path):
    from raidlab.run import _disk_models

    scn = scenarios.load(_scenario(tmp_path, json.dumps(TABLE1)))
    assert set(_disk_models(scn)) == {*TABLE1, "ssd"}


def test_vcraid_scenarios_use_the_table1_drives():
    """Every 4-disk array of the VC-RAID scenarios is Table 1's four SCSI drives, in order."""
    for path in sorted((REPO / "scenarios").glob("vcraid-*.toml")):
        scn = scenarios.load(path)
        four = [a for a in scn.archs if a.disks == 4]
        assert four, path
        for arch in four:
            assert arch.disk_model == ",".join(TABLE1), (path.name, arch.label)
        assert "simplification" not in scn.description


def test_replay_refuses_a_model_list(tmp_path):
    text = """
[scenario]
id = "unit-sim-members"
title = "replay"
kind = "sim"

[[arch]]
label = "r5"
arch = "raid5"
disks = 3
disk_model = ["hp-c2200a", "hp-c2200a", "ssd"]
disk_size = "64M"

[workload]
name = "trace"

[[case]]
name = "hplajw"
params = { profile = "hplajw", duration = "1h" }
"""
    path = tmp_path / "sim.toml"
    path.write_text(text)
    err = _error(path)
    assert err.key == "arch[0].disk_model" and "one disk model" in str(err)
