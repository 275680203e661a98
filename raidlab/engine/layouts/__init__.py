"""Layout registry: architecture name -> layout class.

Every layout is a frozen dataclass built from the geometry (n_disks, disk_size, chunk_bytes,
data_offset, member_data_size, and its own options) whose methods are pure: see
`raidlab.engine.layouts.base` for the questions every layout answers and the plan types
the engine executes. The engine looks layouts up here by the name the user gives
(`--arch raid5`) and rebuilds them from a member superblock with `layout_from_geometry`.
"""

from __future__ import annotations

from typing import Any

from raidlab.engine.layouts.base import (
    DEFAULT_CHUNK,
    DataUnavailableError,
    DiskRange,
    Extent,
    Layout,
    Location,
    ReadPlan,
    Redundancy,
    WritePlan,
)
from raidlab.engine.layouts.chained import ChainedLayout
from raidlab.engine.layouts.raid0 import Raid0Layout
from raidlab.engine.layouts.raid1 import Raid1Layout
from raidlab.engine.layouts.raid5 import Raid5Layout
from raidlab.engine.layouts.raid10 import Raid10Layout
from raidlab.engine.layouts.raidx import RaidxLayout
from raidlab.engine.layouts.sa import SA1Layout, SA2Layout, SA3Layout
from raidlab.engine.layouts.zoneaware import ZoneAwareLayout
from raidlab.errors import UsageError

LAYOUTS: dict[str, type[Layout]] = {
    cls.name: cls
    for cls in (
        Raid0Layout,
        Raid1Layout,
        Raid10Layout,
        Raid5Layout,
        ChainedLayout,
        RaidxLayout,
        SA1Layout,
        SA2Layout,
        SA3Layout,
        ZoneAwareLayout,
    )
}


def layout_names() -> list[str]:
    """Names of every layout, in the order above."""
    return list(LAYOUTS)


def layout_class(name: str) -> type[Layout]:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise UsageError(
            f"unknown layout {name!r}", hint=f"choose one of: {', '.join(LAYOUTS)}", arch=name, known=list(LAYOUTS)
        ) from None


def create_layout(name: str, **params: Any) -> Layout:
    """Build (and validate) layout `name`; params are the dataclass fields."""
    cls = layout_class(name)
    try:
        return cls(**params)
    except TypeError as exc:  # unknown or missing option
        raise UsageError(f"{name}: {exc}") from None


def layout_from_geometry(geometry: dict[str, Any]) -> Layout:
    """Rebuild a layout from `Layout.geometry()` (as stored in member superblocks)."""
    if "arch" not in geometry:
        raise UsageError("geometry has no 'arch' field")
    return layout_class(geometry["arch"]).from_geometry(geometry)


__all__ = [
    "DEFAULT_CHUNK",
    "LAYOUTS",
    "DataUnavailableError",
    "DiskRange",
    "Extent",
    "Layout",
    "Location",
    "ReadPlan",
    "Redundancy",
    "WritePlan",
    "create_layout",
    "layout_class",
    "layout_from_geometry",
    "layout_names",
]
