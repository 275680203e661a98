"""The drive catalog: data/catalog.toml -> DriveSpec, every number with its provenance.

Why a data file: the papers' drives are facts to be checked, not code. Each parameter in
catalog.toml is a table with a `value` and either a `source` (paper table, specification
sheet, measurement) or an `assumed` text saying what was assumed and why (where a paper
lacks a parameter, the catalog says what it assumed and why). The loader refuses a parameter
that has neither, so an unexplained number cannot enter the catalog.

Two kinds of derived parameters keep the file close to what the sources print:
* `seek = { fit = { track_to_track_ms, average_ms, full_stroke_ms }, ... }`: a
  Ruemmler-Wilkes curve through the three figures a spec sheet gives
  (raidlab.disks.seek.fit_seek_curve);
* `zones = { derive = { count, outer_mb_s, inner_mb_s }, ... }`: equal-width zones whose
  sectors per track fall linearly from the outer to the inner media rate (sectors per
  track are proportional to the radius, and equal-width zones are equally spaced in
  radius), with as many cylinders as the capacity needs.
Published figures that the model must reproduce live apart, in data/expectations/<name>.toml
(tests/unit/test_disk_expectations.py).
"""

from __future__ import annotations

import functools
import math
import tomllib
from importlib import resources
from typing import Any

from raidlab.disks.geometry import DriveSpec, Zone
from raidlab.disks.seek import SeekCurve, fit_seek_curve
from raidlab.errors import UnknownModelError, UsageError

_SCALAR_FIELDS = {
    "capacity_bytes": int,
    "rpm": float,
    "sector_bytes": int,
    "heads": int,
    "head_switch_ms": float,
    "cylinder_switch_ms": float,
    "track_skew": bool,
    "controller_read_ms": float,
    "controller_write_ms": float,
    "bus_mb_s": float,
    "readahead_bytes": int,
    "write_cache_bytes": int,
    "write_cache_default": bool,
    "read_latency_ms": float,
    "write_latency_ms": float,
    "read_mb_s": float,
    "write_mb_s": float,
}


class CatalogError(ValueError):
    """catalog.toml is malformed (a bug in the data file, not a user mistake)."""


def _provenance(name: str, key: str, entry: Any) -> str:
    if not isinstance(entry, dict) or "value" not in entry and "fit" not in entry and "derive" not in entry:
        raise CatalogError(f"{name}.{key}: expected a table with value and source/assumed")
    if "source" in entry:
        return str(entry["source"])
    if "assumed" in entry:
        return "assumed: " + str(entry["assumed"])
    raise CatalogError(f"{name}.{key}: a number without `source` or `assumed`")


def media_spt_for_sustained(sustained_mb_s: float, rpm: float, sector_bytes: int, heads: int,
                            head_switch_ms: float, cylinder_switch_ms: float) -> float:
    """Sectors per track whose *sustained* rate (a cylinder = `heads` revolutions plus
    heads-1 head switches and one cylinder switch, the formula IBM/Hitachi specifications
    print) equals `sustained_mb_s`. Spec sheets often quote sustained, not media, rates."""
    rev_ms = 60e3 / rpm
    per_cylinder_ms = heads * rev_ms + (heads - 1) * head_switch_ms + cylinder_switch_ms
    bytes_per_track = sustained_mb_s * 1e3 * per_cylinder_ms / heads  # MB/s * ms = kB
    return bytes_per_track / sector_bytes


def derive_zones(rpm: float, sector_bytes: int, heads: int, capacity_bytes: int,
                 count: int, outer_mb_s: float, inner_mb_s: float) -> tuple[Zone, ...]:
    """Equal-width zones, sectors per track linear from outer to inner media rate."""
    rev = 60.0 / rpm
    spt_outer = outer_mb_s * 1e6 * rev / sector_bytes
    spt_inner = inner_mb_s * 1e6 * rev / sector_bytes
    return _zones_from_spt(spt_outer, spt_inner, count, sector_bytes, heads, capacity_bytes)


def _zones_from_spt(spt_outer: float, spt_inner: float, count: int, sector_bytes: int,
                    heads: int, capacity_bytes: int) -> tuple[Zone, ...]:
    spts = [
        round(spt_outer + (spt_inner - spt_outer) * (i / (count - 1) if count > 1 else 0.0))
        for i in range(count)
    ]
    mean_track = sum(spts) / count * sector_bytes
    cylinders = math.ceil(capacity_bytes / (heads * mean_track))
    per_zone = math.ceil(cylinders / count)
    return tuple(Zone(per_zone, s) for s in spts)


