"""The seek curve of a member disk, and how it is fitted to a drive's published figures.

Follows Ruemmler & Wilkes, "An introduction to disk drive modeling" (IEEE Computer 27(3),
1994), the model the DCD paper's simulator is built on (DCD section 3.2, reference [17]): a
two-regime seek curve, a + b*sqrt(d) for short seeks (the arm accelerates, then
decelerates) and c + e*d for long ones (the arm coasts at top speed).

Why a module of its own: the curve is the one part of the drive description that is itself
a model with parameters to fit. The catalog (raidlab.disks.catalog) builds curves from spec
sheets here, the zoned geometry (raidlab.disks.geometry) evaluates them over physical
distances, and `raidlab disk models` prints the drive maker's average seek computed here.

The catalog's curves are read curves, used for writes too (write settle time is not
separated; see raidlab.disks.mechanisms.hdd). Curves are in milliseconds, as the catalog
and the spec sheets give them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator


@dataclasses.dataclass(frozen=True)
class SeekCurve:
    """Ruemmler-Wilkes seek curve in milliseconds over a distance of d cylinders.

    d < boundary: short_a + short_b * sqrt(d)     (arm accelerates then decelerates)
    d >= boundary: long_a + long_b * d             (arm coasts at top speed)
    d == 0: 0 (no arm movement).
    """

    short_a: float
    short_b: float
    boundary: float
    long_a: float
    long_b: float

    def seek_ms(self, distance: float) -> float:
        d = abs(distance)
        if d <= 0:
            return 0.0
        if d < self.boundary:
            return self.short_a + self.short_b * math.sqrt(d)
        return self.long_a + self.long_b * d


def random_seek_weights(cylinders: int) -> Iterator[tuple[int, float]]:
    """(distance, probability) of |a - b| for a, b independent and uniform over cylinders,
    conditioned on a != b: the "weighted average of all possible seeks" drive makers quote."""
    n = cylinders
    total = n * (n - 1) / 2
    for d in range(1, n):
        yield d, (n - d) / total


def manufacturer_average_seek_ms(curve: SeekCurve, cylinders: int) -> float:
    """Average seek as specification sheets define it (all seek lengths 1..max, weighted by
    how many start/end pairs have that length)."""
    return sum(p * curve.seek_ms(d) for d, p in random_seek_weights(cylinders))


def fit_seek_curve(
    cylinders: int,
    track_to_track_ms: float,
    average_ms: float,
    full_stroke_ms: float,
    boundary_fraction: float = 0.3,
) -> SeekCurve:
    """A Ruemmler-Wilkes curve through a drive's three published seek figures.

    Spec sheets give track-to-track, average and full-stroke seeks, not the curve. With the
    short/long boundary fixed at `boundary_fraction` of the stroke, the four coefficients
    solve four linear equations: seek(1) = track-to-track, seek(max) = full stroke, the
    two regimes meet at the boundary, and the manufacturer's weighted average matches.
    """
    if cylinders < 4:
        raise ValueError("a seek curve needs at least 4 cylinders")
    b = max(2.0, boundary_fraction * (cylinders - 1))
    full = cylinders - 1
    # Unknowns x = (sa, sb, la, lb). Average: sum p(d) * (short or long).
    ps_short = ps_short_sqrt = ps_long = ps_long_d = 0.0
    for d, p in random_seek_weights(cylinders):
        if d < b:
            ps_short += p
            ps_short_sqrt += p * math.sqrt(d)
        else:
            ps_long += p
            ps_long_d += p * d
    rows = [
        ([1.0, 1.0, 0.0, 0.0], track_to_track_ms),
        ([0.0, 0.0, 1.0, float(full)], full_stroke_ms),
        ([1.0, math.sqrt(b), -1.0, -b], 0.0),
        ([ps_short, ps_short_sqrt, ps_long, ps_long_d], average_ms),
    ]
    sa, sb, la, lb = _solve4([r for r, _ in rows], [v for _, v in rows])
    curve = SeekCurve(short_a=sa, short_b=sb, boundary=b, long_a=la, long_b=lb)
    if sb <= 0 or lb < 0:
        raise ValueError(
            f"seek figures {track_to_track_ms}/{average_ms}/{full_stroke_ms} ms over "
            f"{cylinders} cylinders give a non-monotonic curve {curve}"
        )
    return curve


def _solve4(a: list[list[float]], y: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (4x4; no numpy in the engine path)."""
    m = [row[:] + [v] for row, v in zip(a, y)]
    n = len(m)
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        if abs(m[col][col]) < 1e-15:
            raise ValueError("singular seek-curve system")
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * z for x, z in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]
