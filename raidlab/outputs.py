"""Where raidlab writes what a user names: paths that do not exist yet, or files raidlab wrote
itself before, in directories that belong to the caller. Nothing else is opened for writing.

Why: a mistyped output path must not destroy what raidlab did not make. `-o /dev/loop0` would
write a trace over a block device, and `-o disk.img` over an image some loop device serves.
So every output path a command takes is checked before anything is written:

* a file output (`writable_file`) may be a new path, or a regular file (not a link) that
  starts with the marker raidlab writes at the top of that kind of file (a trace's
  "raidlab-trace v1", the reliability matrix's title), so regenerating one works;
* a file raidlab has no marker for (`new_file`) must not exist;
* a directory output (`output_dir`) may be a new path or a directory (not a link) of the
  caller's (below); the files raidlab then writes inside it are file outputs of their own.

Devices, FIFOs, sockets and links are refused whatever they point at. Each refusal is one
line with the path and what to do (UsageError, exit 2).

Why the owner of a directory matters: raidlab runs as root on machines students share, and
an instructor may resume or report a results directory a student handed in. Whoever can
change the entries of a directory can put a link where root is about to write, or move a
directory root is writing into and leave a link in its place. So raidlab writes only into a
directory that belongs to its caller (root included: a student's directory is refused for
root too, with the advice to copy it first), whose parents all belong to the caller or to
root, and none of which lets another user rename its entries (writable by others without
the sticky bit; a group of the owner alone counts as the owner's). The directories it makes
are made one at a time with os.mkdir and checked with lstat afterwards (`make_dirs`), so none
is made through a link that someone else planted.

A file is written whole or not at all, and never through a link (`write_whole`): into a
partial file beside it that tempfile.mkstemp creates (O_EXCL with a random name, so nothing
planted in advance can be at that name and a link is never followed), fsync'ed, then renamed
over the final name (a rename replaces a link there instead of writing through it). An
interrupted command leaves the earlier file or none, never half of one. What a killed
writer's partial file leaves is removed by the next write into that directory
(`remove_partials`).

Files raidlab wrote itself are read back (`read_regular`) without following a link and only
when they are regular files of a sane size, so a link, FIFO or endless file planted at such a
name in a directory raidlab reads (a report's input) is refused instead of read.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from raidlab.errors import UsageError

_KINDS = {stat.S_IFBLK: "a block device", stat.S_IFCHR: "a character device", stat.S_IFIFO: "a FIFO",
          stat.S_IFSOCK: "a socket", stat.S_IFLNK: "a symbolic link", stat.S_IFDIR: "a directory",
          stat.S_IFREG: "a file"}


def _what(st: os.stat_result) -> str:
    return _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror}") from None


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _owner_s_own_group(st: os.stat_result) -> bool:
    """The directory's group is its owner's private group (the owner's primary group with
    no other member), so group write permission gives nobody else anything."""
    try:
        owner, group = pwd.getpwuid(st.st_uid), grp.getgrgid(st.st_gid)
    except KeyError:
        return False
    return owner.pw_gid == st.st_gid and set(group.gr_mem) <= {owner.pw_name}


def _others_may_rename(st: os.stat_result) -> bool:
    """Whether a user other than the directory's owner (and root) may rename or remove its
    entries: write permission for others or a foreign group, without the sticky bit."""
    if st.st_mode & stat.S_ISVTX:
        return False
    if st.st_mode & stat.S_IWOTH:
        return True
    return bool(st.st_mode & stat.S_IWGRP) and not _owner_s_own_group(st)


def trusted_uids() -> frozenset[int]:
    """The users whose directories the caller may write into or under: the caller and root,
    and under sudo the user who ran it (SUDO_UID, set by sudo in root's environment), so
    `sudo raidlab ...` works in that user's own checkout."""
    me = os.geteuid()
    uids = {me, 0}
    sudo = os.environ.get("SUDO_UID", "")
    if me == 0 and sudo.isdigit():
        uids.add(int(sudo))
    return frozenset(uids)


def _check_chain(directory: Path, option: str, asked: Path) -> None:
    """Every directory from / down to `directory` (an existing one), along the path as written
    and along the path it resolves to, and every link on the way: owned by the caller or
    root, and no directory lets another user rename its entries. UsageError otherwise."""
    trusted = trusted_uids()
    checked: set[Path] = set()
    for chain in (Path(os.path.abspath(directory)), Path(os.path.realpath(directory))):
        for part in [*reversed(chain.parents), chain]:
            if part in checked:
                continue
            checked.add(part)
            st = _lstat(part)
            if st is None:
                continue  # a lexical `..` through a link: the resolved chain is checked too
            if st.st_uid not in trusted:
                raise UsageError(f"{option} {asked}: {part} belongs to {_user(st.st_uid)}, who could replace "
                                 f"what raidlab writes there", hint="copy it to a directory of yours first")
            if stat.S_ISDIR(st.st_mode) and _others_may_rename(st):
                mode = stat.S_IMODE(st.st_mode)
                raise UsageError(f"{option} {asked}: {part} is writable by others (mode {mode:04o}, no sticky bit), "
                                 f"who could replace what raidlab writes there",
                                 hint="give a directory only you can change (chmod go-w), or copy it there first")


def owned_dir(path: str | os.PathLike, option: str) -> Path:
    """`path` if it is an existing directory (not a link) that belongs to the caller, in a
    chain of directories the caller can trust (module doc); UsageError otherwise."""
    path = Path(path)
    st = _lstat(path)
    if st is None:
        raise UsageError(f"{option} {path}: no such directory")
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{option} {path} is a symbolic link; raidlab writes only into the directory itself",
                         hint="give the directory it points to, if it is yours, or copy that directory first")
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{option} {path} is {_what(st)}, not a directory",
                         hint="give a directory, or a new path for one")
    if st.st_uid != os.geteuid() and st.st_uid not in trusted_uids() - {0}:
        raise UsageError(f"{option} {path} belongs to {_user(st.st_uid)}, not to you ({_user(os.geteuid())}); "
                         f"raidlab writes only into its caller's directories",
                         hint=f"copy it first (cp -r {path} COPY) and give the copy")
    _check_chain(path, option, path)
    return path


