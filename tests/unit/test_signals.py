"""SIGTERM and SIGHUP stop a raidlab command as Ctrl-C does (raidlab.signals), inside a trio
loop too, and the command knows which signal it was."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

PROGRAM = """
import signal, sys, time
import trio
from raidlab.signals import stop_signal, terminate_as_interrupt

async def waiting():
    print("ready", flush=True)
    await trio.sleep(60)

try:
    with terminate_as_interrupt():
        if sys.argv[1] == "trio":
            trio.run(waiting)
        else:
            print("ready", flush=True)
            time.sleep(60)
except KeyboardInterrupt as exc:
    print("stopped by", signal.Signals(stop_signal(exc)).name, type(exc).__name__, flush=True)
print("handlers back:", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, flush=True)
"""


@pytest.mark.parametrize("where", ["trio", "plain"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_unwinds_as_ctrl_c_and_is_named(where, signum, terminal_sigint):
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, where], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=terminal_sigint)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"stopped by {signal.Signals(signum).name} ")
    if where == "plain" and signum != signal.SIGINT:
        assert lines[0].endswith("Signalled")
    assert lines[1] == "handlers back: True"
    assert "Traceback" not in err
