"""`raidlab top` driven in tmux, as a student runs it: a live array under fio, the screen
refreshed with each member's reads and writes per second and the array's stripe writes by
method; `q` leaves it, and so does the array going away (destroyed while top watches)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time

import pytest

from lab_leftovers import leftovers

pytestmark = [pytest.mark.root, pytest.mark.live]


def _pane(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True,
                          check=True).stdout


def _wait_for(session: str, pattern: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = _pane(session)
        if re.search(pattern, text, re.M):
            return text
        time.sleep(0.3)
    raise AssertionError(f"{pattern!r} never showed; the screen:\n{_pane(session)}")


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        pytest.skip("tmux not installed (apt-get install tmux)")
    sessions: list[str] = []
    yield sessions
    for session in sessions:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_top_shows_a_live_array_under_fio_and_leaves_on_q_or_when_the_array_goes(raidlab_cmd, tmp_path, tmux):
    if shutil.which("fio") is None:
        pytest.skip("fio not installed (apt-get install fio)")
    home = tmp_path / "home"
    env = {**os.environ, "RAIDLAB_HOME": str(home)}

    def rl(*args):
        return subprocess.run([*raidlab_cmd, *args], capture_output=True, text=True, env=env, timeout=300, check=True)

    ready = json.loads(rl("create", "tp", "--arch", "raid5", "--disks", "4", "--disk-size", "32M", "--json").stdout)
    fio = subprocess.Popen(["fio", "--name=w", f"--filename={ready['device']}", "--rw=randwrite", "--bs=4k",
                            "--direct=1", "--time_based", "--runtime=60", "--iodepth=4", "--ioengine=libaio",
                            "--size=64M"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    top = f"RAIDLAB_HOME={shlex.quote(str(home))} {shlex.join([*raidlab_cmd, 'top', 'tp'])}; echo TOP-EXITED rc=$?; sleep 60"
    try:
        tmux.append("raidlab-top-1")
        subprocess.run(["tmux", "new-session", "-d", "-s", tmux[-1], "-x", "150", "-y", "30", top], check=True)
        screen = _wait_for(tmux[-1], r"^member 3 .* [1-9]\d* +4\.0 *$")
        for member in range(4):
            row = re.search(rf"^member {member} +(\S+) +(\d+) +(\d+) +(\d+) +(\S+) +(\d+) +(\S+)", screen, re.M)
            assert row and int(row.group(6)) > 0 and row.group(7) == "4.0", screen  # 4 KiB writes each second
        assert re.search(r"^array: full-stripe \d+/s, RMW \d+/s, RCW [1-9]\d*/s", screen, re.M), screen
        subprocess.run(["tmux", "send-keys", "-t", tmux[-1], "q"], check=True)
        _wait_for(tmux[-1], r"TOP-EXITED rc=0")

        tmux.append("raidlab-top-2")
        subprocess.run(["tmux", "new-session", "-d", "-s", tmux[-1], "-x", "150", "-y", "30", top], check=True)
        _wait_for(tmux[-1], r"^member 0 ")
        fio.kill()
        fio.wait()
        rl("destroy", "tp")
        screen = _wait_for(tmux[-1], r"TOP-EXITED rc=0")
        assert "tp is gone" in screen
    finally:
        if fio.poll() is None:
            fio.kill()
            fio.wait()
        subprocess.run([*raidlab_cmd, "destroy", "tp"], capture_output=True, env=env)
    assert leftovers(home / "labs" / "tp", "tp") == {}
