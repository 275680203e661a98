"""Flushes per drive: what the guest sent an array, and what reached each of its drives.

Why this table: architectures differ in what a flush from the guest costs their drives. md's
RAID 0 and RAID 5 (in the lab VM) and the engine's raid5 pass a flush to every member drive,
which writes its write cache back; VC-RAID answers a flush once its log write is reported by
a cache disk and sends the cache disks no flush (in durability `paper` that log write is a
plain write, in `strict` a FUA write), while its members get flushes only from level-2
destage. A claim that compares such columns compares drives that paid for the guest's
flushes with drives that did not, and this table shows by how much, from the counters the
run files keep.

Where each counter is in a run file (`runs/<label>--<case>--r<k>.json`): the array's status
before the workload (`array_status_before`, after mkfs, the settle and the mount) and after
it (`array_status`, after umount); every figure here is after minus before, so mkfs and the
settle are in neither.

* The guest's flushes to the volume: `export.volume.flushes`, the FUSE file an engine array
  is served through (each fsync or flush the kernel sent it). md runs in the guest on the
  drive files, so there is no volume file, and what the guest sent /dev/mdN is not in the
  file.
* What the guest sent each drive file: `export["disks/dK"].flushes`; only md uses these files
  (an engine array reaches its drives in-process, and its drive files stay at zero).
* What reached each drive: the drive's own statistics (`flushes`, `writes`), under
  `statistics.members` (md, the engine's raid5), `statistics.array.members` (VC-RAID's data
  array) and `statistics.cache_disks` (VC-RAID's cache disks).
* VC-RAID's level-1 log writes (`statistics.level1_destages`) and tombstone records
  (`statistics.tombstones`): by the engine's design a tombstone is a FUA write in both modes,
  a level-1 data record only in `strict`.

What no run file holds is said beside the table (`missing_counters`), not estimated: a drive
counts no FUA writes apart from other writes, and keeps no flush latency (its
`flush_lateness` is how late the host delivered a flush's completion after the model's time,
over the drive's life, which is neither a latency nor divisible into before and after).

A claim's compared columns "differ" here when the flushes that reached the drives of one
column, per run, are more than twice those of another (`DIFFER_FACTOR`) and at least
`DIFFER_FLOOR` more ("few" when only the factor holds: the same column's drives vary by a few
dozen flushes between repetitions). The counts are shown beside the word, so a reader can
apply another threshold.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from raidlab.report import claims as claimsmod
from raidlab.report.results import Results, Stat, aggregate

MEMBER = "member"
CACHE_DISK = "cache disk"
DIFFER_FACTOR = 2.0
DIFFER_FLOOR = 100  # flushes per run
DIFFER, ALIKE, FEW = "differ", "alike", "few"


@dataclasses.dataclass(frozen=True)
class DriveCounts:
    """One drive's counters over the workload (after minus before)."""

    name: str
    role: str            # MEMBER or CACHE_DISK
    model: str
    flushes: int         # flushes the drive served
    writes: int          # writes the drive served (FUA or not: not told apart)
    file_flushes: int | None  # flushes the guest sent its FUSE file disks/<name>; None: file unused


@dataclasses.dataclass(frozen=True)
class RunFlushes:
    """One run's flush counters: what the guest sent, what each drive served."""

    file: str
    arch: str            # the scenario's label
    arch_id: str
    case: str
    repetition: int
    durability: str | None
    volume_flushes: int | None   # the guest's flushes to the FUSE volume; None: no volume file
    drives: tuple[DriveCounts, ...]
    log_writes: int | None = None    # VC-RAID's level-1 log writes
    tombstones: int | None = None    # VC-RAID's tombstone records
    missing: tuple[str, ...] = ()    # what this file lacks, in words

    def _sum(self, role: str, field: str) -> int:
        return sum(getattr(d, field) for d in self.drives if d.role == role)

    @property
    def member_flushes(self) -> int:
        return self._sum(MEMBER, "flushes")

    @property
    def cache_flushes(self) -> int:
        return self._sum(CACHE_DISK, "flushes")

    @property
    def drive_flushes(self) -> int:
        return self.member_flushes + self.cache_flushes

    @property
    def member_writes(self) -> int:
        return self._sum(MEMBER, "writes")

    @property
    def cache_writes(self) -> int:
        return self._sum(CACHE_DISK, "writes")

    @property
    def has_cache_disks(self) -> bool:
        return any(d.role == CACHE_DISK for d in self.drives)

    @property
    def file_flushes(self) -> int | None:
        used = [d.file_flushes for d in self.drives if d.file_flushes is not None]
        return sum(used) if used else None


