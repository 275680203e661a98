"""A report believes a manifest's "running" only while the raidlab process that wrote it runs.

Session 4's Fig. 8 run was SIGKILLed; its manifest kept "running" and the report printed that.
Real processes stand in for the writer: a live one whose command line names raidlab, and one
that has exited.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from raidlab.run import _boot_id, manifest_status

NOT_FINISHED = "not finished (the run stopped without closing its manifest, e.g. killed)"


def _started(argv: list[str]) -> subprocess.Popen:
    """A child whose /proc cmdline is readable (it reads empty for a moment after exec)."""
    proc = subprocess.Popen(argv)
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{proc.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc


def _writer(pid: int, boot: str | None = None) -> dict:
    return {"status": "running", "pid": pid, "boot_id": boot or _boot_id()}


def test_closed_statuses_are_shown_as_written():
    for status in ("complete", "interrupted", "stopped: missing program"):
        assert manifest_status({"status": status, "pid": 1}) == status


def test_running_while_its_raidlab_process_lives():
    proc = _started([sys.executable, "-c", "import time; time.sleep(60)", "raidlab", "run"])
    try:
        assert manifest_status(_writer(proc.pid)) == f"running (pid {proc.pid})"
        # the same pid after a reboot is someone else
        assert manifest_status(_writer(proc.pid, boot="another-boot")) == NOT_FINISHED
    finally:
        proc.kill()
        proc.wait()
    assert manifest_status(_writer(proc.pid)) == NOT_FINISHED


def test_a_pid_reused_by_another_program_is_not_the_run():
    proc = _started([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert manifest_status(_writer(proc.pid)) == NOT_FINISHED
    finally:
        proc.kill()
        proc.wait()


def test_manifests_from_before_the_pid_was_recorded():
    assert manifest_status({"status": "running"}) == NOT_FINISHED
