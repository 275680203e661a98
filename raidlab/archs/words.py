"""Words `raidlab status` uses for every family: sizes, shares, drives, and what an array
survives now.

Here, below the service, because the architectures' own status lines (raidlab.archs.dcd,
raidlab.archs.vcraid) use them as the service's hosts do (raidlab.service.hosts.status).

What an array survives is said for its state now, not for the healthy array: `survival`
works from a layout's failure groups (the sets of members that together hold every copy of
some data, raidlab.engine.layouts) minus the members already failed, so a degraded RAID 5
says that its next failure loses data, a RAID 10 which members now hold a last copy, and a
layout added later is described without a word of its own.
"""

from __future__ import annotations

from collections.abc import Iterable

KiB, MiB = 1024, 1 << 20


def kib(n: int) -> str:
    return f"{n / KiB:.0f} KiB" if n < 10 * MiB else f"{n / MiB:.1f} MiB"


def pct(used: int, total: int) -> str:
    return f"{100 * used / total:.1f}%" if total else "-"


def drives(indices: Iterable[int], word: str = "or") -> str:
    """"d2", "d0 or d2", "d0, d1 or d3" (or with `word` "and")."""
    names = [f"d{i}" for i in sorted(indices)]
    return f"{', '.join(names[:-1])} {word} {names[-1]}" if len(names) > 1 else "".join(names)


def survival(groups: Iterable[Iterable[int]], failed: Iterable[int], members: int, healthy: str = "") -> str:
    """What an array whose failure groups are `groups` survives with `failed` members gone,
    in words: `healthy` (the layout's own rule) when nothing has failed; past that, how many
    more failures any member may have while copies remain (a RAID 1 of three), which
    members now hold a last copy where only some do (RAID 10, chained), "none: the next
    failure loses data" where every member does (a RAID 5 with one member gone), and
    "none: data is lost" when some data had no member left."""
    failed_set = frozenset(failed)
    groups = [frozenset(g) for g in groups]
    remaining = [g - failed_set for g in groups]
    gone = f"{drives(failed_set, 'and')} failed"
    if any(not rest for rest in remaining):
        them = "them" if len(failed_set) > 1 else "it"
        return f"none: data is lost ({gone}; some data cannot be read or rebuilt without {them})"
    if not failed_set:
        more = min((len(g) for g in groups), default=members + 1) - 1
        return healthy or (f"survives any {more} failure{'s' if more > 1 else ''}" if more else
                           "none: any failure loses data")
    more = min(len(rest) for rest in remaining) - 1
    if more >= 1:
        return f"survives any {'one' if more == 1 else more} more failure{'s' if more > 1 else ''} ({gone})"
    last = frozenset().union(*(rest for rest in remaining if len(rest) == 1))
    spare = frozenset(range(members)) - failed_set - last
    if not spare:
        return f"none: the next failure loses data ({gone})"
    holds = "holds the last copy" if len(last) == 1 else "hold the last copies"
    return (f"the next failure loses data if it is {drives(last)}, not if it is {drives(spare)} "
            f"({gone}: {drives(last, 'and')} {holds} of some data)")
