"""One planned run in a process of its own: `python -m raidlab.onerun`.

A scale-out worker (raidlab.scaleout) starts this for each run it is given, one run ahead
(the process imports raidlab, then waits for its run). The run reads
(run, scenario, runner, home) pickled on stdin, goes through raidlab.run.execute_run, and
writes the run file's document pickled on its own copy of the original stdout; whatever the
run prints on stdout goes to stderr, so nothing can corrupt the document.

Why a process per run rather than the worker's threads: a virtual-time run is pure Python,
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

    try:
        run, scenario, runner, home = pickle.load(sys.stdin.buffer)
    except EOFError:  # a spare whose worker closed before giving it a run
        return 0

    try:
        with terminate_as_interrupt():
            if scenario.kind == "live":  # what a run killed outright on this machine left
                for line in live.remove_abandoned_scratch_arrays(home):
                    print(line, file=sys.stderr)
            doc = execute_run(run, scenario, runner=runner, home=home)
    except Signalled as sig:
        return 128 + sig.signum
    with result:
        pickle.dump(doc, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
