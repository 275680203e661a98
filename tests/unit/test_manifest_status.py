"""A report believes a manifest's "running" only while the process that wrote it runs.

A run that is SIGKILLed cannot close its manifest, which keeps "running"; the report must not
print that as if the run went on.
Real processes stand in for the writer: a live one, one that has exited, and a live one whose
start time is not the recorded one (the pid reused by another process).
"""

from __future__ import annotations

import subprocess
import sys

from raidlab.lab import process_start_time
from raidlab.lab.proc import boot_id
from raidlab.run import manifest_status

NOT_FINISHED = "not finished (the run stopped without closing its manifest, e.g. killed)"


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _writer(pid: int, *, started: int | None, boot: str | None = None) -> dict:
    return {"status": "running", "pid": pid, "pid_start_time": started, "boot_id": boot or boot_id()}


def test_closed_statuses_are_shown_as_written():
    for status in ("complete", "interrupted", "stopped: missing program"):
        assert manifest_status({"status": status, "pid": 1}) == status


def test_running_while_its_process_lives():
    proc = _sleeper()
    started = process_start_time(proc.pid)
    try:
        assert manifest_status(_writer(proc.pid, started=started)) == f"running (pid {proc.pid})"
        # the same pid after a reboot is someone else
        assert manifest_status(_writer(proc.pid, started=started, boot="another-boot")) == NOT_FINISHED
    finally:
        proc.kill()
        proc.wait()
    assert manifest_status(_writer(proc.pid, started=started)) == NOT_FINISHED


def test_a_pid_reused_by_another_process_is_not_the_run():
    proc = _sleeper()
    try:
        assert manifest_status(_writer(proc.pid, started=process_start_time(proc.pid) - 1)) == NOT_FINISHED
    finally:
        proc.kill()
        proc.wait()


def test_manifests_from_before_the_writer_was_recorded():
    assert manifest_status({"status": "running"}) == NOT_FINISHED
    assert manifest_status({"status": "running", "pid": 1, "boot_id": boot_id()}) == NOT_FINISHED
