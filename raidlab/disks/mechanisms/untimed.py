"""The `none` member disk: every request ends the moment it arrives.

Why it exists: engine throughput runs want the architectures' own cost without any drive
time in the way (EmulatedDisk also skips its queue for this kind, see raidlab.disks.disk).
"""

from __future__ import annotations

from raidlab.disks.geometry import DriveSpec
from raidlab.disks.mechanisms.base import Mechanism, Plan


class UntimedMechanism(Mechanism):
    """kind "none": no delay for any command."""

    kind = "none"

    def plan_read(self, now: float, offset: int, length: int) -> Plan:
        return Plan(now, now)

    def plan_write(self, now: float, offset: int, length: int, *, fua: bool = False) -> Plan:
        return Plan(now, now)

    def plan_trim(self, now: float, offset: int, length: int) -> Plan:
        return Plan(now, now)

    @classmethod
    def expected_random_read_s(cls, spec: DriveSpec, image_bytes: int, request_bytes: int,
                               span: str = "full") -> dict[str, float]:
        return {"total": 0.0}