def _build(name: str, entry: dict) -> DriveSpec:
    kind = entry.get("kind")
    if kind not in ("hdd", "ssd", "none"):
        raise CatalogError(f"{name}: kind must be hdd, ssd or none")
    params = entry.get("params", {})
    sources: dict[str, str] = {}
    fields: dict[str, Any] = {}
    for key, spec in params.items():
        sources[key] = _provenance(name, key, spec)
        if key in _SCALAR_FIELDS:
            fields[key] = _SCALAR_FIELDS[key](spec["value"])
        elif key == "partitions":
            table = spec["value"]
            fields["partition_bytes"] = int(table["size_bytes"])
            fields["partition_zones"] = tuple(int(z) for z in table["zones"])
        elif key not in ("zones", "seek"):
            raise CatalogError(f"{name}: unknown parameter {key}")
    if kind == "hdd":
        for need in ("rpm", "heads", "zones", "seek", "capacity_bytes"):
            if need not in params:
                raise CatalogError(f"{name}: hdd needs {need}")
        z = params["zones"]
        if "derive" in z:
            d = z["derive"]
            sector = fields.get("sector_bytes", 512)
            if "outer_sustained_mb_s" in d:
                cyl_switch = fields.get("cylinder_switch_ms", fields.get("head_switch_ms", 0.0))
                spts = [
                    media_spt_for_sustained(float(d[k]), fields["rpm"], sector, fields["heads"],
                                            fields.get("head_switch_ms", 0.0), cyl_switch)
                    for k in ("outer_sustained_mb_s", "inner_sustained_mb_s")
                ]
                fields["zones"] = _zones_from_spt(spts[0], spts[1], int(d["count"]), sector,
                                                  fields["heads"], fields["capacity_bytes"])
            else:
                fields["zones"] = derive_zones(
                    fields["rpm"], sector, fields["heads"], fields["capacity_bytes"],
                    int(d["count"]), float(d["outer_mb_s"]), float(d["inner_mb_s"]),
                )
        else:
            fields["zones"] = tuple(Zone(int(c), int(s)) for c, s in z["value"])
        s = params["seek"]
        cylinders = sum(zz.cylinders for zz in fields["zones"])
        if "fit" in s:
            f = s["fit"]
            fields["seek"] = fit_seek_curve(
                cylinders, float(f["track_to_track_ms"]), float(f["average_ms"]),
                float(f["full_stroke_ms"]), float(f.get("boundary_fraction", 0.3)),
            )
        else:
            v = s["value"]
            fields["seek"] = SeekCurve(float(v["short_a"]), float(v["short_b"]), float(v["boundary"]),
                                       float(v["long_a"]), float(v["long_b"]))
    elif kind == "ssd":
        for need in ("read_latency_ms", "write_latency_ms", "read_mb_s", "write_mb_s"):
            if need not in params:
                raise CatalogError(f"{name}: ssd needs {need}")
    return DriveSpec(
        name=name,
        kind=kind,
        description=str(entry.get("description", "")),
        sources=sources,
        **fields,
    )


@functools.cache
def _entries() -> dict[str, dict]:
    text = resources.files("raidlab.disks").joinpath("data/catalog.toml").read_text()
    return tomllib.loads(text).get("drives", {})


@functools.cache
def _built(name: str) -> DriveSpec:
    """One drive's DriveSpec, built when first asked for: fitting a seek curve sums over
    every cylinder pair's distance (tens of milliseconds a drive), so a run pays it only
    for the drives it uses."""
    return _build(name, _entries()[name])


def raw_entry(name: str) -> dict:
    """The catalog's text for one drive (papers, notes, sources) as parsed TOML."""
    text = resources.files("raidlab.disks").joinpath("data/catalog.toml").read_text()
    return tomllib.loads(text)["drives"][name]


def names() -> list[str]:
    return list(_entries())


def all_models() -> list[DriveSpec]:
    return [_built(name) for name in _entries()]


def get(name: str) -> DriveSpec:
    """The DriveSpec called `name`, or UnknownModelError listing the known names."""
    if name not in _entries():
        known = ", ".join(_entries())
        raise UnknownModelError(
            f"unknown disk model {name!r}",
            hint=f"known models: {known} (see: raidlab disk models)",
            model=name,
            known=list(_entries()),
        )
    return _built(name)


def member_models(spec: str, n: int) -> list[str]:
    """The model of each of an array's `n` members, from its disk_model string: one name
    (every member is that model) or a comma-separated list "m0,m1,..." of exactly `n` names,
    member k being model k (VC-RAID Table 1: four different SCSI drives in one array).

    UsageError (one line) for a list of the wrong length, UnknownModelError for a name that
    is not in the catalog (each element is checked)."""
    names_ = [part.strip() for part in str(spec).split(",")]
    if len(names_) == 1:
        names_ = names_ * n
    elif len(names_) != n:
        raise UsageError(f"disk model list {spec!r} names {len(names_)} models for {n} disks",
                         hint="give one model per member, in member order, or one name for every member")
    for name in names_:
        get(name)
    return names_
