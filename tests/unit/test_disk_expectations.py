"""Does each catalog drive reproduce its published figures? (ublk-disksim's third question)

Each raidlab/disks/data/expectations/<model>.toml lists published figures with tolerance
and source (format: that directory's README.md). Every figure is measured here on the
virtual clock through EmulatedDisk, the object the engine uses, not through closed forms.
Every catalog drive must have an expectation file, every parameter in the catalog must say
where it comes from, and every figure must name its source.
"""

from __future__ import annotations

import random
import tomllib
from importlib import resources

import pytest

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend, catalog
from raidlab.disks.bench import default_size, random_qd1, sequential_rate, zone_ranges
from raidlab.disks.seek import manufacturer_average_seek_ms
from raidlab.sched import run_virtual

RANDOM_SAMPLES = 1500


def _expectations() -> dict[str, dict]:
    root = resources.files("raidlab.disks").joinpath("data/expectations")
    out = {}
    for entry in root.iterdir():
        if entry.name.endswith(".toml"):
            data = tomllib.loads(entry.read_text())
            out[data["model"]] = data
    return out


EXPECTATIONS = _expectations()
FIGURES = [
    pytest.param(model, fig, id=f"{model}: {fig['name']}")
    for model, data in sorted(EXPECTATIONS.items())
    for fig in data["figure"]
]


def _virtual(fn, spec, size=None):
    """Run fn(disk) against a full-size sparse in-memory disk on the virtual clock."""
    size = size or default_size(spec)

    async def main():
        disk = EmulatedDisk("x", spec, MemoryBackend(size))
        async with sched.open_nursery() as nursery:
            disk.start(nursery)
            result = await fn(disk)
            nursery.cancel_scope.cancel()
        return result

    return run_virtual(main)


def _zone_span(disk, zone):
    outer, inner = zone_ranges(disk)
    return outer if zone == "outer" else inner


def _sequential(spec, params, op):
    request = params.get("request", 65536)

    async def run(disk):
        lo, hi = _zone_span(disk, params["zone"])
        n = min(32 << 20, hi - lo) // request * request
        start = lo if params["zone"] == "outer" else (hi - n) // 4096 * 4096
        return await sequential_rate(disk, op, start, n, request) / 1e6

    return _virtual(run, spec)


def _random_mean_ms(spec, params, op):
    async def run(disk):
        times = await random_qd1(disk, op, params["bytes"], RANDOM_SAMPLES, random.Random(7))
        return sum(times) / len(times) * 1e3

    return _virtual(run, spec)


def _partition_ratio(spec, params):
    parts, request = params["parts"], params.get("request", 65536)

    async def run(disk):
        part_size = disk.size // parts // 4096 * 4096
        rates = {}
        for index in (params["first"], params["second"]):
            part = disk.partition((index - 1) * part_size, part_size, name=f"b{index}")
            n = min(32 << 20, part_size) // request * request
            rates[index] = await sequential_rate(part, "read", 0, n, request)
        return rates[params["first"]] / rates[params["second"]]

    return _virtual(run, spec)


def _zone_media(spec, params):
    zone = spec.zones[0] if params["zone"] == "outer" else spec.zones[-1]
    return spec.zone_rate_mb_s(zone)


MEASURES = {
    "random_read_mean_ms": lambda spec, p: _random_mean_ms(spec, p, "read"),
    "qd1_read_iops": lambda spec, p: 1e3 / _random_mean_ms(spec, p, "read"),
    "qd1_write_iops": lambda spec, p: 1e3 / _random_mean_ms(spec, p, "write"),
    "average_seek_ms": lambda spec, p: manufacturer_average_seek_ms(spec.seek, spec.cylinders),
    "average_latency_ms": lambda spec, p: spec.revolution_s / 2 * 1e3,
    "sequential_read_mb_s": lambda spec, p: _sequential(spec, p, "read"),
    "sequential_write_mb_s": lambda spec, p: _sequential(spec, p, "write"),
    "capacity_bytes": lambda spec, p: spec.media_capacity_bytes if spec.kind == "hdd" else None,
    "partition_sequential_ratio": _partition_ratio,
    "zone_media_mb_s": _zone_media,
}


def test_every_catalog_drive_has_an_expectation_file():
    assert sorted(EXPECTATIONS) == sorted(catalog.names())


def test_every_catalog_parameter_has_a_source():
    for spec in catalog.all_models():
        raw = catalog.raw_entry(spec.name).get("params", {})
        assert set(spec.sources) == set(raw), spec.name
        for key, text in spec.sources.items():
            assert text.strip() and text.strip() != "assumed:", f"{spec.name}.{key} has an empty source"


@pytest.mark.parametrize("model,figure", FIGURES)
def test_model_reproduces_published_figure(model, figure):
    assert figure.get("source"), "a figure without a source"
    assert figure["measure"] in MEASURES, f"unknown measure {figure['measure']}"
    spec = catalog.get(model)
    measured = MEASURES[figure["measure"]](spec, figure.get("params", {}))
    published = figure["published"]
    if "tolerance_abs" in figure:
        assert abs(measured - published) <= figure["tolerance_abs"], (measured, published)
    else:
        error = abs(measured - published) / published
        assert error <= figure["tolerance"], (
            f"{model} {figure['name']}: model {measured:.4g} vs published {published:.4g} "
            f"({error:.1%} > {figure['tolerance']:.0%}; source: {figure['source']})"
        )
