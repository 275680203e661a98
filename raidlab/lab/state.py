"""A lab directory, its state file and its lock.

Every kernel object a run creates is written to the lab's state file (`state.json`,
replaced atomically: written to a temporary file, fsynced, renamed) before or right after
it is created, and erased from it once released, so what a killed run leaves behind is
listed on disk. A lab directory is owned by one process at a time: an flock on `lock`,
which the kernel drops when the owner dies however it dies.

Layout: $RAIDLAB_HOME/labs/NAME (RAIDLAB_HOME defaults to ~/.local/state/raidlab; every
directory the caller's alone, 0700: raidlab.lab.private):
    lock, state.json, control.sock, images/dK.img, mnt/ (the FUSE mount), fusectl/ (a
    moment's mount)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raidlab.errors import LabError, UsageError
from raidlab.lab.private import private_dir, raidlab_home, write_private
from raidlab.lab.proc import process_start_time

STATE_VERSION = 1
# The environment variable that tags every process of a run with the run's id.
RUN_TOKEN_ENV = "RAIDLAB_LAB_RUN"
LAB_DIR_ENV = "RAIDLAB_LAB_DIR"  # in every child a session starts: the lab directory it serves
LAB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# How long a child process group gets between SIGTERM and SIGKILL.
TERMINATE_GRACE_SECONDS = 5.0


def labs_dir(home: str | os.PathLike | None = None) -> Path:
    return (Path(home).absolute() if home is not None else raidlab_home()) / "labs"


def check_lab_name(name: str) -> str:
    if not LAB_NAME_RE.match(name):
        raise UsageError(f"bad lab name {name!r}",
                         hint="use letters, digits, '.', '_' or '-' (at most 64)")
    return name


@dataclass
class Resource:
    """One kernel object a lab created. kind: fuse_mount, loop, mount, process, image, and a
    cluster's network objects: link (a bridge or a veth pair), netns (a named namespace)."""

    id: int
    kind: str
    fields: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        f = self.fields
        if self.kind == "loop":
            return f"loop device {f.get('device')} ({f.get('backing_file')})"
        if self.kind == "fuse_mount":
            return f"FUSE mount {f.get('path')}"
        if self.kind == "mount":
            return f"mount {f.get('target')} ({f.get('source')})"
        if self.kind == "process":
            return f"process {f.get('pid')} ({' '.join(f.get('argv', []))[:60]})"
        if self.kind == "image":
            return f"image {f.get('path')}"
        if self.kind == "link":
            return f"{f.get('link_kind', 'link')} {f.get('name')}"
        if self.kind == "netns":
            return f"network namespace {f.get('name')}"
        return f"{self.kind} {f}"


