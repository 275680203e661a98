"""Runner sessions: run a workload's commands where the array lives, on the host or in the lab VM.

Why one small interface: a workload driver (tar/cp/rm, postmark, bonnie++,
fio, TPS) is written once against `RunnerSession` and must work unchanged whether the
array's block device is this host's /dev/loopN (native runner) or a virtio disk / md array
inside the lab VM (vm runner). The session therefore offers only what both places can do
exactly: run an argv with a timeout and get (rc, stdout, stderr, seconds) back, copy a file
in, copy a file out, and a scratch directory on a filesystem other than the array's.

* NativeSession: subprocess through raidlab.tools.base.run (a missing program is one line
  naming its package); a timeout kills the command.
* DaemonSession: the array daemon owns the lab VM (raidlab.vm.hosted), so the
  session sends the daemon's `exec`/`put`/`get` ops over its control socket. File contents
  do not travel inside the JSON (a 122 MB source tarball would be base64 in one line), nor
  do host paths: the session opens the files itself and passes the open descriptors with
  the request (raidlab.service.daemonbase), so the daemon reads and writes only what this
  process could. A command's stdout and stderr come back in two unnamed temporary files. The guest wraps each command in busybox
  `timeout -s KILL`, so a hung command is killed inside the VM and the VM stays usable;
  only if the guest itself stops answering does the daemon kill the VM.
* open_session(lab) reads the lab's runtime.json (written by the daemon when the array is
  ready) and picks the right one.

Exit codes: `check=True` raises ExecFailed (a ToolFailedError: argv, returncode, stderr);
a timeout raises ExecTimeout in both runners. Output is bytes; the native runner's output
passes through raidlab.tools.base.run, which decodes it as text (undecodable bytes become
U+FFFD), so binary stdout is not preserved natively -- workloads read text output and move
binary data with put/get.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from raidlab.errors import LabError, RaidlabError, ToolFailedError
from raidlab.service import control
from raidlab.service.spec import RUNTIME_FILE
from raidlab.tools.base import CommandResult, run
from raidlab.vm.protocol import GUEST_SCRATCH
from raidlab.workloads.base import RunnerSession


class ExecFailed(ToolFailedError):
    """A command run through a session exited non-zero (check=True)."""


class ExecTimeout(RaidlabError):
    """A command run through a session did not finish within its timeout and was killed."""


def _exec_failed(result: CommandResult) -> ExecFailed:
    return ExecFailed(result.argv, result.rc, result.stderr_text or result.stdout_text)


def _result(argv: list[str], rc: int, stdout: bytes, stderr: bytes, seconds: float,
            check: bool) -> CommandResult:
    result = CommandResult(argv, rc, stdout, stderr, seconds, failure=_exec_failed)
    return result.check() if check else result


SCRATCH_PREFIX = "raidlab-scratch-"  # a native session's own temp directory


class NativeSession:
    """Commands on this host. `scratch` defaults to a private temp directory (removed by close)."""

    runner = "native"

    def __init__(self, device: str, scratch: str | os.PathLike | None = None):
        self.device = device
        self._own_scratch = scratch is None
        self.scratch = str(scratch) if scratch is not None else tempfile.mkdtemp(prefix=SCRATCH_PREFIX)

    def exec(self, argv: list[str], *, timeout: float, stdin: bytes | None = None,
             check: bool = True) -> CommandResult:
        argv = [str(a) for a in argv]
        started = time.monotonic()
        try:
            proc = run(argv, check=False, input=stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ExecTimeout(f"command timed out after {timeout:g} s and was killed: "
                              f"{shlex.join(argv)[:200]}", argv=argv, timeout=timeout) from None
        return _result(argv, proc.returncode, proc.stdout.encode(), proc.stderr.encode(),
                       time.monotonic() - started, check)

    def put(self, local: Path, remote: str) -> None:
        remote_path = Path(remote)
        remote_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, remote_path)

    def get(self, remote: str, local: Path) -> None:
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(remote, local)

    def close(self) -> None:
        if self._own_scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> NativeSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()



class DaemonSession:
    """Commands in the lab VM that the array daemon of `lab` hosts (raidlab.vm.hosted)."""

    runner = "vm"

    def __init__(self, lab, device: str, scratch: str = GUEST_SCRATCH):
        self.lab = lab
        self.device = device
        self.scratch = scratch
        self._interrupted: KeyboardInterrupt | None = None

    def _request(self, op: str, wait: float | None, **fields):
        # Once a request was interrupted (Ctrl-C, or SIGTERM turned into KeyboardInterrupt),
        # its command still runs in the guest, which takes one command at a time: any later
        # request (a workload's cleanup in a `finally`, an umount) would wait for the whole
        # workload. Raise the same interrupt again instead; the array is destroyed next and
        # its daemon kills the VM (raidlab.vm.hosted).
        if self._interrupted is not None:
            raise self._interrupted
        try:
            # The socket waits a little longer than the daemon's own deadline, so the daemon's
            # answer (the precise error) normally arrives first.
            return control.request(self.lab, op, timeout=None if wait is None else wait + 120, **fields)
        except KeyboardInterrupt as exc:
            self._interrupted = exc
            raise

    def exec(self, argv: list[str], *, timeout: float, stdin: bytes | None = None,
             check: bool = True) -> CommandResult:
        argv = [str(a) for a in argv]
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
                tempfile.TemporaryFile() as given:
            fds = [out.fileno(), err.fileno()]
            if stdin is not None:
                given.write(stdin)
                given.flush()
                fds.append(given.fileno())
            reply = self._request("exec", timeout, argv=argv, command_timeout=timeout, stdin=stdin is not None,
                                  fds=fds)
            if reply.get("timed_out"):
                raise ExecTimeout(f"command in the lab VM timed out after {timeout:g} s and was killed: "
                                  f"{shlex.join(argv)[:200]}", argv=argv, timeout=timeout)
            out.seek(0)
            err.seek(0)
            return _result(argv, int(reply["rc"]), out.read(), err.read(), float(reply["seconds"]), check)

    def put(self, local: Path, remote: str) -> None:
        local = Path(local).absolute()
        try:
            fd = os.open(local, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise LabError(f"cannot open {local}: {exc.strerror}", hint="put copies one file into the lab VM") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise LabError(f"{local} is not a regular file", hint="put copies one file into the lab VM")
            self._request("put", _transfer_timeout(st.st_size), remote=remote, fds=[fd])
        finally:
            os.close(fd)

    def get(self, remote: str, local: Path) -> None:
        local = Path(local).absolute()
        local.parent.mkdir(parents=True, exist_ok=True)
        with open(local, "wb") as fh:
            self._request("get", None, remote=remote, fds=[fh.fileno()])


def _transfer_timeout(size: int) -> float:
    """Seconds allowed to move `size` bytes over the VM's command channel (measured ~20 MB/s
    under TCG; allow 2 MB/s plus a minute)."""
    return 60.0 + size / 2e6


def open_session(lab) -> RunnerSession:
    """The session for the running array of `lab` (a raidlab.lab.Lab), from its runtime.json."""
    try:
        runtime = json.loads((lab.path / RUNTIME_FILE).read_text())
    except FileNotFoundError:
        raise LabError(f"array {lab.name!r} is not running",
                       hint=f"start it with `raidlab create` or `raidlab assemble {lab.name}`") from None
    if runtime.get("runner") == "vm":
        if not runtime.get("guest_device"):
            raise LabError(f"array {lab.name!r} runs in the lab VM but its daemon recorded no guest device",
                           hint=f"see {lab.path / 'daemon.log'}")
        return DaemonSession(lab, runtime["guest_device"])
    device = runtime.get("device")
    if not device:
        raise LabError(f"array {lab.name!r} has no host block device", hint="it may run with --runner vm")
    return NativeSession(device)