def check_parents(path: str | os.PathLike, what: str) -> None:
    """UsageError unless every directory above `path` that exists (and every link on the way)
    is the caller's or root's and lets no one else rename its entries (module doc): what a
    directory raidlab keeps private must sit under (raidlab.lab.private)."""
    path = Path(path)
    _check_chain(_existing_ancestor(path.parent), what, path)


def _existing_ancestor(path: Path) -> Path:
    probe = path
    while _lstat(probe) is None and probe != probe.parent:
        probe = probe.parent
    return probe


def writable_file(path: str | os.PathLike, option: str, *, marker: bytes) -> Path:
    """`path` if raidlab may write the file there (module doc); UsageError otherwise."""
    path = Path(path)
    st = _lstat(path)
    if st is None:
        return path
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{option} {path} is {_what(st)}; raidlab writes only files it creates",
                         hint="give a new file name")
    try:
        with open(path, "rb") as f:
            head = f.read(len(marker))
    except OSError as exc:
        raise UsageError(f"{option} {path}: {exc.strerror}") from None
    if head != marker:
        raise UsageError(f"{option} {path} exists and raidlab did not write it",
                         hint="give a new file name, or remove the file first")
    return path


def new_file(path: str | os.PathLike, option: str) -> Path:
    """`path` if nothing is there yet; UsageError otherwise."""
    path = Path(path)
    st = _lstat(path)
    if st is not None:
        raise UsageError(f"{option} {path} exists ({_what(st)}); raidlab writes only files it creates",
                         hint="give a new name, or remove it first")
    return path


def output_dir(path: str | os.PathLike, option: str) -> Path:
    """`path` if it is a directory of the caller's (`owned_dir`), or does not exist yet and
    would be made in a directory the caller can trust; UsageError otherwise."""
    path = Path(path)
    st = _lstat(path)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{option} {path} is {_what(st)}, not a directory",
                         hint="give a directory, or a new path for one")
    if st is not None:
        return owned_dir(path, option)
    _check_chain(_existing_ancestor(path), option, path)
    return path


def make_dirs(path: str | os.PathLike, option: str) -> Path:
    """Make directory `path` and its missing parents, one os.mkdir at a time, each checked
    with lstat to be a directory (not a link) of the caller's; the existing part must pass
    `output_dir`. Return `path`."""
    path = Path(path)
    output_dir(path, option)
    missing = []
    probe = path
    while _lstat(probe) is None and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory)
        except FileExistsError:
            pass  # made meanwhile by another process: checked below like one made here
        except OSError as exc:
            raise UsageError(f"{option} {directory}: {exc.strerror}") from None
        owned_dir(directory, option)
    return path


