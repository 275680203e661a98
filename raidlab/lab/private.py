"""Private directories and files: where a lab's state lives, on a machine others share.

A lab holds what root's arrays are made of: member images with the bytes of every file
written to them, the state that cleanup trusts, the daemon's control socket. So:

* the home (RAIDLAB_HOME) defaults to a directory of the user's own that does not depend on
  where the command is typed: $XDG_STATE_HOME/raidlab, else ~/.local/state/raidlab;
* the home, its `labs` directory and every lab directory must be owned by the caller and
  not writable by anyone else, and so must be every directory above them unless it is
  root's or sticky (as /tmp is): otherwise another user could rename one away and put a
  directory of theirs, or links, in its place. A directory that fails this is refused,
  never used (`private_dir`). What raidlab creates there it creates 0700;
* files in a lab are written whole under a name nobody can guess beforehand, then renamed
  over the final name, 0600 (`write_private`, through raidlab.outputs.write_whole); files
  that must not exist yet are opened O_EXCL|O_NOFOLLOW (`create_private`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from raidlab.errors import UsageError
from raidlab.outputs import check_parents, write_whole

HOME_ENV = "RAIDLAB_HOME"


def default_home() -> Path:
    """The caller's own home for labs (module doc)."""
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "raidlab"


def raidlab_home() -> Path:
    """$RAIDLAB_HOME (absolute), else the caller's default home."""
    value = os.environ.get(HOME_ENV)
    return Path(value).absolute() if value else default_home()


def _refuse(path: Path, why: str) -> UsageError:
    return UsageError(f"{path} {why}; raidlab keeps labs only in directories private to their owner",
                      hint=f"choose another {HOME_ENV}, or remove or fix it yourself")


def check_ancestors(path: Path) -> None:
    """UsageError unless every directory above `path` is safe for it (module doc), checked
    as every output directory's parents are (raidlab.outputs.check_parents: root's, the
    caller's or the sudo caller's, and writable by no one else unless sticky)."""
    check_parents(path, HOME_ENV)


def private_dir(path: str | os.PathLike, *, create: bool = True, tighten: bool = True) -> Path:
    """`path` as a directory the caller alone controls (module doc), made 0700 (with its
    missing parents) if `create` and absent. An existing one must be a real directory (not
    a link), owned by the caller, not group- or world-writable; with `tighten` it is made
    0700 (a lab's own directories). UsageError otherwise."""
    path = Path(path)
    check_ancestors(path)
    if create:
        os.makedirs(path.parent, 0o700, exist_ok=True)
        check_ancestors(path)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise UsageError(f"cannot create {path}: {exc.strerror}",
                             hint=f"set {HOME_ENV} to a directory you can write to") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist") from None
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "is not a directory (a link, or a file)")
    if st.st_uid != os.geteuid():
        raise _refuse(path, f"belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})")
    if st.st_mode & 0o022:
        raise _refuse(path, "is writable by others")
    if tighten and stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def write_private(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write `data` as the whole of file `path`, 0600, as every file raidlab writes whole
    (raidlab.outputs.write_whole: a new file of a name nobody guesses, beside it, fsynced,
    then renamed over it)."""
    raw = data.encode() if isinstance(data, str) else data
    return write_whole(path, lambda partial: partial.write_bytes(raw), mode=0o600)


def create_private(path: str | os.PathLike, flags: int = os.O_WRONLY) -> int:
    """Open a new file `path` (0600) that must not exist yet, never through a link; its fd."""
    return os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


__all__ = ["HOME_ENV", "check_ancestors", "create_private", "default_home", "private_dir", "raidlab_home",
           "write_private"]
