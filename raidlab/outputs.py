"""Where raidlab writes what a user names: paths that do not exist yet, or files raidlab wrote
itself before. Nothing else is opened for writing.

Why: a mistyped output path must not destroy what raidlab did not make. `-o /dev/loop0` would
write a trace over a block device, and `-o disk.img` over an image some loop device serves.
So every output path a command takes is checked before anything is written:

* a file output (`writable_file`) may be a new path, or a regular file (not a link) that
  starts with the marker raidlab writes at the top of that kind of file (a trace's
  "raidlab-trace v1", the reliability matrix's title), so regenerating one works;
* a file raidlab has no marker for (`new_file`) must not exist;
* a directory output (`output_dir`) may be a new path or a directory (not a link); the files
  raidlab then writes inside it are file outputs of their own.

Devices, FIFOs, sockets and links are refused whatever they point at. Each refusal is one
line with the path and what to do (UsageError, exit 2).

A file is written whole or not at all (`write_whole`): into a hidden partial file beside it,
then renamed over it, so an interrupted command leaves the earlier file or none, never half
of one. What a killed writer's partial file leaves is removed by the next write into that
directory (`remove_partials`).
"""

from __future__ import annotations

import os
import stat
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
    """`path` if it is a directory (not a link) or does not exist yet; UsageError otherwise."""
    path = Path(path)
    st = _lstat(path)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{option} {path} is {_what(st)}, not a directory",
                         hint="give a directory, or a new path for one")
    return path


def regular_or_absent(path: str | os.PathLike, option: str) -> Path:
    """A file raidlab writes by its own name inside an output directory (a report's
    report.md, its figures): refused only if something other than a regular file is there."""
    path = Path(path)
    st = _lstat(path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{option}: {path} is {_what(st)}; raidlab writes only regular files",
                         hint="remove it, or write the report elsewhere with --out")
    return path


PARTIAL = ".raidlab-partial-"  # in the name of a file being written (write_whole)


def write_whole(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Call `write(partial)` to write the file's bytes into a hidden partial file in the same
    directory (its suffix kept: a figure's format follows it), then rename it over `path`."""
    path = Path(path)
    partial = path.with_name(f".{path.stem}{PARTIAL}{os.getpid()}{path.suffix}")
    try:
        write(partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def remove_partials(directory: str | os.PathLike) -> list[Path]:
    """Remove the partial files a killed `write_whole` left in `directory`; return them."""
    gone = []
    for partial in Path(directory).glob(f".*{PARTIAL}*"):
        st = _lstat(partial)
        if st is not None and stat.S_ISREG(st.st_mode):
            partial.unlink(missing_ok=True)
            gone.append(partial)
    return gone


__all__ = ["PARTIAL", "new_file", "output_dir", "regular_or_absent", "remove_partials", "writable_file",
           "write_whole"]