def new_stamped_dir(base: str | os.PathLike, option: str) -> Path:
    """A new directory <base>/<local time, YYYYmmdd-HHMMSS> (base made by `make_dirs`), or
    <time>-2, -3, ... when that name is taken (a second run in the same second); os.mkdir
    makes it, so a name that another process takes meanwhile is never shared. Checked as the
    caller's (`owned_dir`)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = make_dirs(base, option)
    out, n = base / stamp, 1
    while True:
        try:
            os.mkdir(out)
            break
        except FileExistsError:
            n += 1
            out = base / f"{stamp}-{n}"
        except OSError as exc:
            raise UsageError(f"{option} {out}: {exc.strerror}") from None
    return owned_dir(out, option)


def regular_or_absent(path: str | os.PathLike, option: str) -> Path:
    """A file raidlab writes by its own name inside an output directory (a report's
    report.md, its figures): refused only if something other than a regular file is there."""
    path = Path(path)
    st = _lstat(path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{option}: {path} is {_what(st)}; raidlab writes only regular files",
                         hint="remove it, or write the report elsewhere with --out")
    return path


READ_LIMIT = 256 << 20  # bytes: a results file is kilobytes; a larger one is not raidlab's


def read_regular(path: str | os.PathLike, *, limit: int = READ_LIMIT) -> bytes:
    """The bytes of a file raidlab wrote itself: opened without following a link at its name
    and without waiting on a FIFO, and only a regular file of at most `limit` bytes is read.
    UsageError for a link, another kind of file or a larger one; OSError as open raises it
    otherwise (FileNotFoundError for a missing file)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(f"{path} is a symbolic link; raidlab reads only the files it wrote there",
                             hint="remove the link, or copy the file it points to in its place") from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{path} is {_what(st)}; raidlab reads only the regular files it wrote",
                             hint="remove it")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UsageError(f"{path} is larger than anything raidlab writes there ({limit} bytes)", hint="remove it")
    return data


PARTIAL = ".raidlab-partial-"  # in the name of a file being written (write_whole)


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def write_whole(path: str | os.PathLike, write: Callable[[Path], object], *, mode: int | None = None) -> Path:
    """Call `write(partial)` to write the file's bytes into a partial file that mkstemp made
    in the same directory (hidden, a random name holding PARTIAL, its suffix kept: a figure's
    format follows it), fsync it, then rename it over `path` (module doc). The partial file
    gets `mode`, by default the mode a new file would (0666 less the umask) instead of
    mkstemp's 0600. A partial name that no longer names the file mkstemp made when `write`
    returns is refused, never renamed over `path`."""
    path = Path(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}{PARTIAL}", suffix=path.suffix)
    partial = Path(name)
    made = os.fstat(fd)
    try:
        os.fchmod(fd, 0o666 & ~_umask() if mode is None else mode)
        write(partial)
        now = _lstat(partial)
        if now is None or not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (made.st_dev, made.st_ino):
            raise UsageError(f"{partial} was replaced while raidlab wrote it; {path} is left as it was",
                             hint="write into a directory only you can change")
        os.fsync(fd)
        os.replace(partial, path)
        _fsync_dir(path.parent)
    finally:
        os.close(fd)
        _unlink_ours(partial, made)
    return path


def _unlink_ours(partial: Path, made: os.stat_result) -> None:
    st = _lstat(partial)
    if st is not None and (st.st_dev, st.st_ino) == (made.st_dev, made.st_ino):
        partial.unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_partials(directory: str | os.PathLike) -> list[Path]:
    """Remove the partial files a killed `write_whole` left in `directory`; return them.
    Only regular files are removed; anything else at such a name is not raidlab's."""
    gone = []
    for partial in Path(directory).glob(f".*{PARTIAL}*"):
        st = _lstat(partial)
        if st is not None and stat.S_ISREG(st.st_mode):
            partial.unlink(missing_ok=True)
            gone.append(partial)
    return gone


__all__ = ["PARTIAL", "READ_LIMIT", "make_dirs", "new_file", "new_stamped_dir", "output_dir", "owned_dir",
           "read_regular", "regular_or_absent", "remove_partials", "writable_file", "write_whole"]