def _drive_entries(status: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    stats = status.get("statistics") or {}
    members = stats.get("members")
    if members is None:
        members = (stats.get("array") or {}).get("members")
    return [(MEMBER, m) for m in members or []] + [(CACHE_DISK, c) for c in stats.get("cache_disks") or []]


def _count(after: dict, before: dict, key: str, where: str) -> int:
    a, b = after.get(key), before.get(key)
    if not isinstance(a, int) or not isinstance(b, int):
        raise _Missing(f"{where}: no `{key}` before and after the workload")
    if a < b:
        raise _Missing(f"{where}: `{key}` fell from {b} to {a}")
    return a - b


class _Missing(Exception):
    pass


def run_flushes(doc: dict[str, Any]) -> RunFlushes:
    """The flush counters of one run document (pure): after minus before, per drive."""
    after, before = doc.get("array_status") or {}, doc.get("array_status_before") or {}
    missing: list[str] = []
    for name, status in (("after", after), ("before", before)):
        if "error" in status:
            missing.append(f"array status {name} the workload: {status['error']}")
    spec_options = (after.get("spec") or {}).get("options") or {}
    durability = (after.get("options") or {}).get("durability") or spec_options.get("durability")

    exports_after, exports_before = after.get("export") or {}, before.get("export") or {}
    volume_flushes = None
    if "volume" in exports_after:
        try:
            volume_flushes = _count(exports_after["volume"], exports_before.get("volume") or {},
                                    "flushes", "export volume")
        except _Missing as exc:
            missing.append(str(exc))

    before_drives = {(role, d.get("name")): d for role, d in _drive_entries(before)}
    drives = []
    for role, drive in _drive_entries(after):
        name = str(drive.get("name"))
        prior = before_drives.get((role, drive.get("name")))
        if prior is None:
            missing.append(f"{role} {name}: not in the status before the workload")
            continue
        try:
            flushes = _count(drive, prior, "flushes", f"{role} {name}")
            writes = _count(drive, prior, "writes", f"{role} {name}")
        except _Missing as exc:
            missing.append(str(exc))
            continue
        file_after = exports_after.get(f"disks/{name}")
        file_flushes = None
        if file_after and any(v for k, v in file_after.items() if k in ("reads", "writes", "flushes")):
            try:
                file_flushes = _count(file_after, exports_before.get(f"disks/{name}") or {}, "flushes",
                                      f"export disks/{name}")
            except _Missing as exc:
                missing.append(str(exc))
        drives.append(DriveCounts(name, role, str(drive.get("model", "")), flushes, writes, file_flushes))

    stats_after, stats_before = after.get("statistics") or {}, before.get("statistics") or {}
    engine_counts: dict[str, int | None] = {}
    for key in ("level1_destages", "tombstones"):
        engine_counts[key] = None
        if key in stats_after:
            try:
                engine_counts[key] = _count(stats_after, stats_before, key, "statistics")
            except _Missing as exc:
                missing.append(str(exc))
    return RunFlushes(file=str(doc.get("_file", "")), arch=str(doc.get("arch")), arch_id=str(doc.get("arch_id", "")),
                      case=str(doc.get("case")), repetition=int(doc.get("repetition") or 0), durability=durability,
                      volume_flushes=volume_flushes, drives=tuple(drives),
                      log_writes=engine_counts["level1_destages"], tombstones=engine_counts["tombstones"],
                      missing=tuple(missing))


def flush_rows(results: Results) -> list[RunFlushes]:
    """One row per successful run of `results` (a directory, or several combined), in the
    scenario's order of cases and architectures, then by repetition."""
    case_order = {c.name: i for i, c in enumerate(results.scenario.cases)}
    arch_order = {a.label: i for i, a in enumerate(results.scenario.archs)}
    rows = [run_flushes(doc) for doc in results.ok_runs]
    return sorted(rows, key=lambda r: (case_order.get(r.case, len(case_order)),
                                       arch_order.get(r.arch, len(arch_order)), r.repetition, r.file))


@dataclasses.dataclass(frozen=True)
class ArchFlushes:
    """One architecture in one case, over its repetitions."""

    case: str
    arch: str
    durability: str | None
    runs: tuple[RunFlushes, ...]

    def stat(self, field: str) -> Stat | None:
        """`field` of RunFlushes over the runs; None if a run lacks it or lacks any counter
        (a sum over the drives that were counted would understate)."""
        values = [getattr(r, field) for r in self.runs]
        if not values or any(v is None for v in values) or any(r.missing for r in self.runs):
            return None
        return Stat.of([float(v) for v in values])

    def drive_stats(self) -> list[tuple[str, str, Stat]]:
        """(name, role, flushes over the runs) of each drive every run has."""
        names: dict[tuple[str, str], list[float]] = {}
        for run in self.runs:
            for d in run.drives:
                names.setdefault((d.name, d.role), []).append(float(d.flushes))
        return [(name, role, Stat.of(v)) for (name, role), v in names.items() if len(v) == len(self.runs)]


def by_arch(rows: list[RunFlushes]) -> list[ArchFlushes]:
    """Rows grouped by (case, architecture), in the order the rows come."""
    groups: dict[tuple[str, str], list[RunFlushes]] = {}
    for row in rows:
        groups.setdefault((row.case, row.arch), []).append(row)
    out = []
    for (case, arch), runs in groups.items():
        modes = {r.durability for r in runs}
        out.append(ArchFlushes(case, arch, modes.pop() if len(modes) == 1 else "mixed", tuple(runs)))
    return out


def missing_counters(rows: list[RunFlushes], docs: list[dict[str, Any]] | None = None) -> list[str]:
    """What the run files do not hold, per architecture, in words (from the rows and, when
    given, the run documents' drive statistics)."""
    notes = []
    no_volume = sorted({r.arch for r in rows if r.volume_flushes is None})
    if no_volume:
        notes.append(f"the guest's flushes to the array: not recorded for {', '.join(no_volume)} (no FUSE "
                     "volume file in their status; the array runs in the guest, over the drive files)")
    if docs is not None:
        statuses = [doc.get("array_status") or {} for doc in docs]
        guest_counts = [counts for status in statuses for counts in (status.get("block_stat") or {}).values()]
        if guest_counts and not any("flush" in key for counts in guest_counts for key in counts):
            notes.append("the guest's own counters of the devices under the array (`block_stat`) hold "
                         f"{', '.join(sorted(guest_counts[0]))}: no flushes")
        keys = {key for status in statuses for _, drive in _drive_entries(status) for key in drive}
        if not any("fua" in key.lower() for key in keys):
            notes.append("FUA writes per drive: no drive statistic counts them apart from other writes")
        if not any("latency" in key.lower() for key in keys):
            lateness = (" (`flush_lateness` is the host's delay past the model's completion time, over "
                        "the drive's life)") if "flush_lateness" in keys else ""
            notes.append("flush latency per drive: not recorded" + lateness)
    for r in rows:
        for what in r.missing:
            notes.append(f"{Path(r.file).name}: {what}")
    return notes


@dataclasses.dataclass(frozen=True)
class ClaimColumn:
    arch: str
    case: str
    flushes: ArchFlushes | None


@dataclasses.dataclass(frozen=True)
class ClaimFlushes:
    """One claim in one of its cases: the flushes its compared columns' drives served."""

    claim_id: str
    case: str
    verdict: str
    measured: str
    columns: tuple[ClaimColumn, ...]

    @property
    def paid(self) -> list[float] | None:
        """Mean flushes reaching each column's drives per run; None when a column is missing."""
        out = []
        for col in self.columns:
            stat = col.flushes.stat("drive_flushes") if col.flushes else None
            if stat is None:
                return None
            out.append(stat.mean)
        return out

    def comparison(self) -> tuple[str, str] | None:
        """(DIFFER | ALIKE | FEW, a few words with the numbers); None for a single column or a
        missing one."""
        paid = self.paid
        if paid is None or len(paid) < 2:
            return None
        labels = [col.arch for col in self.columns]
        hi, lo = paid.index(max(paid)), paid.index(min(paid))
        if max(paid) == 0:
            return ALIKE, "none reached the drives"
        factor = "all of them" if paid[lo] == 0 else f"{paid[hi] / paid[lo]:.1f}x"
        shown = f"{labels[hi]} {_n(paid[hi])}, {labels[lo]} {_n(paid[lo])}"
        if paid[hi] <= DIFFER_FACTOR * paid[lo]:
            return ALIKE, f"{shown} ({factor})"
        if paid[hi] - paid[lo] < DIFFER_FLOOR:
            return FEW, f"{shown}: under {DIFFER_FLOOR} a run apart"
        return DIFFER, f"{shown} ({factor})"


def claim_rows(results: Results, rows: list[RunFlushes]) -> list[ClaimFlushes]:
    """Each claim of the scenario, each of its cases that ran: its compared columns' flushes
    and the claim's verdict on these runs (raidlab.report.claims)."""
    groups = {(g.case, g.arch): g for g in by_arch(rows)}
    stats = aggregate(results.ok_runs)
    planned = results.manifest.get("planned_runs")
    planned_cases = {r.split("--")[1] for r in planned if r.count("--") == 2} if planned else None
    ran = {r.case for r in rows}
    out = []
    for claim in results.scenario.claims:
        verdict = claimsmod.evaluate(claim, stats, planned_cases)
        for case in claim.cases:
            if case not in ran:
                continue
            if claim.kind == "order":
                wanted = [(label, case) for label in claim.order]
            elif claim.kind == "value":
                wanted = [(claim.arch, case)]
            else:
                wanted = [(claim.num, case), (claim.den, claim.den_case or case)]
            columns = tuple(ClaimColumn(label, where, groups.get((where, label))) for label, where in wanted)
            out.append(ClaimFlushes(claim.id, case, verdict.verdict, verdict.measured, columns))
    return out


# -- Markdown ----------------------------------------------------------------------------

def _n(x: float | None) -> str:
    if x is None:
        return "not recorded"
    return f"{x:,.0f}" if abs(x) >= 10 or float(x).is_integer() else f"{x:.1f}"


def _stat(stat: Stat | None, none: str = "not recorded") -> str:
    if stat is None:
        return none
    if stat.n == 1 or stat.min == stat.max:
        return _n(stat.mean)
    return f"{_n(stat.mean)} ({_n(stat.min)}..{_n(stat.max)})"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out + [""]


def _drive_cell(items: list[tuple[str, str, str]]) -> str:
    """'d0 25,024, d1 14,832; cache d4 0' from (name, role, value) triples."""
    members = [f"{n} {v}" for n, role, v in items if role == MEMBER]
    caches = [f"{n} {v}" for n, role, v in items if role == CACHE_DISK]
    return ", ".join(members) + (("; cache " + ", ".join(caches)) if caches else "")


def _column_text(col: ClaimColumn) -> str:
    g = col.flushes
    if g is None:
        return f"{col.arch}: no run"
    where = f" in {col.case}" if col.case else ""
    parts = [f"guest {_n(g.stat('volume_flushes').mean) if g.stat('volume_flushes') else 'not recorded'}",
             f"members {_n(g.stat('member_flushes').mean)}"]
    if any(r.has_cache_disks for r in g.runs):
        parts.append(f"cache disks {_n(g.stat('cache_flushes').mean)}")
    mode = f", {g.durability}" if g.durability else ""
    return f"{col.arch}{mode}{where}: " + ", ".join(parts)


def to_markdown(results: Results, rows: list[RunFlushes], *, title: str | None = None,
                per_run: bool = True) -> str:
    """The flush tables of one results set as Markdown (a `##` section)."""
    scn = results.scenario
    sources = results.sources or (results,)
    out = [f"## {title or scn.id}", ""]
    out.append(f"Scenario `{scn.id}`; run files from " + ", ".join(f"`{p.path}`" for p in sources)
               + (("; left out: " + ", ".join(f"`{f}`" for f in results.left_out)) if results.left_out else "")
               + f". {len(rows)} runs that succeeded. Counts are the workload's: each run's statistics "
               "after umount minus those before the workload; a cell is the mean over the runs with "
               "min..max.")
    out.append("")
    notes = missing_counters(rows, results.ok_runs)
    if notes:
        out += ["Not in the run files:", ""] + [f"- {n}" for n in notes] + [""]

    groups = by_arch(rows)
    for case in dict.fromkeys(g.case for g in groups):
        out += [f"### {scn.id}, case `{case}`", ""]
        table = []
        for g in (g for g in groups if g.case == case):
            caches = any(r.has_cache_disks for r in g.runs)
            table.append([
                g.arch, g.durability or "-", str(len(g.runs)),
                _stat(g.stat("volume_flushes")),
                _stat(g.stat("file_flushes"), "- (in-process)"),
                _stat(g.stat("member_flushes")),
                _stat(g.stat("cache_flushes")) if caches else "-",
                _drive_cell([(n, role, _n(s.mean)) for n, role, s in g.drive_stats()]),
                _stat(g.stat("member_writes")),
                _stat(g.stat("cache_writes")) if caches else "-",
                _stat(g.stat("log_writes"), "-"),
                _stat(g.stat("tombstones"), "-"),
            ])
        out += _table(["architecture", "durability", "runs", "guest flushes to the volume",
                       "guest flushes to the drive files (md, host side)", "flushes reaching members",
                       "flushes reaching cache disks", "flushes per drive (mean)", "member writes",
                       "cache-disk writes", "level-1 log writes", "tombstones"], table)

    claim_list = claim_rows(results, rows)
    if claim_list:
        out += [f"### {scn.id}: claims and the flushes their columns' drives served", ""]
        out.append(f"Per run (means): the guest's flushes to the volume, and the flushes that reached "
                   f"the members and cache disks. \"{DIFFER}\": one column's drives served more than "
                   f"{DIFFER_FACTOR:g}x the flushes of another's, and at least {DIFFER_FLOOR} more a run; "
                   f"\"{FEW}\": more than {DIFFER_FACTOR:g}x, but fewer than {DIFFER_FLOOR} a run apart.")
        out.append("")
        table = []
        for c in claim_list:
            found = c.comparison()
            table.append([c.claim_id, c.case, f"{c.verdict}: {c.measured}",
                          "; ".join(_column_text(col) for col in c.columns),
                          f"{found[0]}: {found[1]}" if found else "-"])
        out += _table(["claim", "case", "verdict on these runs", "compared columns: flushes per run",
                       "drives' flushes"], table)

    if per_run:
        out += [f"### {scn.id}: each run", ""]
        table = [[Path(r.file).parent.parent.name + "/" + Path(r.file).name, r.arch, r.case, str(r.repetition),
                  _n(r.volume_flushes), _n(r.file_flushes) if r.file_flushes is not None else "-",
                  _drive_cell([(d.name, d.role, _n(d.flushes)) for d in r.drives]),
                  _drive_cell([(d.name, d.role, _n(d.writes)) for d in r.drives])]
                 for r in rows]
        out += _table(["run file", "architecture", "case", "rep.", "guest flushes to the volume",
                       "guest flushes to the drive files", "flushes per drive", "writes per drive"], table)
    return "\n".join(out)
