"""`raidlab create` stopped while its array daemon starts: nothing of the array is left.

The daemon runs in a session of its own (a Ctrl-C at the terminal must not reach it), so
when `create` is stopped it must stop the daemon itself: SIGTERM and SIGHUP do what Ctrl-C
does. When `create` is killed (SIGKILL) it can do nothing: the daemon keeps the lab's lock,
which `create` handed it, and stops by itself once it finds nobody waits for it; a `destroy`
run meanwhile waits for it instead of deleting the lab under it.

Each test signals `create` at the moment its daemon process exists, the window in which
the daemon has not yet taken over the lab.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from raidlab.lab import held_under

pytestmark = [pytest.mark.live, pytest.mark.root]

CREATE = ["create", "i", "--arch", "raid5", "--disks", "3", "--disk-size", "32M"]


def _daemon_of(home: Path) -> int | None:
    """The pid of an array daemon started for `home`, if one runs."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"raidlab.service.daemon" in cmdline and any(str(home).encode() in arg for arg in cmdline):
            return int(entry)
    return None


def _start_create(raidlab_cmd, home: Path, preexec_fn=None) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "RAIDLAB_HOME": str(home)}
    proc = subprocess.Popen([*raidlab_cmd, *CREATE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=preexec_fn)
    deadline = time.monotonic() + 60
    while (pid := _daemon_of(home)) is None:
        assert proc.poll() is None, f"create ended before its daemon was seen: {proc.communicate()}"
        assert time.monotonic() < deadline, "no daemon within 60 s"
        time.sleep(0.005)
    return proc, pid


def _killed_create(raidlab_cmd, tmp_path: Path) -> Path:
    """SIGKILL a create the moment its daemon exists; its RAIDLAB_HOME."""
    home = tmp_path / "home"
    proc, _daemon = _start_create(raidlab_cmd, home)
    proc.kill()
    proc.wait()
    return home


def _nothing_left(home: Path, timeout: float = 0.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (held := held_under(home)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return held


def _rl(raidlab_cmd, home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*raidlab_cmd, *args], env={**os.environ, "RAIDLAB_HOME": str(home)},
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stopped_create_stops_its_daemon_and_removes_the_array(raidlab_cmd, tmp_path, signum, terminal_sigint):
    home = tmp_path / "home"
    proc, _daemon = _start_create(raidlab_cmd, home, terminal_sigint)
    proc.send_signal(signum)
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signum, err
    assert "interrupted" in err and "Traceback" not in err
    assert _nothing_left(home) == []  # create returns only after its daemon is gone
    assert not (home / "labs" / "i").exists()


def test_destroy_right_after_a_killed_create_waits_for_the_daemon_and_stops_it(raidlab_cmd, tmp_path):
    home = _killed_create(raidlab_cmd, tmp_path)
    done = _rl(raidlab_cmd, home, "destroy", "i")
    assert done.returncode == 0, done.stderr
    assert _nothing_left(home) == []
    assert not (home / "labs" / "i").exists()


def test_a_killed_create_leaves_a_daemon_that_stops_by_itself(raidlab_cmd, tmp_path):
    home = _killed_create(raidlab_cmd, tmp_path)
    assert _nothing_left(home, timeout=120) == []  # it found nobody waiting for it and released all
    log = (home / "labs" / "i" / "daemon.log").read_text()
    assert "the raidlab command that started this daemon is gone" in log
    cleanup = _rl(raidlab_cmd, home, "lab", "cleanup", "i")  # the user's remedy after a SIGKILL
    assert cleanup.returncode == 0, cleanup.stderr
    done = _rl(raidlab_cmd, home, "destroy", "i")
    assert done.returncode == 0, done.stderr
    assert _nothing_left(home) == [] and not (home / "labs" / "i").exists()
