"""One error hierarchy for everything a user can get wrong or lack.

Why: the CLI turns any RaidlabError into one line on stderr and exit code 2, without a
traceback (stratis-cli's habit). Each error carries structured fields so tests and JSON
output can check *what* went wrong, not just the wording, and each message says what to do.

Invariant: a RaidlabError is raised only after the toolkit has released what it set up for
the failing operation (or will release it in an enclosing cleanup stack before exiting).
Anything that is *not* a RaidlabError is a bug in raidlab and keeps its traceback.
"""

from __future__ import annotations


class RaidlabError(Exception):
    """Base class: a problem the user can act on. `str(err)` is the one line shown."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None, **fields):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.fields = fields

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}; {self.hint}"
        return self.message


class UsageError(RaidlabError):
    """A bad value on the command line or in a file (size, model name, option combination)."""


class UnknownModelError(UsageError):
    """A disk model name that is not in the catalog. Fields: model, known."""


class MissingToolError(RaidlabError):
    """An external program is not installed. Fields: tool, package."""

    def __init__(self, tool: str, package: str | None = None):
        pkg = package or tool
        super().__init__(
            f"required program '{tool}' not found",
            hint=f"install it with: apt-get install {pkg}  (or run: make setup)",
            tool=tool,
            package=pkg,
        )


class NeedsRootError(RaidlabError):
    """A live operation (loop devices, mounts) attempted without root. Fields: operation.
    `needs` says what root is needed for, `hint` what to do instead (the defaults are an
    array's; a cluster needs root for its namespaces and links, with no unprivileged way)."""

    def __init__(self, operation: str, *, needs: str = "loop devices and mounts",
                 hint: str = "run it with sudo, or use --clock virtual / the lab VM runner"):
        super().__init__(f"{operation} needs root ({needs})", hint=hint, operation=operation)


class CapabilityError(RaidlabError):
    """The kernel lacks something (loop, FUSE, md). Fields: capability."""


class DeviceRefusedError(RaidlabError):
    """A real block device was refused because it carries data. Fields: device, signature."""


class ToolFailedError(RaidlabError):
    """An external program exited non-zero. Fields: argv, returncode, stderr."""

    def __init__(self, argv: list[str], returncode: int, stderr: str = ""):
        last = (stderr or "").strip().splitlines()
        detail = f": {last[-1]}" if last else ""
        super().__init__(
            f"command failed (exit {returncode}): {' '.join(argv)}{detail}",
            argv=list(argv),
            returncode=returncode,
            stderr=stderr,
        )


class WorkloadError(RaidlabError):
    """A workload program ran but did not do its work (postmark's "Error:" lines, files missing
    after untar, a TPS read that came back from the wrong place). Fields vary; see the driver."""


class LabError(RaidlabError):
    """A lab (FUSE mount, loop devices, engine process) could not be set up or found."""


class VMError(RaidlabError):
    """The lab VM could not be built, booted, or did not answer in time."""


class LabInterrupted(LabError):
    """A lab run stopped by a signal (SIGINT, SIGTERM, SIGHUP) after releasing everything.

    Fields: signal (its name). The exit code is the shell's convention, 128 + signal number.
    """

    def __init__(self, signum: int):
        import signal as _signal

        name = _signal.Signals(signum).name
        super().__init__(f"interrupted by {name}; every loop device, mount and process "
                         f"of the lab was released", signal=name)
        self.exit_code = 128 + signum


class Signalled(KeyboardInterrupt):
    """SIGTERM/SIGHUP during a long command: unwinds exactly like Ctrl-C (a KeyboardInterrupt, so code
    that stops a half-started daemon on Ctrl-C, e.g. control.start_daemon, does it here too).
    raidlab.signals turns the signals into it; the virtual clock's runner
    (raidlab.sched.run_virtual) has it raised after a run it cancelled."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """The exceptions inside trio's (nested) exception groups, in order; `exc` itself if it
    is not a group. The CLI and the daemon use it to find the one RaidlabError to print."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in leaf_exceptions(sub)]
    return [exc]
