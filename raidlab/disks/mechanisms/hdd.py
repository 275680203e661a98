"""The hard disk mechanism: controller, arm, platter, read-ahead buffer and write cache.

Follows Ruemmler & Wilkes, "An introduction to disk drive modeling" (IEEE Computer 27(3),
1994), the model the DCD paper's simulator is built on (DCD section 3.2, reference [17]):
controller overhead, a two-regime seek curve (raidlab.disks.seek), rotational latency from
the platter's actual angle, zoned recording and head and cylinder switches hidden by track
skew (raidlab.disks.geometry), and a read-ahead track buffer. docs/architecture.md ("Member disks and
timing models") lists exactly these parts; this module puts them together into the time
one request takes and the state of the drive it leaves behind.

Where we depart from Ruemmler & Wilkes, and why (the geometry's own departures, spare
sectors and the mapping of an image onto the drive, are in raidlab.disks.geometry):
* The SCSI bus is not modelled as a shared resource; a transfer between host and drive
  buffer costs bytes / bus rate only where the media is not involved (read-ahead hits and
  write-cache acceptance). With media access the bus transfer overlaps the media transfer,
  as R&W's "producer-consumer interlock" does for all but the last sector, which we drop.
* Write settle time is not separated from read settle time (the catalog's seek curves are
  read curves); write cost differs by its controller overhead only.
* Read-ahead: after a read the drive keeps reading into its buffer (up to
  `readahead_bytes` ahead of the host) until the next request needs the arm; a read that
  continues the stream waits only for the media, so QD1 sequential reads run at the zone
  rate. Writes and destages stop it. Buffer segmentation is not modelled.
* Write cache ("immediate report", DCD's term): a write is reported after controller
  overhead + bus transfer and reaches the media in the background, the extent nearest the
  arm first, coalesced with extents that continue it; a flush (SYNCHRONIZE CACHE) ends when
  all of it is on the media; a read miss waits for at most the destage in progress. R&W
  model write-behind the same way.

Time is in seconds throughout (trio's unit); the catalog gives milliseconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from raidlab.disks.geometry import MS, DriveSpec, Geometry, Location
from raidlab.disks.mechanisms.base import Mechanism, Plan
from raidlab.disks.mechanisms.hddcore import HddCore

# A drive destages contiguous cached writes as one media write of at most this many bytes.
DESTAGE_MAX_BYTES = 4 << 20
# A rotational wait this close to a full revolution is float noise on "the sector is under
# the head right now" (track skew is sized to make that happen); treat it as no wait.
_ROTATION_EPSILON = 1e-9  # hddcore.ROTATION_EPSILON, a C constant where that module is compiled


@dataclasses.dataclass
class _Stream:
    """Read-ahead in progress: the drive keeps reading after a read, track by track.

    `track_offset`/`track_time`: image offset of a track start and the time its first byte
    passes the head (the stream is then reading that whole track). `origin` is where the
    read-ahead began (end of the read that started it), `limit` how far it may go.
    """

    origin: int
    buffer_start: int
    track_offset: int
    track_time: float
    limit: int

    def follow_host(self, end: int, readahead: int, image_bytes: int) -> None:
        """The host has read up to `end`: the buffer keeps at most `readahead` bytes before
        it, and the drive reads ahead up to `readahead` bytes past it."""
        self.buffer_start = max(self.buffer_start, end - readahead)
        self.limit = min(image_bytes, max(self.limit, end + readahead))


class HddMechanism(Mechanism):
    """kind "hdd": the state of one modelled hard disk (arm, platter phase, buffers)."""

    kind = "hdd"
    geometry: Geometry

    def __init__(self, spec: DriveSpec, image_bytes: int, *, span: str = "full",
                 write_cache: bool | None = None):
        super().__init__(spec, image_bytes)
        self.geometry = Geometry(spec, image_bytes, span)
        self._core = HddCore(self.geometry)  # the media arithmetic (raidlab.compiled)
        self.head = 0
        self._stream: _Stream | None = None
        self.write_cache_enabled = (
            spec.write_cache_default if write_cache is None else bool(write_cache)
        ) and spec.write_cache_bytes > 0
        # (offset, length, accepted_at): written into the drive's buffer, not yet on media
        self.dirty: list[tuple[int, int, float]] = []
        self.arm_free_at = float("-inf")  # end of the arm's last media operation

    # -- helpers ----------------------------------------------------------------------

    def cylinder_of(self, offset: int) -> int:
        return self._core.cylinder_of(min(offset, self.image_bytes - 1))

    def platter_angle(self, t: float) -> float:
        """Fraction of a revolution the platter has turned at time t (0 at t = 0)."""
        rev = self.spec.revolution_s
        return (t / rev) % 1.0

    def _bus_s(self, nbytes: int) -> float:
        return nbytes / (self.spec.bus_mb_s * 1e6) if self.spec.bus_mb_s else 0.0

    def _from_buffer(self, plan: Plan, t: float, length: int) -> Plan:
        """The request is served from the drive's buffer at time t: bus transfer only."""
        x = self._bus_s(length)
        plan.transfer, plan.end, plan.cache_hit = x, t + x, True
        return plan

    def _rotational_wait(self, t: float, loc: Location) -> float:
        rev = self.spec.revolution_s
        frac = (self.geometry.byte_angle(loc) - self.platter_angle(t)) % 1.0
        if frac > 1.0 - _ROTATION_EPSILON:
            frac = 0.0
        return frac * rev

    def _switch_s(self, from_cylinder: int, loc: Location) -> float:
        """Moving the head from `from_cylinder` onto the track of `loc`: the arm's seek to
        another cylinder (a cylinder switch between neighbours), else a head switch."""
        if loc.cylinder != from_cylinder:
            return self.geometry.seek_s(from_cylinder, loc.cylinder)
        return self.spec.head_switch_ms * MS

    def _media(self, plan: Plan, t: float, offset: int, length: int) -> float:
        """Position and transfer [offset, offset+length) starting at time t; arm moves.
        The move to the first track is the request's seek (or a head switch); the moves
        between its tracks are switches (the arithmetic: raidlab.disks.mechanisms.hddcore)."""
        core = self._core
        t = core.media(t, offset, length, self.cylinder, self.head,
                       plan.seek, plan.switches, plan.rotation, plan.transfer)
        plan.seek, plan.switches, plan.rotation, plan.transfer = core.seek, core.switches, core.rotation, core.transfer
        self.cylinder, self.head = core.cylinder, core.head
        return t

    # -- read-ahead stream ------------------------------------------------------------

    def _start_stream(self, end_offset: int, t: float, buffer_start: int) -> None:
        if not self.spec.readahead_bytes or end_offset >= self.image_bytes:
            self._stream = None
            return
        loc = self.geometry.locate(end_offset)
        # The head is positioned right at end_offset at time t; the track started earlier.
        track_offset = end_offset - loc.byte_in_track
        track_time = t - loc.byte_in_track / loc.track_bytes * self.spec.revolution_s
        limit = min(self.image_bytes, end_offset + self.spec.readahead_bytes)
        self._stream = _Stream(end_offset, max(buffer_start, end_offset - self.spec.readahead_bytes),
                               track_offset, track_time, limit)

    def _advance_stream_to_track(self, stream: _Stream) -> None:
        """Move the stream one track on (switch + rotational alignment), arm follows."""
        g = self.geometry
        here = g.locate(stream.track_offset)
        end_of_track = stream.track_time + self.spec.revolution_s
        nxt_off = stream.track_offset + here.track_bytes
        nxt = g.locate(nxt_off)
        t = end_of_track + self._switch_s(here.cylinder, nxt)
        t += self._rotational_wait(t, nxt)
        stream.track_offset, stream.track_time = nxt_off, t

    def _stream_to_track(self, stream: _Stream, reached: Callable[[Location], bool]) -> Location:
        """Move the stream on, track by track, to the first track it reads for which
        `reached(track)` holds; the arm follows the stream there."""
        while True:
            loc = self.geometry.locate(stream.track_offset)
            if reached(loc):
                break
            self._advance_stream_to_track(stream)
        self.cylinder, self.head = loc.cylinder, loc.head
        return loc

    def _stream_position(self, stream: _Stream, t: float) -> int:
        """How far (image offset) the read-ahead has read by time t, capped at its limit.
        Moves the stream's track cursor forward; the arm follows the stream."""
        rev = self.spec.revolution_s
        loc = self._stream_to_track(
            stream,
            lambda track: (stream.track_offset + track.track_bytes >= stream.limit
                           or stream.track_time + rev > t),
        )
        if t <= stream.track_time:
            done = stream.track_offset
        else:
            done = stream.track_offset + int((t - stream.track_time) / rev * loc.track_bytes)
        return max(stream.origin, min(done, stream.limit))

    def _stream_arrival(self, stream: _Stream, offset_end: int) -> float:
        """Time at which the read-ahead will have read up to offset_end (<= limit)."""
        loc = self._stream_to_track(
            stream, lambda track: offset_end <= stream.track_offset + track.track_bytes
        )
        rev = self.spec.revolution_s
        return stream.track_time + (offset_end - stream.track_offset) / loc.track_bytes * rev

    def _stop_stream(self, t: float) -> None:
        """Read-ahead stops at time t (the arm stays where it got to)."""
        if self._stream is not None:
            self._stream_position(self._stream, t)
            self._stream = None

    # -- requests ---------------------------------------------------------------------

    def _command(self, now: float, controller_ms: float) -> tuple[Plan, float]:
        """A command arriving at `now` spends the controller's overhead first: its plan so
        far and the time t it then needs the drive; destages that start before t run."""
        plan = Plan(now, now)
        t = now + controller_ms * MS
        plan.controller = t - now
        self._destage_until(t)
        return plan, t

    def plan_read(self, now: float, offset: int, length: int) -> Plan:
        spec = self.spec
        plan, t = self._command(now, spec.controller_read_ms)
        end = offset + length
        # Write cache: a read entirely inside data not yet destaged comes from the buffer.
        for d_off, d_len, _ in self.dirty:
            if d_off <= offset and end <= d_off + d_len:
                return self._from_buffer(plan, t, length)
        stream = self._stream
        if stream is not None:
            reached = self._stream_position(stream, t)
            if stream.buffer_start <= offset and end <= reached:
                # Read-ahead hit: the data is in the buffer. Read-ahead goes on.
                stream.follow_host(end, spec.readahead_bytes, self.image_bytes)
                return self._from_buffer(plan, t, length)
            if stream.buffer_start <= offset <= reached and end <= self.image_bytes:
                # The request continues the stream: it ends when the media has read it.
                paused = reached >= stream.limit and self._stream_arrival(stream, reached) < t
                if not paused:
                    stream.follow_host(end, spec.readahead_bytes, self.image_bytes)
                    done = self._stream_arrival(stream, end)
                    plan.transfer = done - t
                    plan.end = self.arm_free_at = done
                    plan.cache_hit = True
                    return plan
                # Read-ahead had stopped at its limit: the rest is an ordinary media read
                # from where it stopped (the arm is there; the platter has moved on).
                self._stream = None
                t = self._media(plan, t, reached, end - reached)
                plan.end = self.arm_free_at = t
                self._start_stream(end, t, offset)
                return plan
            # Miss: read-ahead stops where it got to; the arm is there.
            self._stream = None
        t = self._media(plan, max(t, self.arm_free_at), offset, length)
        plan.end = self.arm_free_at = t
        self._start_stream(end, t, offset)
        return plan

    def plan_write(self, now: float, offset: int, length: int, *, fua: bool = False) -> Plan:
        spec = self.spec
        plan, t = self._command(now, spec.controller_write_ms)
        self._stop_stream(t)
        if self.write_cache_enabled and not fua and length <= spec.write_cache_bytes:
            # Immediate report: the data goes into the buffer (after destaging enough to
            # make room) and reaches the media later, in the background (_destage_until).
            while self.dirty_bytes + length > spec.write_cache_bytes:
                self._destage_next(force=True)
                t = max(t, self.arm_free_at)
            self._from_buffer(plan, t, length)
            self._add_dirty(offset, length, plan.end)
            return plan
        self._drop_dirty(offset, length)
        t = self._media(plan, max(t, self.arm_free_at), offset, length)
        plan.end = self.arm_free_at = t
        return plan

    def plan_flush(self, now: float) -> Plan:
        if not self.write_cache_enabled:
            return Plan(now, now)
        c = self.spec.controller_write_ms * MS
        self._destage_until(now + c)
        while self.dirty:
            self._destage_next(force=True)
        end = max(now + c, self.arm_free_at)
        return Plan(now, end, controller=c)

    def plan_trim(self, now: float, offset: int, length: int) -> Plan:
        """A discard costs the controller's command overhead and no media time."""
        self._drop_dirty(offset, length)
        return Plan.overhead(now, self.spec.controller_write_ms * MS)

    # -- write cache ------------------------------------------------------------------
    #
    # Buffered writes reach the media in the background: whenever the arm is free and
    # data accepted before that moment is waiting, the drive writes the extent nearest
    # the arm (coalesced with extents that continue it), as drives' firmware does. The
    # destages are computed lazily, in time order, whenever a request needs to know the
    # arm's state at some time t (_destage_until); host requests that hit the cache never
    # wait for the arm, requests that need the media wait for at most the destage in
    # progress.

    def _add_dirty(self, offset: int, length: int, accepted_at: float) -> None:
        self._drop_dirty(offset, length)
        self.dirty.append((offset, length, accepted_at))
        self.dirty_bytes += length

    def _drop_dirty(self, offset: int, length: int) -> None:
        """Forget buffered data overwritten by [offset, offset+length) (newest data wins)."""
        if not self.dirty:
            return
        end = offset + length
        kept: list[tuple[int, int, float]] = []
        for d_off, d_len, d_t in self.dirty:
            d_end = d_off + d_len
            if d_end <= offset or d_off >= end:
                kept.append((d_off, d_len, d_t))
                continue
            if d_off < offset:
                kept.append((d_off, offset - d_off, d_t))
            if d_end > end:
                kept.append((end, d_end - end, d_t))
        self.dirty = kept
        self.dirty_bytes = sum(n for _, n, _ in kept)

    def _destage_until(self, t: float) -> None:
        """Run the background destages that start before time t."""
        while self.dirty:
            start = max(self.arm_free_at, min(a for _, _, a in self.dirty))
            if start >= t:
                return
            self._destage_next(force=False)

    def _destage_next(self, *, force: bool) -> None:
        """Destage one extent starting when the arm is free (force: even if it was accepted
        later, i.e. the host is waiting for room or for a flush)."""
        g = self.geometry
        start = max(self.arm_free_at, min(a for _, _, a in self.dirty))
        ready = [i for i, (_, _, a) in enumerate(self.dirty) if a <= start or force]
        best = min(ready, key=lambda i: (abs(g.cylinder_of(self.dirty[i][0]) - self.cylinder), i))
        off, n, accepted = self.dirty.pop(best)
        start = max(start, accepted)
        # Coalesce extents that continue this one on the media (a sequential stream
        # becomes one media write), up to DESTAGE_MAX_BYTES.
        while n < DESTAGE_MAX_BYTES:
            nxt = next((i for i, (o, _, a) in enumerate(self.dirty) if o == off + n and a <= start), None)
            if nxt is None:
                break
            n += self.dirty.pop(nxt)[1]
        self.dirty_bytes = sum(x for _, x, _ in self.dirty)
        self._stop_stream(start)
        plan = Plan(start, start)
        self.arm_free_at = self._media(plan, start, off, n)
        self.destaged_bytes += n
        self.destage_time += self.arm_free_at - start
        plan.add_parts_to(self.destage_split)

    # -- closed form ------------------------------------------------------------------

    @classmethod
    def expected_random_read_s(cls, spec: DriveSpec, image_bytes: int, request_bytes: int,
                               span: str = "full") -> dict[str, float]:
        """mean seek (cylinders weighted by bytes) + half a revolution + transfer at the
        track size of the zones the offsets fall in + read controller overhead + the track
        switches inside the request (a request of L bytes crosses L / track-bytes track
        boundaries on average; each costs a head switch, or a cylinder switch once per
        cylinder, rounded up to whole sectors by the track skew, or a full revolution on a
        drive without skew)."""
        g = Geometry(spec, image_bytes, span)
        rev = spec.revolution_s
        seek = g.mean_random_seek_s(request_bytes)
        # transfer: byte-weighted mean of (request / track bytes) revolutions
        usable = image_bytes - request_bytes
        xfer = switches = 0.0
        for z in g.used_zones:
            share = max(0, min(z.byte_end, usable) - z.byte_start) / usable
            xfer += share * request_bytes / z.track_bytes * rev
            if spec.track_skew:
                per_switch = ((spec.heads - 1) * z.head_skew + z.cylinder_skew) / spec.heads * rev
            else:
                per_switch = rev
            switches += share * request_bytes / z.track_bytes * per_switch
        controller = spec.controller_read_ms * MS
        half = rev / 2
        return {
            "seek": seek,
            "rotation": half,
            "transfer": xfer,
            "switches": switches,
            "controller": controller,
            "total": seek + half + xfer + switches + controller,
        }
