"""The order in which the suite's tests start, so that parallel workers end together.

`make test` runs pytest-xdist with `--dist worksteal`. That scheduler hands each of the N
workers one contiguous block of the collected tests (the first len/N, the next, ...) and
later lets an idle worker take half of the tail of the fullest queue. So what decides when
the suite ends is what each block holds: a block with two VM tests and a lab ends minutes
after the others, and a long test at a block's end starts late.

This module arranges the collection for that scheduler: known durations (`durations.json`
beside this file, written by `pytest --record-durations`) or, for a test not in it, an
estimate from its markers; the tests of one VM module kept together (their module fixture
boots one VM, and split across workers it would boot one each); groups placed longest first
on the block with the least work (LPT), then every block filled with short tests up to the
size xdist will give it, longest first within each block. Steals then take short tests from
queues' tails, which is what they are best at.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

DURATIONS = Path(__file__).with_name("durations.json")

# Seconds assumed for a test with no recorded duration: a VM test boots a guest, a live one
# builds loop devices and file systems, a unit test is quick.
ESTIMATE = {"vm": 30.0, "live": 8.0, "other": 0.3}

# `--record-durations` keeps tests of at least this many seconds.
RECORD_BELOW = 1.0


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def xdist_block_sizes(total: int, workers: int) -> list[int]:
    """The sizes of the contiguous blocks worksteal's first schedule sends: each idle worker
    in turn gets len(pending) // workers-still-to-serve."""
    sizes, rest = [], total
    for i in range(workers):
        size = rest // (workers - i)
        sizes.append(size)
        rest -= size
    return sizes


def arrange(items: Sequence[T], workers: int, seconds: Callable[[T], float],
            group: Callable[[T], str | None]) -> list[T]:
    """Items reordered so that xdist's contiguous split into `workers` blocks gives blocks of
    about equal work, each starting with its longest tests. `group(item)` names items that
    must stay on one worker (None: free); a group's work is the sum of its items'.

    One worker (a run without xdist), or no more items than workers: the collection's own
    order, in which each module's tests are together and a module fixture (a booted VM) is
    set up once."""
    if workers <= 1 or len(items) <= workers:
        return list(items)
    groups: dict[str, list[T]] = {}
    free: list[T] = []
    for item in items:
        name = group(item)
        (groups.setdefault(name, []) if name is not None else free).append(item)
    units = [(sum(seconds(i) for i in members), members) for members in groups.values()]
    units += [(seconds(i), [i]) for i in free]
    units.sort(key=lambda unit: unit[0], reverse=True)  # stable: collection order among equals

    sizes = xdist_block_sizes(len(items), workers)
    blocks: list[list[tuple[float, list[T]]]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    count = [0] * workers
    for work, members in units:
        fits = [b for b in range(workers) if count[b] + len(members) <= sizes[b]]
        if not fits:  # a group too large for any block's remaining room: the emptiest takes it
            fits = list(range(workers))
        b = min(fits, key=lambda k: (load[k], count[k]))
        blocks[b].append((work, members))
        load[b] += work
        count[b] += len(members)
    ordered: list[T] = []
    for block in blocks:
        for _work, members in sorted(block, key=lambda unit: unit[0], reverse=True):
            ordered.extend(members)
    return ordered
