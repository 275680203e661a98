"""The arithmetic of a hard disk's media access: where a byte lies, how long the arm takes to
get there, the platter's wait and the transfer, track by track.

Why a module of its own: this is the innermost loop of a virtual-time replay (every request
that reaches the media passes through `media`), and it is plain arithmetic over the zone
table, so it is the part of the drive model that compiles well. The module is pure Python
and is the reference; `make setup` also compiles this same file with Cython, typed by
hddcore.pxd beside it, and raidlab loads the compiled one unless RAIDLAB_PURE_PYTHON=1
(raidlab.compiled). Both compute the same floating-point operations in the same order, so a
replay gives identical numbers on either (tests/unit/test_compiled.py).

The model is raidlab.disks.geometry's and raidlab.disks.mechanisms.hdd's: the zone table of
`Geometry`, the seek curve of raidlab.disks.seek, head and cylinder switches, the platter's
angle at time t and the track skew. `HddCore` holds the zone table as flat lists and the
arm's position after the last access; HddMechanism keeps the arm in step with it.
"""

from __future__ import annotations

from bisect import bisect_right
import math

# A rotational wait this close to a full revolution is float noise on "the sector is under
# the head right now" (track skew is sized to make that happen); treat it as no wait.
ROTATION_EPSILON = 1e-9
MS = 1e-3


class HddCore:
    """One drive's zone table and seek curve, flat, and its arm after the last `media`."""

    def __init__(self, geometry) -> None:
        spec = geometry.spec
        zones = geometry.zones
        self.zone_starts = [z.byte_start for z in zones]
        self.zone_first_cylinders = [z.first_cylinder for z in zones]
        self.zone_track_bytes = [z.track_bytes for z in zones]
        self.zone_physical_first = [z.physical_first for z in zones]
        self.zone_physical_step = [z.physical_step for z in zones]
        self.zone_head_skew = [z.head_skew for z in zones]
        self.zone_cylinder_skew = [z.cylinder_skew for z in zones]
        self.last_zone = len(zones) - 1
        self.heads = spec.heads
        self.rev = spec.revolution_s
        self.head_switch_s = spec.head_switch_ms * MS
        self.cylinder_switch_s = spec.cylinder_switch_s()
        self.span_start = geometry.span == "start"
        curve = spec.seek
        self.short_a = curve.short_a
        self.short_b = curve.short_b
        self.boundary = curve.boundary
        self.long_a = curve.long_a
        self.long_b = curve.long_b
        # what the last `media` left: the arm, and the plan's parts with its time added
        self.cylinder = 0
        self.head = 0
        self.seek = 0.0
        self.switches = 0.0
        self.rotation = 0.0
        self.transfer = 0.0

    def _zone(self, starts: list, value: int) -> int:
        """The zone whose first byte or cylinder (`starts`) is the last at or below value."""
        i = bisect_right(starts, value) - 1
        if i < 0:
            return 0
        if i > self.last_zone:
            return self.last_zone
        return i

    def zone_of_byte(self, offset: int) -> int:
        return self._zone(self.zone_starts, offset)

    def zone_of_cylinder(self, cylinder: int) -> int:
        return self._zone(self.zone_first_cylinders, cylinder)

    def cylinder_of(self, offset: int) -> int:
        z = self.zone_of_byte(offset)
        return self.zone_first_cylinders[z] + (offset - self.zone_starts[z]) // (self.zone_track_bytes[z] * self.heads)

    def position(self, cylinder: int) -> float:
        """Geometry.physical_position: where a mapped cylinder lies on the drive."""
        z = self.zone_of_cylinder(cylinder)
        k = cylinder - self.zone_first_cylinders[z]
        if self.span_start:
            return self.zone_physical_first[z] + k
        return self.zone_physical_first[z] + (k + 0.5) * self.zone_physical_step[z]

    def seek_s(self, from_cylinder: int, to_cylinder: int) -> float:
        """Geometry.seek_s: the arm's move between mapped cylinders."""
        if from_cylinder == to_cylinder:
            return 0.0
        if abs(from_cylinder - to_cylinder) == 1:
            return self.cylinder_switch_s
        d = abs(self.position(from_cylinder) - self.position(to_cylinder))
        if d < 1.0:
            d = 1.0
        if d < self.boundary:
            return (self.short_a + self.short_b * math.sqrt(d)) * MS
        return (self.long_a + self.long_b * d) * MS

    def media(self, t: float, offset: int, length: int, cylinder: int, head: int,
              seek: float, switches: float, rotation: float, transfer: float) -> float:
        """Position and transfer [offset, offset+length) from time t with the arm at
        (cylinder, head); the plan's parts so far are seek, switches, rotation and
        transfer. Returns the time the transfer ends; leaves the arm and the parts with
        this access's time added in the attributes of the same names.

        HddMechanism._media's rule: the move to the first track is the request's seek (or
        a head switch when it stays on the cylinder); the moves between its tracks are
        switches; each track waits for its byte to come under the head, then transfers."""
        rev = self.rev
        heads = self.heads
        end = offset + length
        first = True
        while offset < end:
            z = self.zone_of_byte(offset)
            track_bytes = self.zone_track_bytes[z]
            rel = offset - self.zone_starts[z]
            per_cylinder = track_bytes * heads
            k = rel // per_cylinder
            rest = rel - k * per_cylinder
            h = rest // track_bytes
            in_track = rest - h * track_bytes
            c = self.zone_first_cylinders[z] + k
            n = end - offset
            if n > track_bytes - in_track:
                n = track_bytes - in_track
            if c == cylinder and h == head:
                s = 0.0
            elif c != cylinder:
                s = self.seek_s(cylinder, c)
            else:
                s = self.head_switch_s
            if first and c != cylinder:
                seek += s
            else:
                switches += s
            first = False
            t += s
            # the rotational wait: the byte's angle on the platter less the platter's angle
            start_angle = ((k * (heads - 1) + h) * self.zone_head_skew[z] + k * self.zone_cylinder_skew[z]) % 1.0
            byte_angle = (start_angle + in_track / track_bytes) % 1.0
            frac = (byte_angle - (t / rev) % 1.0) % 1.0
            if frac > 1.0 - ROTATION_EPSILON:
                frac = 0.0
            w = frac * rev
            rotation += w
            t += w
            x = n / track_bytes * rev
            transfer += x
            t += x
            cylinder = c
            head = h
            offset += n
        self.cylinder = cylinder
        self.head = head
        self.seek = seek
        self.switches = switches
        self.rotation = rotation
        self.transfer = transfer
        return t
