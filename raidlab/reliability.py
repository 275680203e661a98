"""docs/reliability.md: what raidlab's arrays survive, as measured by its campaigns, written
by one command (`raidlab reliability --write docs/reliability.md`).

Two campaigns feed it: the crash campaign (raidlab.crashtest: the array's daemon killed
during an untar, recovery, fsck, every fsync'ed file checked) over every preset, and the
fault campaign (raidlab.faulttest: a member vanishes, fails its reads or writes, or turns
slow under fio --verify; rebuild under load; scrub) over the engine's layouts. This module
turns their summaries into the document (pure); raidlab.cli.reliability runs them.
"""

from __future__ import annotations

from typing import Any

TITLE = "# Reliability: what raidlab's arrays survive"  # the document's first line (its marker)

# The fault campaign's layouts: (members, options). VC-RAID's faults go into its raid5's
# member 1, behind the RAM buffer and the log (the crash presets' small cache).
FAULT_ARCHS = {"raid1": (2, {}), "raid5": (4, {}), "raid10": (4, {}), "chained": (4, {}), "raidx": (4, {}),
               "vcraid": (4, {"config": "scd", "cache_size": "8M", "ram_buffer": "1M"}), "raid0": (4, {}),
               "sa3": (4, {})}

NOT_YET = [
    "* Faults in TSS's columns, DCD's drives and VC-RAID's cache disks: `raidlab fail` fails",
    "  them whole (tested in the suite), but the partial faults (read-eio, write-eio, slow) and",
    "  this campaign cover the engine's layouts and VC-RAID's raid5 members only.",
    "* Interrupts of `report`: it holds no kernel object, so there is nothing for a signal to",
    "  leave behind but a half-written file.",
    "* Power loss (drives losing their volatile write caches): the crash above keeps every write",
    "  that reached a member image.",
    "* Bad input (generated scenario files, trace lines, option values) and damaged state (a",
    "  member's superblock, an array's spec, a lab's state file) are tests of the suite",
    "  (tests/unit/test_bad_input.py, tests/live/test_damaged_state.py), and ownership (no",
    "  command writes a device or file raidlab did not make) is tests/live/test_ownership.py;",
    "  none is counted here.",
]


def _options(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items()) or "-"


def crash_section(summaries: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Crash: the array's daemon killed",
        "",
        "Each point is one independent create, untar onto ext4 (every 4th file fsync'ed), SIGKILL",
        "of the array's daemon at a random moment (even points right after an fsync returned),",
        "assemble (crash recovery), journal replay, `e2fsck -fn`, and a check of every fsync'ed",
        "file (raidlab.crashtest). *Lost* counts fsync'ed files that came back different or",
        "unreadable; *leaks* counts loop devices, mounts and processes still naming the lab after",
        "the point was torn down, found without the lab's own records. Points 0..P-1 of seed S",
        "replay with `raidlab crashtest TARGET --seed S --points P`.",
        "",
        "| target | arch | options | disks | points | passed | fsync'ed files checked | lost | fsck unclean | errors | leaks | seed | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        lines.append(f"| {s['target']} | {s['arch']} | {_options(s['options'])} | {s['disks']} | {s['points']} | "
                     f"{s['passed']} | {s['fsynced_files_checked']} | {s['fsynced_files_lost']} | {s['fsck_unclean']} | "
                     f"{s['errors']} | {s['leaks']} | {s['seed']} | {s['seconds']:.0f} |")
    lines += ["", f"{sum(s['passed'] for s in summaries)} of {sum(s['points'] for s in summaries)} points passed."]
    failed = [(s["target"], r) for s in summaries for r in s["results"] if not r["ok"]]
    if failed:
        lines += ["", "Failed points:", ""]
        for target, r in failed:
            why = r["error"] or ("fsck not clean" if r["fsck_clean"] is False else
                                 f"lost {r['damaged'][:3]}" if r["damaged"] else f"left {r['leaks'][:3]}")
            lines.append(f"* {target} point {r['point']} (seed {r['seed']}, after file {r['kill_after_files']} "
                         f"+ {r['kill_delay_ms']} ms, {r['kill_moment']}): {why}")
    return lines


