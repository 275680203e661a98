"""docs/reliability.md: what raidlab's arrays survive, as measured by its campaigns, written
by one command (`raidlab reliability --write docs/reliability.md`).

Three campaigns feed it: the crash campaign (raidlab.campaigns.crash: the array's daemon killed
during an untar, with or without a power cut of its drives, recovery, fsck, every fsync'ed
file checked) over every preset, the
fault campaign (raidlab.campaigns.fault: a drive vanishes, fails its reads or writes, or turns
slow under fio --verify; rebuild under load; scrub) over every architecture with a live
array (FAULT_CELLS), and the interrupt campaign (raidlab.campaigns.interrupt). This module
turns their summaries into the document (pure); raidlab.cli.reliability runs them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from raidlab import archs
from raidlab.errors import UsageError
from raidlab.outputs import make_dirs, read_regular, remove_partials, write_whole

TITLE = "# Reliability: what raidlab's arrays survive"  # the document's first line (its marker)

# The fault campaign's cells: label -> (arch, members, options, the drive that goes bad), every
# architecture's (raidlab.archs.base.FaultCell), in the registry's order.
FAULT_CELLS: dict[str, tuple[str, int, dict[str, Any], int]] = {
    cell.name: (arch.name, cell.disks, dict(cell.options), cell.drive)
    for arch in archs.REGISTRY.values() for cell in arch.fault_cells or ()
}

NOT_YET = [
    "* Bad input (generated scenario files, trace lines, option values), damaged lab files (an",
    "  array's spec, a lab's state file) and generated damage to each on-disk format's decoder",
    "  are tests of the suite (tests/unit/test_bad_input.py, tests/live/test_damaged_state.py,",
    "  tests/unit/test_damaged_metadata*.py); ownership (no command writes a device or file",
    "  raidlab did not make) is tests/live/test_ownership.py, and who may do what on a shared",
    "  machine docs/security.md; none is counted here.",
]


def _options(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items()) or "-"


class CellStore:
    """Finished cells of a campaign kept as JSON files in one directory, so a run that was
    stopped (Ctrl-C, a machine's end of day) goes on where it stopped: a cell is taken from
    the store only when it was run by the same code (`revision`: raidlab.run.code_revision,
    the code's trees, so a commit of results or docs keeps the cells), without uncommitted
    changes to it, with the same parameters; otherwise it is run again and stored over the
    old one. The document then still names one code for every cell. The directory can be
    committed with the results, so a fresh clone resumes the campaign. The directory is the
    caller's and its cells are written and read as every results file is (raidlab.outputs):
    a cell file is replaced by a rename, never written through a link, and a link at its name
    is not read."""

    def __init__(self, directory: str | Path, *, revision: str | None, dirty: bool, params: dict[str, Any]):
        self.directory = Path(directory)
        make_dirs(self.directory, "the campaign's cell store")
        remove_partials(self.directory)
        self.revision = revision if not dirty else None   # a dirty tree's cells are never reused
        self.params = params

    def _path(self, key: str) -> Path:
        return self.directory / (re.sub(r"[^A-Za-z0-9_.-]", "_", key) + ".json")

    def load(self, key: str) -> dict[str, Any] | None:
        if self.revision is None:
            return None
        try:
            stored = json.loads(read_regular(self._path(key)))
        except (OSError, ValueError, UsageError):
            return None
        if stored.get("revision") != self.revision or stored.get("params") != self.params:
            return None
        return stored.get("summary")

    def save(self, key: str, summary: dict[str, Any]) -> None:
        doc = {"revision": self.revision, "params": self.params, "key": key, "summary": summary}
        text = json.dumps(doc, indent=1)
        write_whole(self._path(key), lambda partial: partial.write_text(text))


def crash_section(summaries: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Crash: the array's daemon killed, and the power cut",
        "",
        "Each point is one independent create, untar onto ext4 (every 4th file fsync'ed), SIGKILL",
        "of the array's daemon at a random moment (even points right after an fsync returned),",
        "assemble (crash recovery), journal replay, `e2fsck -fn`, and a check of every fsync'ed",
        "file (raidlab.campaigns.crash). The caching presets' caches are smaller than the untar, so",
        "level-2 destage runs during it, and every third of their points cuts inside one: the",
        "daemon kills itself between a destage's writes home and the flush after them (*in-destage",
        "cuts*). Mode *kill*: the member images keep every write that reached",
        "them. Mode *power*: the drives' write caches are volatile (an untimed drive holds up to",
        "4 MiB, written back oldest first), and at the kill every drive loses every write not",
        "made durable by a flush or FUA; *power-random*: each such write is lost or kept at",
        "random, on each drive apart (raidlab.disks.volatile). *Lost* counts fsync'ed files that",
        "came back different or unreadable; *writes cut* counts the drive writes the power cuts",
        "took (where a power cell cut none, the reason its points' own counts give follows);",
        "*leaks* counts loop devices, mounts and processes still naming the lab after the",
        "point was torn down, found without the lab's own records. md's levels run in the lab",
        "VM over the same drives (the untar, fsyncs and checks in the guest; the kill and the cut",
        "on this host), and an fsync the guest acknowledged after the host's last look at its",
        "log is not checked. Where md keeps a write journal, its image is read after the cut and",
        "before assembly as md's recovery reads it (raidlab.baselines.md_journal: the superblock's",
        "log tail, the records recovery walks from it, newer records it would not reach, and the",
        "walked pages recovery drops because a later flush payload says their stripe reached the",
        "members, with how many of those the members do not hold), and a failed point names what",
        "was found. md appends a stripe's flush payload once the stripe's member writes have",
        "completed and sends the members no flush first (drivers/md/raid5-cache.c,",
        "r5c_finish_stripe_write_out): with the members' write caches on, a cut can take a write",
        "that the journal already calls durable, and recovery then neither finds it on the member",
        "nor replays it from the log, against raid5-cache.rst's \"a power loss doesn't cause data",
        "loss\" for write-back mode. Points 0..P-1 of seed S replay with",
        "`raidlab crashtest TARGET --mode MODE --seed S --points P`.",
        "",
        "Each cell is held to its mode's promise (raidlab.campaigns.crash.PROMISES):",
        "",
        "* *flush*, today's world: every write a flush or FUA acknowledged survives, so every",
        "  fsync'ed file is intact and ext4 is clean, killed or cut;",
        "* *report*, under a power cut, the papers' world (drives that never get a flush or FUA,",
        "  `flushes=dropped`: the papers' Linux 2.0 sent none) and VC-RAID in durability `paper`:",
        "  an fsync returns once the drives reported the writes, which a drive with its write",
        "  cache on does from that cache. A kill keeps what the drives reported (their caches keep",
        "  power), so these targets under *kill* are held to *flush*; a power cut may take it.",
        "  fsync'ed files lost and an unclean ext4 are then losses the promise allows, counted",
        "  apart (*allowed*). An assembly refused as unclean (members whose superblock writes the",
        "  cut took disagree, which mdadm refuses to start) is retried with `assemble --force`,",
        "  the step an administrator takes, and counted apart (*forced*); so is a file system that",
        "  no longer mounts after recovery (the cut took journal or metadata writes the drives had",
        "  reported): `e2fsck -fy` repairs it, and the files it cost are allowed losses",
        "  (*unmountable*). A recovery that fails even so, a leak or a hang still fail the point.",
        "",
        "| target | mode | promise | arch | options | disks | points | passed | fsync'ed files checked | lost | lost, allowed | writes cut | in-destage cuts | fsck unclean | fsck unclean, allowed | forced | unmountable | errors | leaks | seed | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        cut = str(s.get("writes_lost_to_power_cuts", 0))
        if s.get("writes_cut_reason"):
            cut += f" ({s['writes_cut_reason']})"
        lines.append(f"| {s['target']} | {s.get('mode', 'kill')} | {s.get('promise', 'flush')} | {s['arch']} | "
                     f"{_options(s['options'])} | {s['disks']} | {s['points']} | {s['passed']} | "
                     f"{s['fsynced_files_checked']} | {s['fsynced_files_lost']} | "
                     f"{s.get('fsynced_files_lost_allowed', 0)} | {cut} | {s.get('in_destage_cuts', 0)} | "
                     f"{s['fsck_unclean']} | {s.get('fsck_unclean_allowed', 0)} | {s.get('forced', 0)} | "
                     f"{s.get('unmountable', 0)} | {s['errors']} | {s['leaks']} | {s['seed']} | {s['seconds']:.0f} |")
    lines += ["", f"{sum(s['passed'] for s in summaries)} of {sum(s['points'] for s in summaries)} points passed."]
    failed = [(s["target"], s.get("mode", "kill"), r) for s in summaries for r in s["results"] if not r["ok"]]
    if failed:
        lines += ["", "Failed points:", ""]
        for target, mode, r in failed:
            why = r["error"] or ("fsck not clean" if r["fsck_clean"] is False else
                                 f"lost {r['damaged'][:3]}" if r["damaged"] else f"left {r['leaks'][:3]}")
            lines.append(f"* {target} ({mode}) point {r['point']} (seed {r['seed']}, after file {r['kill_after_files']} "
                         f"+ {r['kill_delay_ms']} ms, {r['kill_moment']}): {why}"
                         + (f"; md's journal after the cut: {r['journal']['summary']}" if r.get("journal") else ""))
    return lines


def fault_section(summaries: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Faults: a drive goes bad under fio --verify",
        "",
        "Per cell and fault mode, one array (untimed 64 MiB members): fio writes and verifies a",
        "region; a second fio job writes and verifies another, and half a second in the drive",
        "vanishes (the array is told), fails its reads, fails its writes (the array finds out from",
        "its own requests), or turns 100x slow. Where the drive has a copy (a redundant layout's",
        "member, a TSS column, a VC-RAID raid5 member behind its RAM buffer and log, a side of",
        "VC-RAID's mirrored cache disk), a scrub reads every copy when fio did not meet the fault;",
        "the failed drive is replaced while a third fio job writes and verifies, the first two",
        "regions are read back, and a scrub counts mismatches. Where it has none (raid0, sa3, a",
        "DCD's data disk or cache disk, VC-RAID's unmirrored cache disk), a pass is the fault",
        "reaching fio as EIO (during the second job, in the read-back of the first two regions,",
        "or in a read of the whole volume), never as wrong data; the array then answers with its",
        "failed state. A cache that acknowledged writes from RAM (DCD's immediate report) loses",
        "them with its cache disk: they come back as EIO, not as old data (raidlab.campaigns.fault).",
        "Replay: `raidlab faulttest ARCH --disks N --disk K --mode MODE --seed S [-o ...]`.",
        "",
        "| cell | arch | disks | drive | mode | fio during the fault | drive failed | found by | rebuilt under load | read back | whole volume | mismatches | state after | leaks | verdict | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        for r in s["results"]:
            found = "-" if not r["member_failed"] else ("the scrub" if r["found_by_scrub"] else
                                                         "told" if r["mode"] == "vanish" else "fio's requests")
            during = "verified" if r["during_ok"] else f"error (errno {r['during_errno']})"
            reread = _yes(r["reread_ok"]) if r["reread_ok"] is not False or not r.get("reread_errno") else \
                f"errno {r['reread_errno']}"
            whole = "-" if r.get("read_errno") is None else ("read" if r["read_errno"] == 0 else f"errno {r['read_errno']}")
            verdict = "passed" if r["ok"] else "FAILED" + (f": {r['error']}" if r["error"] else
                                                          f": fio said {r['during_message'][-160:]!r}"
                                                          if r.get("during_message") else "")
            lines.append(f"| {s.get('cell', s['arch'])} | {s['arch']} | {s['disks']} | "
                         f"d{s.get('disk', 1)} ({s.get('role', 'member')}) | {r['mode']} | {during} | "
                         f"{'yes' if r['member_failed'] else 'no'} | {found} | "
                         f"{_yes(r['rebuilt'], r['rebuild_load_ok']) if r['rebuild_load_ok'] is not None else '-'} | "
                         f"{reread} | {whole} | {'-' if r['mismatches'] is None else r['mismatches']} | "
                         f"{r['state'] or '-'} | {len(r['leaks'])} | {verdict} | {r['seconds']:.0f} |")
    lines += ["", f"{sum(s['passed'] for s in summaries)} of {sum(s['modes'] for s in summaries)} fault runs passed."]
    return lines


def interrupt_section(summary: dict[str, Any]) -> list[str]:
    lines = [
        "## Interrupts: a signal at a random moment of a command",
        "",
        "Each point runs a command as a user would, with a RAIDLAB_HOME of its own, and sends",
        "SIGINT, SIGTERM or SIGKILL after a random delay within about the command's own duration",
        "(raidlab.campaigns.interrupt.DELAYS); after it ends, `raidlab destroy` and `raidlab lab cleanup`",
        "run for every lab it made (the remedy after a SIGKILL), and the host",
        "is searched without raidlab's records for loop devices, mounts and processes naming the",
        "home, and the labs for records still held. The commands: create",
        "(raid5, 3 x 32 MiB), destroy (of one just created), crashtest (raid5, one point), run",
        "(`scenarios/raidx-fig7-andrew-phases.toml --quick`, live), and report (of a copy of",
        "`results/raidx-fig7-andrew-phases`: every report file left must be byte for byte what an",
        "uninterrupted report writes, no partial file may stay, and after SIGKILL the report run",
        "again must be whole). *Interrupted* counts the points where the command was still",
        "running when the signal came.",
        "",
        "| command | signal | points | interrupted | passed | leaks | labs left holding | damaged files |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["rows"]:
        lines.append(f"| {row['command']} | {row['signal']} | {row['points']} | {row['interrupted']} | "
                     f"{row['passed']} | {row['leaks']} | {row['labs_left']} | {row.get('damaged_files', 0)} |")
    lines += ["", f"{summary['passed']} of {summary['points']} points passed (seed {summary['seed']})."]
    failed = [r for r in summary["results"] if not r["ok"]]
    if failed:
        lines += ["", "Failed points:", ""]
        lines += [f"* {r['command']} {r['signal']} after {r['delay_s']} s: "
                  f"{r['error'] or r['leaks'][:3] or r['labs_left'] or r.get('damage', [])[:3]}" for r in failed]
    return lines


def writehole_section(summary: dict[str, Any]) -> list[str]:
    lines = [
        "## The RAID 5 write hole: a power cut on a degraded array",
        "",
        "Each trial is a live raid5 of four drives with volatile write caches: random data over",
        f"64 stripes, fsync, member 1 fails, one 4 KiB O_DIRECT write without fsync into each of {summary['stripes']}",
        "random stripes, a power cut that loses or keeps each unflushed drive write at random",
        "(each drive apart), assemble, and every written stripe read back (raidlab.campaigns.writehole).",
        "The engine's raid5 runs on this host, md's in the lab VM over the same emulated drives.",
        "*Refused* counts assemblies that would not start the dirty degraded array without",
        "`--force` (md: \"not enough devices to start the array while not clean\"; the engine",
        "refuses it the same way); the trial then goes on forced. *Stripes wrong* counts written",
        "stripes whose unwritten bytes came back changed: member 1's chunk computed from new data",
        "and old parity, or the reverse. *Replayed* counts what the write journal wrote again at",
        "assembly (the engine: records; md: stripes, from its kernel log). VC-RAID's log does not",
        "close the hole of its raid5: tests/unit/test_volatile_cache.py shows a destage cut before",
        "its member flush (virtual time).",
        "",
        "| case | runner | options | trials | stripes written | drive writes cut | refused | stripes wrong | "
        "written blocks garbled | replayed | errors | leaks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["rows"]:
        lines.append(f"| {row['case']} | {row['runner']} | {_options(row['options'])} | {row['trials']} | "
                     f"{row['stripes_written']} | {row['writes_lost']} | {row['refused']} | {row['stripes_wrong']} | "
                     f"{row['writes_garbled']} | {row['replayed']} | {row['errors']} | {row['leaks']} |")
    lines += ["", f"Seed {summary['seed']}; trial k of a case replays as seed {summary['seed']} x 1000 + k."]
    return lines


def _yes(value: bool | None, also: bool | None = True) -> str:
    if value is None:
        return "-"
    return "yes" if value and also else "no"


def damage_section(summaries: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Damaged metadata: a drive's state damaged, then assemble",
        "",
        "Each trial is one new array (raidlab.campaigns.damage): a seeded pattern written over the",
        "whole volume, the array stopped (cleanly, or on every other six trials by SIGKILL, so the",
        "caches' logs hold the data), one drive's metadata damaged (the bytes before a data drive's",
        "data offset: superblock slots and reserved area; a cache disk or TSS's log drive whole),",
        "`assemble`, and the whole volume read back. Kinds of damage in turn: *flip* 1-8 bits,",
        "*zero* a 4 KiB sector, *torn* its second half zeroed, *stale* the region as right after",
        "create, *foreign* the region from another array, *swap* two data drives exchanged. A",
        "trial passes when assemble refuses in one line (*refused*) or every byte reads back as",
        "written (*recovered*); *wrong* (assembled, and a byte differs or a read fails) and",
        "*errors* (a traceback, a timeout) fail it. Trials 0..T-1 of seed S replay with",
        "`raidlab damagetest TARGET --trials T --seed S`.",
        "",
        "| target | arch | options | trials | passed | refused | recovered | wrong | errors | leaks | seed | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        lines.append(f"| {s['target']} | {s['arch']} | {_options(s['options'])} | {s['trials']} | {s['passed']} | "
                     f"{s['refused']} | {s['recovered']} | {s['wrong']} | {s['errors']} | {s['leaks']} | "
                     f"{s['seed']} | {s['seconds']:.0f} |")
    lines += ["", f"{sum(s['passed'] for s in summaries)} of {sum(s['trials'] for s in summaries)} trials passed, "
                  f"{sum(s['wrong'] for s in summaries)} read back wrong."]
    failed = [(s["target"], r) for s in summaries for r in s["results"] if not r["ok"]]
    if failed:
        lines += ["", "Failed trials:", ""]
        for target, r in failed:
            lines.append(f"* {target} trial {r['trial']} (seed {r['seed']}, {r['kind']} on {r['drive']}, {r['stop']} "
                         f"stop): {r['outcome']}: {r['message'] or r['leaks']}")
    return lines


def document(crash: list[dict[str, Any]], faults: list[dict[str, Any]], interrupts: dict[str, Any] | None, *,
             command: str, commit: str, when: str, writehole: dict[str, Any] | None = None,
             damage: list[dict[str, Any]] | None = None) -> str:
    lines = [TITLE, "",
             f"Generated by `{command}` at {commit}, {when}; do not edit by hand, run the command again.", ""]
    if crash:
        lines += crash_section(crash) + [""]
    if writehole:
        lines += writehole_section(writehole) + [""]
    if faults:
        lines += fault_section(faults) + [""]
    if damage:
        lines += damage_section(damage) + [""]
    if interrupts:
        lines += interrupt_section(interrupts) + [""]
    lines += ["## Not in this document yet", "", *NOT_YET, ""]
    return "\n".join(lines)


__all__ = ["FAULT_CELLS", "TITLE", "CellStore", "crash_section", "damage_section", "document", "fault_section",
           "interrupt_section", "writehole_section"]
