"""A lab: one directory, one FUSE mount, its loop devices, mounts and child processes (and a
cluster's network namespaces and links) -- and the guarantee that all of them are released.

Why it is built this way:

* Every kernel object the toolkit creates (FUSE mount, loop device, mount, child process)
  outlives a crashed Python process. So each one is written to the lab's state file
  (`state.json`, replaced atomically) *before* or right after it is created, and erased from
  it once released. What a SIGKILL leaves behind is therefore listed on disk, and
  `cleanup_stale` releases it: kill recorded processes (checked by start time, so a reused
  pid is never hit), unmount mounts on the lab's loop devices and under its directory,
  detach its loops, lazily unmount its dead FUSE mount. It also *scans* for what the record
  may have missed in the instant between creation and recording: loop devices whose
  backing file lies in the lab's mount, mounts under the lab directory, and processes whose
  environment carries this run's RAIDLAB_LAB_RUN token.
* A live run releases in reverse order of creation from a cleanup stack, inside trio and
  shielded from cancellation, so it runs on success, on an exception, and on SIGINT, SIGTERM
  and SIGHUP (received with trio.open_signal_receiver, which turns them into a cancellation
  of the lab's work instead of an exception at an arbitrary point). The FUSE server keeps
  serving during the release: detaching a loop device flushes through it.
* A lab directory is owned by one process at a time: an flock on `lock`, which the kernel
  drops when the owner dies however it dies. A lab whose lock is free but whose state file
  still lists resources was left by a killed run; the next run (or `raidlab lab cleanup`)
  releases it first.
* Test hooks (documented, read from the environment): RAIDLAB_FAIL_AT=<point> raises a
  LabError at that set-up point; RAIDLAB_PAUSE_AT=<point> prints "raidlab: paused at
  <point>" on stderr and waits there (until a signal), so a test can interrupt at an exact
  point. Points: images-created, fuse-mounted, loop-attached, loops-attached,
  command-started.

Modules, bottom to top: `proc` (processes as /proc shows them), `state` (the lab
directory, its state file and lock), `fuse_control` (a FUSE mount's connection in the fuse
control file system, and aborting it), `cleanup` (releasing loops, mounts and processes;
the stale cleanup), `session` (the lab run by this process: `open_lab`). The package sits
below the export layer, which uses it, and imports only raidlab.errors, raidlab.tools and
the standard library (and trio).

Layout: $RAIDLAB_HOME/labs/NAME (RAIDLAB_HOME defaults to ~/.local/state/raidlab; every
directory the caller's alone, 0700: raidlab.lab.private):
    lock, state.json, control.sock, images/dK.img, mnt/ (the FUSE mount), fusectl/ (a
    moment's mount)
"""

from raidlab.lab.cleanup import (StaleReport, cleanup_lab, cleanup_stale, detach_loops_under, held_under,
                                 kill_tagged_processes, list_labs, release_fuse_mount,
                                 release_link, release_netns, unmount_users_of)
from raidlab.lab.private import create_private, private_dir, write_private
from raidlab.lab.proc import process_cpu, process_start_time, same_process
from raidlab.lab.state import RUN_TOKEN_ENV, Lab, Resource, check_lab_name, labs_dir, raidlab_home

# The session (open_lab and its helpers) runs on trio; it is imported on first use, so that a
# command that only reads a lab's state or talks to its daemon (`raidlab status`, `list`,
# `destroy`) does not load trio (a tenth of a second of processor time per command).
_SESSION_NAMES = frozenset({"FAIL_AT_ENV", "PAUSE_AT_ENV", "SET_UP_POINTS", "LabSession", "ServerProcess",
                            "open_lab"})


def __getattr__(name: str):
    if name in _SESSION_NAMES:
        from raidlab.lab import session

        return getattr(session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "FAIL_AT_ENV", "PAUSE_AT_ENV", "RUN_TOKEN_ENV", "SET_UP_POINTS", "Lab", "LabSession",
    "Resource", "ServerProcess", "StaleReport", "check_lab_name", "cleanup_lab", "cleanup_stale", "create_private",
    "detach_loops_under", "held_under", "kill_tagged_processes", "labs_dir", "list_labs", "open_lab",
    "private_dir", "process_cpu", "process_start_time", "raidlab_home", "release_fuse_mount",
    "release_link", "release_netns", "same_process", "unmount_users_of", "write_private",
]
