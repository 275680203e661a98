"""Run external programs: locate, run, fail clearly.

Why one function: a missing program must become one actionable line (MissingToolError
names the Debian package), and a failed one a ToolFailedError with its argv, exit status
and last output line. Wrappers in this package call `run` and never `subprocess`
directly. What a result records of the commands a workload ran is the workload's own
record (raidlab.workloads.base.Commands, each command's argv, exit status and time).
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections.abc import Callable, Sequence

from raidlab.errors import MissingToolError, ToolFailedError

# Program -> Debian package that provides it (for install hints and `raidlab doctor`).
PACKAGES: dict[str, str] = {
    "losetup": "util-linux",
    "mount": "mount",
    "umount": "mount",
    "blkid": "util-linux",
    "wipefs": "util-linux",
    "fusermount3": "fuse3",
    "mkfs.ext4": "e2fsprogs",
    "e2fsck": "e2fsprogs",
    "mkfs.xfs": "xfsprogs",
    "mdadm": "mdadm",
    "dmsetup": "dmsetup",
    "make-bcache": "bcache-tools",
    "bcache-super-show": "bcache-tools",
    "fio": "fio",
    "bonnie++": "bonnie++",
    "bon_csv2html": "bonnie++",
    "postmark": "postmark",
    "nbdkit": "nbdkit",
    "nbdfuse": "libnbd-bin",
    "nbdinfo": "libnbd-bin",
    "ip": "iproute2",
    "tc": "iproute2",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "sysctl": "procps",
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "busybox": "busybox-static",
    "cpio": "cpio",
    "depmod": "kmod",
    "tar": "tar",
    "udevadm": "udev",
    "apt-get": "apt",
    "apt-cache": "apt",
    "dpkg-deb": "dpkg",
    "gcc": "gcc",
    "find": "findutils",
    "cp": "coreutils",
    "rm": "coreutils",
    "sync": "coreutils",
    "wc": "coreutils",
    "cat": "coreutils",
}


def _tool_failed(result: CommandResult) -> ToolFailedError:
    """The default error of a failed command: argv, exit status and the last output line."""
    return ToolFailedError(result.argv, result.rc, result.stderr_text or result.stdout_text)


@dataclasses.dataclass(frozen=True)
class CommandResult:
    """One finished command: its argv, exit status, output (bytes) and wall-clock seconds.

    One type wherever a command ran (this host, the lab VM's shell, a runner session), so a
    workload reads its results the same way natively and in the VM. Output stays bytes,
    because binary output from the VM arrives exact; stdout_text and stderr_text decode it.
    `rc` is spelt as in the result documents (`as_record`). `failure` builds the error that
    `check` raises on a non-zero exit: where the command ran decides how its failure reads
    (ToolFailedError by default; the lab VM's shell raises VMError, a runner session ExecFailed).
    """

    argv: list[str]
    rc: int
    stdout: bytes
    stderr: bytes
    seconds: float
    failure: Callable[[CommandResult], Exception] = dataclasses.field(
        default=_tool_failed, repr=False, compare=False)

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode(errors="replace")

    def as_record(self) -> dict:
        """The command's entry in a result document (raidlab.workloads.base)."""
        return {"argv": list(self.argv), "rc": self.rc, "seconds": round(self.seconds, 6)}

    def check(self) -> CommandResult:
        """This result if the command exited 0, else raise `failure(self)`."""
        if self.rc != 0:
            raise self.failure(self)
        return self


def which(program: str) -> str | None:
    found = shutil.which(program)
    if found is None:
        for d in ("/usr/sbin", "/sbin", "/usr/bin", "/bin"):
            cand = shutil.which(program, path=d)
            if cand:
                return cand
    return found


def require(program: str) -> str:
    """Return the path of `program` or raise MissingToolError naming its package."""
    path = which(program)
    if path is None:
        raise MissingToolError(program, PACKAGES.get(program))
    return path


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    input: bytes | str | None = None,
    timeout: float | None = None,
    capture: bool = True,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> subprocess.CompletedProcess:
    """Run a program (blocking). Output is captured as text unless capture=False."""
    argv = [str(a) for a in argv]
    exe = require(argv[0])
    proc = subprocess.run(
        [exe, *argv[1:]],
        input=input.encode() if isinstance(input, str) else input,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )
    out = proc.stdout.decode(errors="replace") if proc.stdout is not None else ""
    err = proc.stderr.decode(errors="replace") if proc.stderr is not None else ""
    result = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    if check and proc.returncode != 0:
        raise ToolFailedError(argv, proc.returncode, err or out)
    return result


def version_of(program: str, args: Sequence[str] = ("--version",)) -> str | None:
    """First line of `program --version` (or the given args), None if not installed."""
    path = which(program)
    if path is None:
        return None
    try:
        proc = subprocess.run([path, *args], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = (proc.stdout or proc.stderr).decode(errors="replace").strip()
    return text.splitlines()[0] if text else "unknown"
