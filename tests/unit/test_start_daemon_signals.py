"""A Ctrl-C or SIGTERM that reaches a starting command while Popen is still returning (the
daemon already exists) stops that daemon: the signal is held until the starter knows the
daemon's process, then raised, and the starter stops the daemon before it lets go."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from raidlab.lab import Lab
from raidlab.service import control

SLEEPER = "import time\ntime.sleep(120)\n"  # a daemon that never reports ready


def test_a_signal_while_the_daemon_is_spawned_stops_the_daemon(tmp_path, monkeypatch):
    (tmp_path / "sleeper_daemon.py").write_text(SLEEPER)
    lab = Lab("s", home=tmp_path / "home", create=True)
    spawned: list[int] = []
    real_popen = subprocess.Popen

    def popen_then_signal(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        spawned.append(proc.pid)
        os.kill(os.getpid(), signal.SIGINT)  # lands before Popen has returned to the starter
        return proc

    monkeypatch.setattr(control.subprocess, "Popen", popen_then_signal)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal
    try:
        with pytest.raises(KeyboardInterrupt):
            control.start_daemon(lab, "create", home=str(tmp_path / "home"), module="sleeper_daemon",
                                 env={"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])})
    finally:
        signal.signal(signal.SIGINT, old)
    assert len(spawned) == 1
    with pytest.raises(ChildProcessError):  # already reaped by the starter: stopped, not left running
        os.waitpid(spawned[0], os.WNOHANG)
    assert not os.path.exists(f"/proc/{spawned[0]}")
    assert lab.try_lock()  # and the lab is free again
