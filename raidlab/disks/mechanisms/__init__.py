"""Timing models of member disks: pure functions of (drive, drive state, time, request).

One class per drive kind (`DriveSpec.kind`), all with the interface of
`base.Mechanism` (plan_read / plan_write / plan_flush / plan_trim -> Plan):

base.py     Plan and Mechanism, the common interface; why the models are pure
hdd.py      HddMechanism: Ruemmler & Wilkes's disk (seek, rotation, zones, switches,
            read-ahead, write cache) and where we depart from it
ssd.py      SsdMechanism: command latency + transfer at the drive's rate
untimed.py  UntimedMechanism: the `none` drive, no delay at all

`make_mechanism` builds the mechanism of a spec; `expected_random_read_s` gives the
closed form of the same kind, so a kind's timing and its closed form live in one class.
"""

from __future__ import annotations

from raidlab.disks.geometry import DriveSpec
from raidlab.disks.mechanisms.base import SERVICE_PARTS, Mechanism, Plan
from raidlab.disks.mechanisms.hdd import HddMechanism
from raidlab.disks.mechanisms.ssd import SsdMechanism
from raidlab.disks.mechanisms.untimed import UntimedMechanism

MECHANISMS: dict[str, type[Mechanism]] = {
    cls.kind: cls for cls in (HddMechanism, SsdMechanism, UntimedMechanism)
}


def mechanism_class(spec: DriveSpec) -> type[Mechanism]:
    """The mechanism class of a drive's kind (ValueError for a kind no class models)."""
    try:
        return MECHANISMS[spec.kind]
    except KeyError:
        raise ValueError(
            f"{spec.name}: no timing model for kind {spec.kind!r} (use one of {', '.join(MECHANISMS)})"
        ) from None


def make_mechanism(spec: DriveSpec, image_bytes: int, *, span: str = "full",
                   write_cache: bool | None = None) -> Mechanism:
    """The mechanism of `spec` serving an image of `image_bytes` (span: how the image maps
    onto a hard disk's cylinders, see raidlab.disks.geometry.Geometry; write_cache: override
    the drive's default)."""
    return mechanism_class(spec)(spec, image_bytes, span=span, write_cache=write_cache)


def expected_random_read_s(spec: DriveSpec, image_bytes: int, request_bytes: int,
                           span: str = "full") -> dict[str, float]:
    """Closed-form mean of an isolated random read (QD1) on an image, by component (see
    each kind's `expected_random_read_s`); "total" is their sum."""
    return mechanism_class(spec).expected_random_read_s(spec, image_bytes, request_bytes, span)


__all__ = [
    "MECHANISMS", "SERVICE_PARTS", "HddMechanism", "Mechanism", "Plan", "SsdMechanism", "UntimedMechanism",
    "expected_random_read_s", "make_mechanism", "mechanism_class",
]
