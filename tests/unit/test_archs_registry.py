"""The architecture registry: every architecture declared once and read by every command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from raidlab import archs
from raidlab.engine.layouts import LAYOUTS
from raidlab.errors import UsageError
from raidlab.service.hosts import host_class


def test_every_layout_and_family_is_declared_once():
    names = archs.names()
    assert len(names) == len(set(names))
    assert set(LAYOUTS) <= set(names)  # a new layout needs no declaration of its own
    assert {"dcd", "vcraid", "md-raid0", "md-raid1", "md-raid5", "md-raid10", "disk"} <= set(names)


def test_every_live_architecture_has_a_host_and_every_builder_a_plan():
    for arch in archs.REGISTRY.values():
        if {"native", "vm"} & set(arch.runners):
            assert host_class(arch.name).family == arch.family, arch.name
        if arch.build is not None:
            assert arch.plan is not None, arch.name


def test_runner_lists_and_refusals():
    assert "disk" in archs.names("sim") and "disk" not in archs.names("native")
    assert "md-raid5" not in archs.names("sim")
    with pytest.raises(UsageError) as info:
        archs.get("disk", "native")
    assert "on the native runner" in str(info.value) and "raid5" in str(info.value)
    with pytest.raises(UsageError) as info:
        archs.get("raid7")
    assert "unknown architecture 'raid7'" in str(info.value) and "vcraid" in str(info.value)


def test_an_unknown_option_names_the_valid_ones_with_their_defaults():
    with pytest.raises(UsageError) as info:
        archs.validate("raid10", 4, 64 << 20, 64 << 10, {"colour": "red"})
    text = str(info.value)
    assert "raid10 has no option 'colour'" in text and "layout (default n2)" in text
    assert "__init__" not in text and "keyword" not in text


def test_a_broken_architecture_module_is_an_error_that_names_it():
    """Importing the registry with a mechanism module missing fails loudly, naming it."""
    code = ("import sys; sys.modules['raidlab.engine.caches.vcraid'] = None\n"
            "import raidlab.archs")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "raidlab.engine.caches.vcraid" in proc.stderr


def test_raidlab_archs_lists_every_architecture_and_shows_one(raidlab_cmd):
    listing = subprocess.run([*raidlab_cmd, "archs", "--json"], capture_output=True, text=True, check=True)
    assert set(json.loads(listing.stdout)) == set(archs.names())
    one = subprocess.run([*raidlab_cmd, "archs", "raid10"], capture_output=True, text=True, check=True)
    assert "layout" in one.stdout and "n2" in one.stdout
    bad = subprocess.run([*raidlab_cmd, "archs", "raid7"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown architecture 'raid7'" in bad.stderr
    helptext = subprocess.run([*raidlab_cmd, "create", "--help"], capture_output=True, text=True, check=True)
    for name in archs.names("native"):
        assert f"\n  {name} " in helptext.stdout, name


def _arch(name="x", family="engine", **fields):
    return archs.Architecture(name=name, family=family, summary="", source="",
                              **{"crash_presets": (), "fault_cells": (), **fields})


def test_the_registry_refuses_an_architecture_left_unsaid():
    """A family nobody declares, a live runner its family names no doctor runner for, a live
    architecture of a family without a host, a live architecture silent on the crash or fault campaign, a campaign name twice: each an error
    naming the architecture, so `crashtest all`, reliability and doctor never skip one quietly."""
    families = {"engine": archs.Family("engine", {"native": "native-engine", "vm": "vm"}, host="m:Host"),
                "no-host": archs.Family("no-host", {"native": "native-engine", "vm": "vm"}),
                "sim-only": archs.Family("sim-only")}
    archs.check_declarations({"x": _arch()}, families)
    cases = [
        (_arch(family="nobody"), "family 'nobody'"),
        (_arch(family="sim-only"), "runs on native"),
        (_arch(family="no-host"), "names no host"),
        (_arch(crash_presets=None), "declares no crash presets"),
        (_arch(fault_cells=None), "declares no fault cells"),
    ]
    for arch, words in cases:
        with pytest.raises(RuntimeError, match=words) as info:
            archs.check_declarations({"x": arch}, families)
        assert "'x'" in str(info.value)
    archs.check_declarations({"x": _arch(family="sim-only", runners=("sim",), crash_presets=None)}, families)
    twice = {"x": _arch(crash_presets=(archs.CrashPreset("p", 2),)),
             "y": _arch("y", crash_presets=(archs.CrashPreset("p", 4),))}
    with pytest.raises(RuntimeError, match="'p' is declared by 'x' and 'y'"):
        archs.check_declarations(twice, families)


def test_a_new_layout_is_crash_and_fault_tested_unless_it_says_otherwise():
    import dataclasses
    from typing import ClassVar

    from raidlab.archs.layouts import _architecture
    from raidlab.engine.layouts import Raid5Layout

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Raid5Again(Raid5Layout):
        name: ClassVar[str] = "raid5-again"

    arch = _architecture(Raid5Again)
    assert arch.crash_presets == (archs.CrashPreset("raid5-again", 4),)
    assert arch.fault_cells == (archs.FaultCell("raid5-again", 4),)
    assert arch.damage_targets == () and arch.write_hole_cases == () and arch.peaks is None


def test_faulttest_knows_from_the_failure_groups_which_layouts_keep_their_data():
    config = dict(disk_size=64 << 20, chunk=64 << 10, options={})
    redundant = {name: archs.get(name).drive_role(archs.Config(name, 4, **config), 1)[1] for name in LAYOUTS}
    assert {name for name, keeps in redundant.items() if not keeps} == {"raid0", "sa1", "sa2", "sa3", "saz"}
    assert archs.get("md-raid5").drive_role is None
    vc = {"config": "mcd"}
    assert archs.get("vcraid").drive_role(archs.Config("vcraid", 4, 64 << 20, None, vc), 0) == (
        "raid5 member holding a cache partition", False)
    assert archs.get("tss").drive_role(archs.Config("tss", 4, 64 << 20, None, {"log": "on"}), 4) == ("log drive", True)
