"""The compiled modules (raidlab.compiled): `make setup` built them, RAIDLAB_PURE_PYTHON=1
runs their Python source instead, and both give identical numbers, both against each other
and against the drive model's own Geometry, from which the media arithmetic was taken."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raidlab import archs, compiled
from raidlab.disks import catalog
from raidlab.disks.geometry import MS, Geometry
from raidlab.disks.mechanisms import hddcore
from raidlab.disks.mechanisms.hdd import _ROTATION_EPSILON
from raidlab.runners.virtual import SimSpec, replay_requests
from raidlab.traces.synth import synth

REQUESTS = 300
HDDS = [spec.name for spec in catalog.all_models() if spec.kind == "hdd"]


def _reference_module():
    """hddcore loaded from its .py file under another name: the Python reference, in this
    process beside the compiled module."""
    source = Path(hddcore.__file__).with_name("hddcore.py")
    spec = importlib.util.spec_from_file_location("hddcore_reference", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCE = _reference_module()


def test_make_setup_built_every_compiled_module():
    assert compiled.status() == dict.fromkeys(compiled.MODULES, "compiled"), (
        "a compiled module is missing: `make setup` builds them (setup.py)")
    for name in compiled.MODULES:
        built = Path(importlib.import_module(name).__file__)
        for source in (built.parent / (name.rpartition(".")[2] + ext) for ext in (".py", ".pxd")):
            assert source.stat().st_mtime <= built.stat().st_mtime, f"{built.name} is older than {source.name}: make setup"


def test_the_switch_runs_each_module_from_its_source():
    code = "import json; from raidlab import compiled; print(json.dumps(compiled.status()))"
    env = {**os.environ, compiled.ENV: "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == dict.fromkeys(compiled.MODULES, "python")


def _media_from_geometry(g: Geometry, t, offset, length, cylinder, head):
    """HddMechanism's media access written over Geometry's own methods, track by track:
    the oracle for HddCore.media."""
    spec = g.spec
    rev = spec.revolution_s
    parts = {"seek": 0.0, "switches": 0.0, "rotation": 0.0, "transfer": 0.0}
    first = True
    for loc, n in g.tracks(offset, length):
        if loc.cylinder == cylinder and loc.head == head:
            s = 0.0
        elif loc.cylinder != cylinder:
            s = g.seek_s(cylinder, loc.cylinder)
        else:
            s = spec.head_switch_ms * MS
        parts["seek" if first and loc.cylinder != cylinder else "switches"] += s
        first = False
        t += s
        frac = (g.byte_angle(loc) - (t / rev) % 1.0) % 1.0
        if frac > 1.0 - _ROTATION_EPSILON:
            frac = 0.0
        parts["rotation"] += frac * rev
        t += frac * rev
        parts["transfer"] += n / loc.track_bytes * rev
        t += n / loc.track_bytes * rev
        cylinder, head = loc.cylinder, loc.head
    return t, cylinder, head, parts


@st.composite
def _accesses(draw):
    model = draw(st.sampled_from(HDDS))
    spec = catalog.get(model)
    span = draw(st.sampled_from(["full", "start"]))
    image = draw(st.integers(64, 4096)) << 20
    if span == "start":
        image = min(image, spec.media_capacity_bytes // (1 << 20) << 20)
    g = Geometry(spec, image, span)
    length = draw(st.integers(1, 2048)) * 512
    offset = draw(st.integers(0, (image - length) // 512)) * 512
    cylinder = draw(st.integers(0, g.cylinders - 1))
    head = draw(st.integers(0, spec.heads - 1))
    t = draw(st.floats(0, 1e5, allow_nan=False))
    return g, t, offset, length, cylinder, head


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_accesses())
def test_the_media_arithmetic_equals_the_geometry_compiled_and_in_python(access):
    g, t, offset, length, cylinder, head = access
    expected_t, expected_cylinder, expected_head, parts = _media_from_geometry(g, t, offset, length, cylinder, head)
    for module in (hddcore, REFERENCE):
        core = module.HddCore(g)
        end = core.media(t, offset, length, cylinder, head, 0.0, 0.0, 0.0, 0.0)
        assert end == expected_t
        assert (core.cylinder, core.head) == (expected_cylinder, expected_head)
        assert {k: getattr(core, k) for k in parts} == parts
        assert core.cylinder_of(offset) == g.cylinder_of(offset)
        assert core.seek_s(cylinder, core.cylinder) == g.seek_s(cylinder, core.cylinder)


def _replays(archs_: list[str]) -> dict[str, dict]:
    out = {}
    for arch in archs_:
        report = replay_requests(SimSpec(arch, "hp-c2200a"), itertools.islice(synth("cello", 300, 3), REQUESTS))
        report.pop("speed")
        out[arch] = report
    return out


def test_a_replay_gives_identical_reports_compiled_and_in_python():
    names = archs.names("sim")
    code = ("import json, sys; sys.path.insert(0, %r); from test_compiled import _replays; "
            "print(json.dumps(_replays(%r), sort_keys=True))") % (str(Path(__file__).parent), names)
    env = {**os.environ, compiled.ENV: "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    in_python = json.loads(out.stdout)
    here = json.loads(json.dumps(_replays(names), sort_keys=True))
    assert compiled.status() == dict.fromkeys(compiled.MODULES, "compiled")
    assert sorted(here) == sorted(in_python) == sorted(names)
    for arch in names:
        assert here[arch]["trace"]["requests"] == REQUESTS
        assert here[arch] == in_python[arch], arch


@pytest.mark.parametrize("model", HDDS)
def test_the_cylinder_of_an_offset_is_the_geometry_s(model):
    spec = catalog.get(model)
    g = Geometry(spec, 256 << 20)
    core = hddcore.HddCore(g)
    for offset in range(0, 256 << 20, 1 << 20):
        assert core.cylinder_of(offset) == g.cylinder_of(offset)
