"""Planned runs in a process of their own: `python -m raidlab.onerun`.

A scale-out worker (raidlab.scaleout) starts this one run ahead (the process imports
raidlab, then waits for its run). It reads (run, scenario, runner, home) pickled on stdin,
goes through raidlab.run.execute_run, and writes the run file's document pickled, after
its length (8 bytes, little-endian), on its own copy of the original stdout; whatever the
run prints on stdout goes to stderr, so nothing can corrupt the document. After a
virtual-time run it waits for the next run on stdin, as a `--jobs` pool's process does:
the imports (about half a second of CPU) are paid once per process, not once per run, which
on a machine whose cores are all running runs is time taken from them. After a live run, or
at the end of stdin, it ends.

Why processes rather than the worker's threads: a virtual-time run is pure Python,
so runs in threads of one process would share one core; a live run's cleanup wants the
main thread's signal handling (raidlab.signals); and a run in a process can be stopped
alone (SIGTERM, which unwinds like Ctrl-C: a live run destroys its array first) when its
task is cancelled or the worker closes. Before a live run it destroys the scratch arrays
that a run killed outright on this machine left, as `raidlab run` does before its loop. The
process ignores SIGINT (a Ctrl-C at the
worker's terminal reaches its whole process group; the worker stops its runs itself), and
stops itself the same way if the worker that started it dies (killed outright): its
parent changes, a thread notices within a second and sends it SIGTERM.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
import threading
import time

PARENT_POLL = 0.5  # seconds between two looks at the parent


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(PARENT_POLL)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)
            return


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    result = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    # Everything a run needs is imported before its run arrives: a worker starts this
    # process ahead of the run, so the run does not wait for the imports.
    from raidlab.errors import Signalled
    from raidlab.run import execute_run
    from raidlab.runners import live, sim  # noqa: F401 - imported ahead, as above
    from raidlab.signals import terminate_as_interrupt

    while True:
        try:
            run, scenario, runner, home = pickle.load(sys.stdin.buffer)
        except EOFError:  # the worker closed (or a spare never got a run)
            return 0
        try:
            with terminate_as_interrupt():
                if scenario.kind == "live":  # what a run killed outright on this machine left
                    for line in live.remove_abandoned_scratch_arrays(home):
                        print(line, file=sys.stderr)
                doc = execute_run(run, scenario, runner=runner, home=home)
        except Signalled as sig:
            return 128 + sig.signum
        payload = pickle.dumps(doc)
        result.write(struct.pack("<Q", len(payload)) + payload)
        result.flush()
        if scenario.kind == "live":
            return 0


if __name__ == "__main__":
    sys.exit(main())
