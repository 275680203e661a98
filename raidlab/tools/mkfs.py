"""mkfs.ext4 and e2fsck: make a file system on a block device and check it.

Why `-E nodiscard` by default: the loop devices raidlab builds sit on FUSE files, which
cannot discard (pyfuse3 has no fallocate handler), so mkfs's discard pass would only be
refused block by block; skipping it makes mkfs deterministic and quicker.

Why a benchmark's ext4 is made with `lazy_itable_init=0,lazy_journal_init=0` (mkfs_argv):
by default mkfs.ext4 leaves zeroing the inode tables to a kernel thread (ext4lazyinit) that
starts at the first mount and writes in the background for as long as that takes, and the
journal's zeroing too; those writes would land in the measured workload. With both off mkfs
writes them itself, before the array is settled. ext2 has no lazy initialisation.

Why a benchmark's own mkfs options pass an allow-list (check_mkfs_options): they come from a
scenario file, which anyone may have written, and mkfs runs as root. Several mke2fs options
name a path, a device or a program: `-d DIR` copies a directory into the new file system
(root-only files included), `-z FILE` writes an undo file at a new path, `-l FILE` reads a
bad-blocks list, `-J device=` and `-O journal_dev` involve another device, `-c` runs
badblocks, `-E offset=`/`android_sparse` move or redirect what is written, and `-E
root_owner=` hands the root directory to another uid. So only options that shape the file
system itself are taken, each with its value checked: sizes and counts as bounded integers,
feature and extended-option names from fixed lists. Anything else, including a positional
argument (mke2fs would read it as the device or its size), is refused with one line naming it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from raidlab.errors import ToolFailedError, UsageError
from raidlab.tools.base import run

# e2fsck(8) exit status bits
FSCK_OK = 0
FSCK_CORRECTED = 1
FSCK_REBOOT = 2
FSCK_UNCORRECTED = 4
FSCK_OPERATIONAL_ERROR = 8


# The mke2fs(8) options a benchmark's file system may be made with, per file system. Values
# are plain decimal numbers (no k/m suffixes) or names from the lists below.
POWERS_OF_TWO = tuple(2 ** k for k in range(7, 17))  # 128 .. 65536
BLOCK_SIZES = tuple(n for n in POWERS_OF_TWO if n >= 1024)
# -O: the features mke2fs makes a file system with (ext4(5)); `^name` clears one, `none` all.
# Left out: journal_dev (the device becomes an external journal, not a file system) and the
# names mke2fs lists but does not make (compression, dirdata, imagic_inodes, lazy_bg, ...).
FEATURES = ("64bit", "bigalloc", "casefold", "dir_index", "dir_nlink", "ea_inode", "encrypt", "ext_attr",
            "extent", "extents", "extra_isize", "fast_commit", "filetype", "flex_bg", "has_journal", "huge_file",
            "inline_data", "large_dir", "large_file", "meta_bg", "metadata_csum", "metadata_csum_seed", "mmp",
            "none", "orphan_file", "project", "quota", "resize_inode", "sparse_super", "sparse_super2",
            "stable_inodes", "uninit_bg", "uninit_groups", "verity")
UINT32 = range(1, 2 ** 32)
# -E: name -> the values it takes (None: no value). Left out: offset=, android_sparse,
# root_owner= (the module doc says why), and the rest (encoding, quotatype, test_fs, ...) that
# a benchmark has no use for.
EXTENDED = {
    "stride": UINT32, "stripe_width": UINT32, "stripe-width": UINT32, "resize": UINT32,
    "num_backup_sb": range(3), "packed_meta_blocks": range(2), "lazy_itable_init": range(2),
    "lazy_journal_init": range(2), "discard": None, "nodiscard": None,
}
_INTEGER_OPTIONS = {  # option -> the values it takes and what it sets
    "-b": (BLOCK_SIZES, "block size"),
    "-I": (POWERS_OF_TWO, "inode size"),
    "-i": (range(1024, 2 ** 26 + 1), "bytes per inode"),
    "-N": (UINT32, "inode count"),
}
JOURNAL_MIB = range(1, 2 ** 20 + 1)  # -J size=N, MiB
# file system -> its options, in the order they are listed to the user
MKFS_OPTIONS = {
    "ext4": ("-b", "-I", "-i", "-N", "-m", "-O", "-J", "-E"),
    "ext2": ("-b", "-I", "-i", "-N", "-m", "-O", "-E"),  # no -J: a journal would make it ext3
}


def _shown(values: range | tuple[int, ...]) -> str:
    if isinstance(values, range):
        return f"{values.start}..{values.stop - 1}"
    return "|".join(map(str, values))


def _describe(option: str) -> str:
    if option in _INTEGER_OPTIONS:
        values, what = _INTEGER_OPTIONS[option]
        return f"{option} {_shown(values)} ({what})"
    return {"-m": "-m 0..50 (reserved blocks, %)",
            "-O": "-O FEATURE[,^FEATURE...] (features)",
            "-J": f"-J size={_shown(JOURNAL_MIB)} (journal MiB)",
            "-E": "-E " + ",".join(n if r is None else f"{n}={_shown(r)}" for n, r in EXTENDED.items())}[option]


def allowed_mkfs_options(fstype: str) -> str:
    """What a scenario may give mkfs.FSTYPE, as one line for a message."""
    if fstype not in MKFS_OPTIONS:
        return f"mkfs.{fstype} takes no options here"
    return ", ".join(_describe(option) for option in MKFS_OPTIONS[fstype])


def _integer(text: str, values: range | tuple[int, ...]) -> bool:
    """`text` is a plain decimal number among `values`."""
    return text.isascii() and text.isdecimal() and int(text) in values


def _refuse(fstype: str, what: str, allowed: str | None = None) -> UsageError:
    return UsageError(f"mkfs.{fstype} option {what} is not allowed",
                      hint=f"allowed: {allowed or allowed_mkfs_options(fstype)}")


def _check_value(fstype: str, option: str, value: str) -> None:
    if option in _INTEGER_OPTIONS:
        good = _integer(value, _INTEGER_OPTIONS[option][0])
    elif option == "-m":  # a percentage, possibly with a fraction (mke2fs reads it with strtod)
        good = value.isascii() and value.replace(".", "", 1).isdecimal() and float(value) <= 50
    elif option == "-O":
        for feature in value.split(","):
            if feature.removeprefix("^") not in FEATURES:
                raise _refuse(fstype, f"-O {feature!r}", "features " + ", ".join(FEATURES) + " (^ clears one)")
        return
    elif option == "-J":
        size = value.removeprefix("size=")
        good = value.startswith("size=") and _integer(size, JOURNAL_MIB)
    else:  # -E
        for item in filter(None, value.split(",")):
            name, has_value, given = item.partition("=")
            if name not in EXTENDED or (EXTENDED[name] is None) == bool(has_value) or (
                    has_value and not _integer(given, EXTENDED[name])):
                raise _refuse(fstype, f"-E {item!r}", _describe("-E"))
        return
    if not good:
        raise _refuse(fstype, f"{option} {value!r}", _describe(option))


def check_mkfs_options(fstype: str, extra: list[str] | tuple[str, ...]) -> None:
    """Refuse, with one line naming it, any of `extra` outside mkfs.FSTYPE's allow-list
    (MKFS_OPTIONS, module doc) (pure). An option is given as "-b", "1024" or as "-b1024",
    as getopt reads it; everything that is not one of the listed options, or a value that
    is not allowed for it, is refused."""
    allowed = MKFS_OPTIONS.get(fstype, ())
    args = iter(extra)
    for arg in args:
        option = arg[:2]
        if len(arg) < 2 or option not in allowed:
            raise _refuse(fstype, repr(arg))
        value = arg[2:] if len(arg) > 2 else next(args, None)
        if value is None:
            raise UsageError(f"mkfs option {option} has no value", hint=f"give it as {_describe(option)}")
        _check_value(fstype, option, value)


def extended_options(fstype: str, extra: list[str] | tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """The one `-E` value of a benchmark's mkfs.FSTYPE and the rest of `extra` (pure).

    Ours: nodiscard, and for ext4 no lazy initialisation (module doc). The `-E` values in
    `extra` ("-E", "a,b" or "-Ea,b") are merged into it, one option per key, theirs winning
    over ours for the same key (discard and nodiscard are one key), so mkfs gets a single
    -E instead of two, the second of which would silently replace the first."""
    ours = ["nodiscard"] + (["lazy_itable_init=0", "lazy_journal_init=0"] if fstype == "ext4" else [])
    theirs: list[str] = []
    rest: list[str] = []
    args = iter(extra)
    for arg in args:
        if arg == "-E":
            value = next(args, None)
            if value is None:
                raise UsageError("mkfs option -E has no value", hint='give it as "-E", "OPTION[,OPTION...]"')
            theirs += [v for v in value.split(",") if v]
        elif arg.startswith("-E"):
            theirs += [v for v in arg[2:].split(",") if v]
        else:
            rest.append(arg)

    def key(option: str) -> str:
        name = option.split("=", 1)[0]
        return "discard" if name in ("discard", "nodiscard") else name

    taken = {key(option) for option in theirs}
    merged = [option for option in ours if key(option) not in taken] + theirs
    return ",".join(merged), rest


def mkfs_argv(fstype: str, device: str, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The mkfs command line of a benchmark's file system (pure): `mkfs.FSTYPE -F -q -E ...
    EXTRA DEVICE`, with the extended options of `extended_options`. EXTRA must pass
    check_mkfs_options (UsageError otherwise)."""
    check_mkfs_options(fstype, extra)
    options, rest = extended_options(fstype, extra)
    return [f"mkfs.{fstype}", "-F", "-q", "-E", options, *rest, str(device)]


