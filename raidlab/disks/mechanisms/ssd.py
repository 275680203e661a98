"""The SSD member disk: a fixed latency per command plus the transfer at the drive's rate.

Why this simple: no paper's member is an SSD; the catalog's ssd entry is a modern drive
for comparison, characterised by what its spec sheet gives (a sustained rate per direction,
and a command latency derived from its QD1 IOPS), and it has no arm or platter to model.
Reads and writes cost latency + bytes / rate, a discard costs the write latency, and a
flush costs nothing (no write cache is modelled).
"""

from __future__ import annotations

from raidlab.disks.geometry import MS, DriveSpec
from raidlab.disks.mechanisms.base import Mechanism, Plan


def _latency_and_transfer_s(latency_ms: float, mb_s: float, nbytes: int) -> tuple[float, float]:
    """(command latency, transfer time) in seconds of one command of nbytes."""
    return latency_ms * MS, nbytes / (mb_s * 1e6)


class SsdMechanism(Mechanism):
    """kind "ssd": no arm, no queue-dependent cost; every command is served alike."""

    kind = "ssd"

    def _timed(self, now: float, latency_ms: float, mb_s: float, length: int) -> Plan:
        c, x = _latency_and_transfer_s(latency_ms, mb_s, length)
        return Plan(now, now + c + x, controller=c, transfer=x)

    def plan_read(self, now: float, offset: int, length: int) -> Plan:
        return self._timed(now, self.spec.read_latency_ms, self.spec.read_mb_s, length)

    def plan_write(self, now: float, offset: int, length: int, *, fua: bool = False) -> Plan:
        return self._timed(now, self.spec.write_latency_ms, self.spec.write_mb_s, length)

    def plan_trim(self, now: float, offset: int, length: int) -> Plan:
        """A discard costs the command latency and no transfer."""
        return Plan.overhead(now, self.spec.write_latency_ms * MS)

    @classmethod
    def expected_random_read_s(cls, spec: DriveSpec, image_bytes: int, request_bytes: int,
                               span: str = "full") -> dict[str, float]:
        c, x = _latency_and_transfer_s(spec.read_latency_ms, spec.read_mb_s, request_bytes)
        return {"total": c + x}
