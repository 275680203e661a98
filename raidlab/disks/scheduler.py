"""Queue disciplines of a member disk: FIFO, SSTF, SCAN.

Why separate from the mechanism: the discipline decides *which* waiting request the drive
serves next, the mechanism (raidlab.disks.mechanisms) decides *how long* it takes. The design
makes the discipline a parameter of a member disk; the DCD and VC-RAID papers' arguments about
bursty small writes depend on it (a queue of 5 to 1000 writes, DCD section 3.1).

Each discipline sees only the target cylinder of a request (`request.cylinder`) and its
arrival order (`request.seq`), and the arm's cylinder when it must choose. Drives without
geometry (ssd, none) give every request cylinder 0, so every discipline degenerates to
FIFO for them, which is what a single-queue SSD model should do.

* FIFO: arrival order.
* SSTF (shortest seek time first): the nearest cylinder to the arm; ties by arrival.
  Distance in mapped cylinders is monotonic in seek time (the seek curve is increasing),
  so "nearest cylinder" is "shortest seek". Can starve far requests, as SSTF does.
* SCAN (elevator, Denning 1967): keep moving the arm in one direction serving the
  nearest request at or beyond the arm in that direction; reverse when none is left.

A linear scan per choice is O(queue length); the queues we model are at most hundreds
deep, and a sorted structure would cost more in Python than it saves.
"""

from __future__ import annotations

import collections
from typing import Protocol

from raidlab.errors import UsageError


class Queued(Protocol):
    cylinder: int
    seq: int


class Discipline:
    name = ""

    def __init__(self) -> None:
        self._items: list = []

    def __len__(self) -> int:
        return len(self._items)

    def push(self, item: Queued) -> None:
        self._items.append(item)

    def pop(self, arm_cylinder: int) -> Queued:
        raise NotImplementedError

    def items(self) -> list:
        return list(self._items)

    def remove(self, item: Queued) -> None:
        """Take `item` out of the queue (merged into the request being served)."""
        self._items.remove(item)


class Fifo(Discipline):
    name = "fifo"

    def __init__(self) -> None:
        self._items = collections.deque()

    def pop(self, arm_cylinder: int) -> Queued:
        return self._items.popleft()


class Sstf(Discipline):
    name = "sstf"

    def pop(self, arm_cylinder: int) -> Queued:
        items = self._items
        best = min(range(len(items)), key=lambda i: (abs(items[i].cylinder - arm_cylinder), items[i].seq))
        return items.pop(best)


class Scan(Discipline):
    name = "scan"

    def __init__(self) -> None:
        super().__init__()
        self.direction = +1  # +1: towards higher cylinders (inwards)

    def pop(self, arm_cylinder: int) -> Queued:
        items = self._items
        for _ in range(2):
            best = None
            for i, it in enumerate(items):
                delta = (it.cylinder - arm_cylinder) * self.direction
                if delta < 0:
                    continue
                key = (delta, it.seq)
                if best is None or key < best[0]:
                    best = (key, i)
            if best is not None:
                return items.pop(best[1])
            self.direction = -self.direction
        raise IndexError("pop from an empty queue")


DISCIPLINES: dict[str, type[Discipline]] = {"fifo": Fifo, "sstf": Sstf, "scan": Scan}


def make_discipline(name: str) -> Discipline:
    try:
        return DISCIPLINES[name]()
    except KeyError:
        raise UsageError(
            f"unknown queue discipline {name!r}",
            hint=f"use one of: {', '.join(DISCIPLINES)}",
            discipline=name,
        ) from None
