"""Processes as /proc shows them: start times, CPU seconds, states, environments.

A pid alone does not name a process: pids are reused. A process is identified by its pid
and its start time (field 22 of /proc/<pid>/stat), which is what the lab records for every
child, so a release never signals a stranger that inherited the pid.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def _stat_fields(stat_text: str) -> list[str]:
    """The fields of /proc/<pid>/stat from field 3 (state) on: rest[k] is field k + 3 of proc(5).

    The command name (field 2) may contain spaces and parentheses: split after its last ')'.
    """
    return stat_text[stat_text.rindex(")") + 2:].split()


def parse_proc_stat_start_time(stat_text: str) -> int:
    """Field 22 (starttime, clock ticks since boot) of /proc/<pid>/stat (proc(5))."""
    return int(_stat_fields(stat_text)[19])


def process_start_time(pid: int) -> int | None:
    try:
        return parse_proc_stat_start_time(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def process_cpu(pid: int | None) -> dict[str, float] | None:
    """User and system CPU seconds of a running process, all its threads (fields 14 and 15
    of /proc/<pid>/stat); None if it is gone."""
    if pid is None:
        return None
    try:
        rest = _stat_fields(Path(f"/proc/{pid}/stat").read_text())
        user, system = int(rest[11]), int(rest[12])
    except (OSError, ValueError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return {"user_s": round(user / tick, 2), "system_s": round(system / tick, 2)}


def process_group(pid: int) -> int | None:
    """The process group (field 5 of /proc/<pid>/stat), None if no such pid."""
    try:
        return int(_stat_fields(Path(f"/proc/{pid}/stat").read_text())[2])
    except (OSError, ValueError, IndexError):
        return None


def process_state(pid: int) -> str | None:
    """The one-letter state of /proc/<pid>/stat (R, S, D, Z, ...), None if no such pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:][:1] or None


def same_process(pid: int, start_time: int | None) -> bool:
    """True if `pid` is alive (not a zombie) and is the process that had `start_time`.

    A zombie counts as gone: it holds no resources, and an orphan's zombie waits for the
    host's init to reap it, which may take its time.
    """
    now = process_start_time(pid)
    if now is None or (start_time is not None and now != start_time):
        return False
    return process_state(pid) != "Z"


def parse_environ(data: bytes) -> dict[str, str]:
    out = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def processes_with_env(key: str, value: str) -> list[int]:
    """Pids (not ours) whose environment has key=value: a lab run's children and their
    descendants, even those that left the process group."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            env = parse_environ(Path(f"/proc/{entry}/environ").read_bytes())
        except OSError:
            continue
        if env.get(key) == value:
            found.append(int(entry))
    return found


def signal_group_or_pid(pid: int, pgid: int | None, sig: int) -> None:
    """Send `sig` to the process group `pgid` if given, else to `pid`; a process that is
    gone or not ours is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if pgid:
            os.killpg(pgid, sig)
        else:
            os.kill(pid, sig)


def boot_id() -> str | None:
    """This boot's id: a pid and start time are only comparable within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