class Lab:
    """A lab directory and its state file. Must find or may create the directory
    (`create=True`); does not lock it (see `owned`)."""

    def __init__(self, name: str, *, home: str | os.PathLike | None = None,
                 create: bool = False):
        self.name = check_lab_name(name)
        base = labs_dir(home)
        self.path = base / name
        if create:
            # The home, its labs directory and the lab's: the caller's alone (raidlab.lab.private).
            private_dir(base.parent, tighten=False)
            private_dir(base)
            private_dir(self.path)
        elif not self.path.is_dir():
            raise LabError(f"no lab named {name!r} in {base}",
                           hint="`raidlab lab list` shows the labs")
        else:
            private_dir(self.path, create=False)
        self._lock_fd: int | None = None
        self.run_id: str | None = None

    # paths
    @property
    def state_path(self) -> Path:
        return self.path / "state.json"

    @property
    def mountpoint(self) -> Path:
        return self.path / "mnt"

    @property
    def images_dir(self) -> Path:
        return self.path / "images"

    @property
    def fusectl_dir(self) -> Path:
        return self.path / "fusectl"

    # ownership
    @property
    def lock_fd(self) -> int:
        """The descriptor through which this object holds the lab's lock (to hand over)."""
        if self._lock_fd is None:
            raise LabError(f"lab {self.name!r} is not locked by this process")
        return self._lock_fd

    @property
    def holds_lock(self) -> bool:
        """True while this object holds the lab's lock."""
        return self._lock_fd is not None

    def try_lock(self) -> bool:
        fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def adopt_lock(self, fd: int) -> None:
        """Hold the lab's lock through `fd`, an inherited descriptor of the lock file on which
        the process that started this one holds the flock. The lock passes from starter to
        daemon without a moment unheld: flock belongs to the open file, which both share, so
        it stays held while either keeps it open (a starter killed mid-start leaves it with
        the daemon, and no other command sees the lab free meanwhile)."""
        try:
            mine, theirs = os.fstat(fd), os.stat(self.path / "lock")
        except OSError as exc:
            raise LabError(f"lab {self.name!r}: the handed-over lock (fd {fd}) is unusable: {exc}") from exc
        if (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino):
            raise LabError(f"lab {self.name!r}: fd {fd} is not its lock file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the open file holds it: succeeds
        except BlockingIOError:
            raise LabError(f"lab {self.name!r}: the handed-over lock is not held by its starter") from None
        os.set_inheritable(fd, False)
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    @contextlib.contextmanager
    def owned(self, *, lock_fd: int | None = None) -> Iterator[Lab]:
        """Hold the lab's lock; LabError if another live process holds it. With `lock_fd`,
        the lock handed over by the starting process (`adopt_lock`)."""
        if lock_fd is not None:
            self.adopt_lock(lock_fd)
        elif not self.try_lock():
            owner = self.read_state().get("owner", {}).get("pid")
            raise LabError(f"lab {self.name!r} is in use" + (f" by pid {owner}" if owner else ""),
                           hint="stop that run first, or choose another --name")
        try:
            yield self
        finally:
            self.unlock()

    def in_use(self) -> bool:
        if self.holds_lock:
            return True
        if self.try_lock():
            self.unlock()
            return False
        return True

    # state
    def read_state(self) -> dict[str, Any]:
        hint = ("its records are what cleanup releases: restore the file, or release by hand what "
                "`losetup -a` and /proc/mounts show under the lab, then remove its directory")
        try:
            state = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise LabError(f"unreadable lab state {self.state_path}: {exc}", hint=hint) from exc
        problem = _state_problem(state)
        if problem:
            raise LabError(f"damaged lab state {self.state_path}: {problem}", hint=hint)
        return state

    def resources(self) -> list[Resource]:
        return [Resource(r["id"], r["kind"], r.get("fields", {}))
                for r in self.read_state().get("resources", [])]

    def _write_state(self, state: dict[str, Any]) -> None:
        write_private(self.state_path, json.dumps(state, indent=1, sort_keys=True))

    def begin_run(self) -> None:
        self.run_id = uuid.uuid4().hex
        state = self.read_state()
        state.update({
            "version": STATE_VERSION, "name": self.name, "path": str(self.path),
            "owner": {"pid": os.getpid(), "start_time": process_start_time(os.getpid()),
                      "run_id": self.run_id, "argv": sys.argv, "started": time.time()},
        })
        state.setdefault("resources", [])
        state.setdefault("next_id", 1)
        self._write_state(state)

    def record(self, kind: str, **fields: Any) -> Resource:
        state = self.read_state()
        rid = state.get("next_id", 1)
        state["next_id"] = rid + 1
        state.setdefault("resources", []).append({"id": rid, "kind": kind, "fields": fields})
        self._write_state(state)
        return Resource(rid, kind, fields)

    def update(self, resource: Resource, **fields: Any) -> None:
        resource.fields.update(fields)
        state = self.read_state()
        for r in state.get("resources", []):
            if r["id"] == resource.id:
                r["fields"].update(fields)
        self._write_state(state)

    def forget(self, resource: Resource) -> None:
        state = self.read_state()
        state["resources"] = [r for r in state.get("resources", []) if r["id"] != resource.id]
        self._write_state(state)

    def end_run(self) -> None:
        """Mark a clean end: no owner, and (if everything was released) no resources."""
        state = self.read_state()
        state.pop("owner", None)
        self._write_state(state)


def _state_problem(state: Any) -> str | None:
    """Why `state` is not a lab state file's content, or None."""
    if not isinstance(state, dict):
        return "not a JSON object"
    resources = state.get("resources", [])
    if not isinstance(resources, list):
        return "'resources' is not a list"
    for r in resources:
        if (not isinstance(r, dict) or not isinstance(r.get("id"), int) or not isinstance(r.get("kind"), str)
                or not isinstance(r.get("fields", {}), dict)):
            return f"a resource record is malformed: {str(r)[:80]}"
    return None