def mkfs_ext4(device: str | os.PathLike, *, label: str | None = None, discard: bool = False,
              extra: list[str] | tuple[str, ...] = (), timeout: float = 300) -> None:
    argv = ["mkfs.ext4", "-F", "-q"]
    if not discard:
        argv += ["-E", "nodiscard"]
    if label:
        argv += ["-L", label]
    argv += list(extra)
    argv.append(str(device))
    run(argv, timeout=timeout)


@dataclass(frozen=True)
class FsckResult:
    returncode: int
    output: str

    @property
    def clean(self) -> bool:
        """e2fsck found nothing to correct."""
        return self.returncode == FSCK_OK


def e2fsck(device: str | os.PathLike, *, fix: bool = False, repair: bool = False,
           timeout: float = 600) -> FsckResult:
    """Force a full check (-f). Read-only (-n) unless fix=True (then -p, preen: only what is
    safe without asking) or repair=True (-y: every repair e2fsck offers, as an administrator
    answering yes to all).

    Returns the result for exit codes 0-4 (file system state); raises ToolFailedError for an
    operational error (8 and above: device missing, in use, ...).
    """
    argv = ["e2fsck", "-f", "-y" if repair else "-p" if fix else "-n", str(device)]
    proc = run(argv, check=False, timeout=timeout)
    if proc.returncode >= FSCK_OPERATIONAL_ERROR:
        raise ToolFailedError(argv, proc.returncode, proc.stderr or proc.stdout)
    return FsckResult(proc.returncode, proc.stdout + proc.stderr)