def fault_section(summaries: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Faults: a member goes bad under fio --verify",
        "",
        "Per layout and fault mode, one array (untimed 64 MiB members; VC-RAID scd with the fault",
        "in a raid5 member behind its RAM buffer and log): fio writes and verifies a",
        "region; a second fio job writes and verifies another, and half a second in member 1",
        "vanishes (the array is told), fails its reads, fails its writes (the array finds out from",
        "its own requests), or turns 100x slow; a scrub reads every member when fio did not meet",
        "the fault; a failed member is replaced while a third fio job writes and verifies, the",
        "first two regions are read back, and a scrub counts mismatches (raidlab.faulttest).",
        "Without redundancy (raid0, sa3) a pass is the fault reaching fio as EIO, never as wrong",
        "data. Replay: `raidlab faulttest ARCH --disks N --mode MODE --seed S`.",
        "",
        "| arch | disks | mode | fio during the fault | member failed | found by | rebuilt under load | read back | mismatches | leaks | verdict | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        for r in s["results"]:
            found = "-" if not r["member_failed"] else ("the scrub" if r["found_by_scrub"] else
                                                         "told" if r["mode"] == "vanish" else "fio's requests")
            during = "verified" if r["during_ok"] else f"error (errno {r['during_errno']})"
            verdict = "passed" if r["ok"] else "FAILED" + (f": {r['error']}" if r["error"] else
                                                          f": fio said {r['during_message'][-160:]!r}"
                                                          if r.get("during_message") else "")
            lines.append(f"| {s['arch']} | {s['disks']} | {r['mode']} | {during} | {'yes' if r['member_failed'] else 'no'} | "
                         f"{found} | {_yes(r['rebuilt'], r['rebuild_load_ok']) if r['rebuild_load_ok'] is not None else '-'} | "
                         f"{_yes(r['reread_ok'])} | "
                         f"{'-' if r['mismatches'] is None else r['mismatches']} | {len(r['leaks'])} | {verdict} | "
                         f"{r['seconds']:.0f} |")
    lines += ["", f"{sum(s['passed'] for s in summaries)} of {sum(s['modes'] for s in summaries)} fault runs passed."]
    return lines


def interrupt_section(summary: dict[str, Any]) -> list[str]:
    lines = [
        "## Interrupts: a signal at a random moment of a command",
        "",
        "Each point runs a command as a user would, with a RAIDLAB_HOME of its own, and sends",
        "SIGINT, SIGTERM or SIGKILL after a random delay within about the command's own duration",
        "(raidlab.interrupttest.DELAYS); after it ends, `raidlab destroy` and `raidlab lab cleanup`",
        "run for every lab it made (the remedy after a SIGKILL), and the host",
        "is searched without raidlab's records for loop devices, mounts and processes naming the",
        "home, and the labs for records still held. The commands: create",
        "(raid5, 3 x 32 MiB), destroy (of one just created), crashtest (raid5, one point), and run",
        "(`scenarios/raidx-fig7-andrew-phases.toml --quick`, live). *Interrupted* counts the",
        "points where the command was still running when the signal came.",
        "",
        "| command | signal | points | interrupted | passed | leaks | labs left holding |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in summary["rows"]:
        lines.append(f"| {row['command']} | {row['signal']} | {row['points']} | {row['interrupted']} | "
                     f"{row['passed']} | {row['leaks']} | {row['labs_left']} |")
    lines += ["", f"{summary['passed']} of {summary['points']} points passed (seed {summary['seed']})."]
    failed = [r for r in summary["results"] if not r["ok"]]
    if failed:
        lines += ["", "Failed points:", ""]
        lines += [f"* {r['command']} {r['signal']} after {r['delay_s']} s: "
                  f"{r['error'] or r['leaks'][:3] or r['labs_left']}" for r in failed]
    return lines


def _yes(value: bool | None, also: bool | None = True) -> str:
    if value is None:
        return "-"
    return "yes" if value and also else "no"


def document(crash: list[dict[str, Any]], faults: list[dict[str, Any]], interrupts: dict[str, Any] | None, *,
             command: str, commit: str, when: str) -> str:
    lines = [TITLE, "",
             f"Generated by `{command}` at {commit}, {when}; do not edit by hand, run the command again.", ""]
    if crash:
        lines += crash_section(crash) + [""]
    if faults:
        lines += fault_section(faults) + [""]
    if interrupts:
        lines += interrupt_section(interrupts) + [""]
    lines += ["## Not in this document yet", "", *NOT_YET, ""]
    return "\n".join(lines)


__all__ = ["FAULT_ARCHS", "TITLE", "crash_section", "document", "fault_section", "interrupt_section"]
