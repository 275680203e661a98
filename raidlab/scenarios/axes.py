"""A report's x axis: where a figure takes one run's x from (a workload parameter, an
architecture option, an [[arch]] field), and the x a metric name carries."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from raidlab import units
from raidlab.errors import UsageError

if TYPE_CHECKING:
    from raidlab.scenarios.schema import ArchEntry, ReportSpec


# [[arch]] fields a figure may put on its x axis (chunk in KiB)
ARCH_X_FIELDS = ("partitions", "disk_model", "bus", "disks", "chunk")


def x_value(spec: ReportSpec, arch: ArchEntry, params: dict) -> Any:
    """The x of a line figure for one run: a workload parameter, else an arch option (a size
    option such as ram_buffer = "4M" is given in MiB), else an [[arch]] field such as
    `partitions` (SA-RAID's configurations, drawn as groups of bars)."""
    if spec.x == "chunk":
        return arch.chunk // 1024 if arch.chunk else None
    if spec.x in ARCH_X_FIELDS:
        return getattr(arch, spec.x)
    value = params.get(spec.x, arch.options.get(spec.x))
    if isinstance(value, str):
        try:
            return units.parse_size(value) / 2**20
        except (UsageError, ValueError):
            return value
    return value


def pattern_x(pattern: str, metric: str) -> int | float | None:
    """A metric pattern with "{x}" (the TPS driver reports tps_c1..tps_c4, one per client
    count): the x a concrete metric name carries, or None if it does not match."""
    head, _, tail = pattern.partition("{x}")
    m = re.fullmatch(re.escape(head) + r"(\d+(?:\.\d+)?)" + re.escape(tail), metric)
    if m is None:
        return None
    text = m.group(1)
    return float(text) if "." in text else int(text)
