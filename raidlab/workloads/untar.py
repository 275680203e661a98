"""untar / copy / remove (He & Yang, VC-RAID §4.2.4 and §4.3.2, Fig. 7).

The paper untars "the standard test suites file of web-bench by ZDNet", doubled: 952
subdirectories of different depths, 12,322 files of 9.9 KB on average, 122 MB, kept on the
local system disk; then `cp -r` of the tree the untar created, then `rm -rf` of it; the
metric is the user response time of each program, in synchronous and asynchronous mode.

What this driver does and why:
- The web-bench tar file is not available, so `tree_spec` generates a tree of the same shape
  from a seed (pure function; same seed and scale -> the same tree, byte for byte): 952
  directories whose parents are drawn so depths vary (a directory is more often made inside
  one of the newest directories, which builds deep chains, otherwise anywhere), 12,322 files
  spread over all directories, sizes drawn log-normally (many small files, a few large ones,
  like a web site) then scaled so the total is exactly files x 9,900 bytes (the paper's "9.9
  KB" and "122 MB" agree with decimal units: 12,322 x 9,900 B = 122.0 MB). `scale` multiplies
  the directory and file counts (0.01 -> 10 directories, 123 files, 1.2 MB).
- The tar file is built on the host (cached under ~/.cache/raidlab/trees/, deterministic tar
  headers: fixed mtime, uid 0) and put into `session.scratch`, another filesystem (in the
  VM an ext4 on the lab's scratch disk, untimed; a temp directory on the host), as the
  paper kept its source on the system disk.
- untar: `tar xf SCRATCH/tree.tar -C MOUNTPOINT` creates MOUNTPOINT/tree.
  copy: `cp -r MOUNTPOINT/tree MOUNTPOINT/tree.copy`. The paper says "copying ... the
  entire directory tree created by the untar test", so the source is the untarred tree on
  the array and the destination is on the same array: the copy reads and writes the array
  under test (a copy onto another disk would time that disk's writes instead).
  remove: `rm -rf MOUNTPOINT/tree` (the tree the untar created, as the paper says); the copy
  is then removed untimed so the filesystem is left as found.
- Synchronous mode (`mode = "sync"`): the runner mounts with `-o sync`
  (`mount_options(params)` returns ["sync"]); the driver checks /proc/mounts and refuses to
  time an asynchronous mount as a synchronous one, and the reverse.
- Asynchronous mode: each timed phase ends with `sync`, and the phase time is the program's
  time plus the sync's. Why: the paper's host had 64 MB of RAM (about 34 MB of file cache)
  against a 122 MB tree, so most of each program's writes had to reach the array while it
  ran; on a host with gigabytes of RAM the whole tree would sit in the page cache and the
  program's time alone would measure memory, and its dirty data would be written during the
  next phase and be charged to it. Both parts are kept (`*_program_seconds`,
  `*_sync_seconds`).
- Before each phase (untimed) `sync` and, with `drop_caches` (default), `echo 3 >
  /proc/sys/vm/drop_caches`, so the copy reads its source from the array, not from the page
  cache: the paper rebooted before each test and its RAM could not hold the tree. Natively
  this drops the whole host's clean page cache (harmless to correctness, it costs other
  programs re-reads); in the VM only the guest's.
- `idle_s` (default 0): seconds of idle time before each phase, after its untimed sync, in
  which a write-back cache under the filesystem can destage (VC-RAID destages "during the
  system idle time"). The paper does not say it paused between programs, so the scenarios'
  claims use 0; a case with idle time tests the explanation that a log left full by the
  previous phase is what slows the next one.
- Phase times are the runner's measure of each command (CommandResult.seconds); in the VM that
  includes the command channel's round trip, milliseconds against phases of seconds.
- After untar and after copy the driver counts the files and directories (untimed) and
  raises WorkloadError if they differ from the generated tree's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import random
import tarfile
import tempfile
from pathlib import Path

from raidlab.errors import WorkloadError
from raidlab.workloads.base import (Commands, Outcome, Param, Progress, RunnerSession, Workload,
                                    join, mount_entry, require_empty_target, text)

PAPER_DIRECTORIES = 952
PAPER_FILES = 12_322
PAPER_MEAN_FILE_BYTES = 9_900
GENERATOR_VERSION = 1            # bump when tree_spec or build_tar changes their output
TREE_ROOT = "tree"
FIXED_MTIME = 946_684_800        # 2000-01-01: tar headers do not depend on when it was built
CONTENT_POOL_BYTES = 4 << 20
MAX_FILE_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class TreeSpec:
    """A generated source tree: directories (parents first) and files with sizes."""

    seed: int
    scale: float
    directories: tuple[str, ...]             # relative paths, excluding the root
    files: tuple[tuple[str, int], ...]       # (relative path, size in bytes)

    @property
    def total_bytes(self) -> int:
        return sum(size for _path, size in self.files)

    @property
    def max_depth(self) -> int:
        return max((d.count("/") + 1 for d in self.directories), default=0)

    def depth_histogram(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for d in self.directories:
            depth = d.count("/") + 1
            out[depth] = out.get(depth, 0) + 1
        return dict(sorted(out.items()))

    def summary(self) -> dict:
        return {"seed": self.seed, "scale": self.scale, "directories": len(self.directories),
                "files": len(self.files), "bytes": self.total_bytes,
                "mean_file_bytes": round(self.total_bytes / max(1, len(self.files)), 1),
                "max_depth": self.max_depth,
                "depths": {str(k): v for k, v in self.depth_histogram().items()}}


def tree_spec(seed: int, scale: float = 1.0, *, directories: int = PAPER_DIRECTORIES,
              files: int = PAPER_FILES, mean_file_bytes: int = PAPER_MEAN_FILE_BYTES) -> TreeSpec:
    """Generate the tree's shape: pure, deterministic in (seed, scale, counts)."""
    rng = random.Random(f"raidlab-untar-v{GENERATOR_VERSION}-{seed}")
    n_dirs = max(1, round(directories * scale))
    n_files = max(1, round(files * scale))
    dirs: list[str] = []
    for index in range(n_dirs):
        name = f"d{index:04d}"
        roll = rng.random()
        if not dirs or roll < 0.15:
            parent = ""                              # a new top-level directory
        elif roll < 0.35:
            parent = rng.choice(dirs[-6:])           # deepen a recent branch
        else:
            parent = rng.choice(dirs)                # anywhere
        if parent.count("/") >= 11:                  # keep paths well under tar's limits
            parent = parent.rsplit("/", 1)[0]
        dirs.append(f"{parent}/{name}" if parent else name)
    # Log-normal sizes (sigma 1.1: median about a third of the mean), then scaled to the
    # exact total; rounding is made up one byte at a time on files drawn by the rng.
    raw = [rng.lognormvariate(0.0, 1.1) for _ in range(n_files)]
    total = n_files * mean_file_bytes
    factor = total / sum(raw)
    sizes = [min(MAX_FILE_BYTES, int(r * factor)) for r in raw]
    deficit = total - sum(sizes)
    while deficit > 0:
        i = rng.randrange(n_files)
        add = min(deficit, MAX_FILE_BYTES - sizes[i])
        sizes[i] += add
        deficit -= add
    homes = [""] + dirs
    suffixes = (".html", ".gif", ".jpg", ".txt", ".class", ".cgi")
    file_list = []
    for index, size in enumerate(sizes):
        home = rng.choice(homes)
        name = f"f{index:05d}{rng.choice(suffixes)}"
        file_list.append((f"{home}/{name}" if home else name, size))
    return TreeSpec(seed, scale, tuple(dirs), tuple(file_list))


def build_tar(spec: TreeSpec, path: Path) -> str:
    """Write the tree as a tar file (all entries under TREE_ROOT/); return its sha256."""
    rng = random.Random(f"raidlab-untar-content-{spec.seed}")
    pool = rng.randbytes(CONTENT_POOL_BYTES)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tar:
        def header(name: str, kind: bytes, size: int = 0, mode: int = 0o644) -> tarfile.TarInfo:
            info = tarfile.TarInfo(f"{TREE_ROOT}/{name}" if name else TREE_ROOT)
            info.type, info.size, info.mode = kind, size, mode
            info.mtime, info.uid, info.gid, info.uname, info.gname = FIXED_MTIME, 0, 0, "", ""
            return info
        tar.addfile(header("", tarfile.DIRTYPE, mode=0o755))
        for d in spec.directories:
            tar.addfile(header(d, tarfile.DIRTYPE, mode=0o755))
        for name, size in spec.files:
            start = rng.randrange(0, CONTENT_POOL_BYTES - size + 1)
            tar.addfile(header(name, tarfile.REGTYPE, size), io.BytesIO(pool[start:start + size]))
    digest = hashlib.sha256()
    with open(tmp, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    os.replace(tmp, path)
    return digest.hexdigest()


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "raidlab" / "trees"


def cached_tar(seed: int, scale: float) -> tuple[Path, TreeSpec, str]:
    """The tree's tar file from the cache, built on first use. Returns (path, spec, sha256)."""
    spec = tree_spec(seed, scale)
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"tree-v{GENERATOR_VERSION}-seed{seed}-scale{scale:g}.tar"
    digest_file = path.with_suffix(".sha256")
    if path.exists() and digest_file.exists():
        return path, spec, digest_file.read_text().strip()
    digest = build_tar(spec, path)
    fd, tmp = tempfile.mkstemp(dir=folder)
    with os.fdopen(fd, "w") as fh:
        fh.write(digest + "\n")
    os.replace(tmp, digest_file)
    return path, spec, digest


def count_tree(commands: Commands, path: str, label: str) -> tuple[int, int]:
    """(files, directories below the root) of a tree on the runner."""
    script = 'find "$1" -type f | wc -l; find "$1" -type d | wc -l'
    out = text(commands.shell(script, path, timeout=600, label=label).stdout).split()
    return int(out[0]), int(out[1]) - 1


class UntarCopyRemove(Workload):
    name = "untar_copy_remove"
    title = "untar / copy / remove of a web-bench-shaped tree"
    source = "VC-RAID §4.2.4, Fig. 7"
    params = {
        "scale": Param(float, 1.0, "multiplies the paper's 952 directories and 12,322 files",
                       minimum=0.0001, maximum=10.0),
        "seed": Param(int, 1, "seed of the tree generator", minimum=0),
        "mode": Param(str, "async", "sync: the runner mounts with -o sync; async: each phase "
                      "ends with sync", choices=("sync", "async")),
        "drop_caches": Param(bool, True, "sync and drop the page cache before each phase"),
        "idle_s": Param(float, 0.0, "idle seconds before each phase, after its untimed sync "
                        "(the paper does not say it paused: 0)", minimum=0.0, maximum=3600.0),
        "timeout": Param(float, 3600.0, "seconds allowed per command", minimum=1),
    }
    programs = {"tar": "tar", "cp": "coreutils", "rm": "coreutils", "sync": "coreutils",
                "find": "findutils", "wc": "coreutils", "cat": "coreutils"}

    def mount_options(self, params: dict) -> list[str]:
        return ["sync"] if self.resolve(params)["mode"] == "sync" else []

    def execute(self, session: RunnerSession, commands: Commands, mountpoint: str | None,
                params: dict, progress: Progress) -> Outcome:
        assert mountpoint is not None
        out = Outcome()
        mode, timeout = params["mode"], params["timeout"]
        entry = mount_entry(commands, mountpoint)
        if entry is None:
            raise WorkloadError(f"{mountpoint} is not a mount point on the runner")
        fstype, options = entry
        if (mode == "sync") != ("sync" in options):
            raise WorkloadError(
                f"{mountpoint} is mounted with options {','.join(options)} but mode={mode}; "
                f"mount it with the workload's mount_options ({self.mount_options(params)})")
        tree = join(mountpoint, TREE_ROOT)
        copy = join(mountpoint, TREE_ROOT + ".copy")
        for path in (tree, copy):
            require_empty_target(commands, path)

        progress(f"generating the source tree (scale {params['scale']:g})")
        local_tar, spec, digest = cached_tar(params["seed"], params["scale"])
        remote_tar = join(session.scratch, f"raidlab-tree-{digest[:12]}.tar")
        progress(f"copying {local_tar.stat().st_size / 1e6:.1f} MB tar file to the runner's "
                 f"scratch directory")
        session.put(local_tar, remote_tar)
        out.extra["tree"] = {**spec.summary(), "tar_bytes": local_tar.stat().st_size,
                             "tar_sha256": digest, "fstype": fstype, "mount_options": options}
        try:
            phases = [
                ("untar", ["tar", "xf", remote_tar, "-C", mountpoint]),
                ("copy", ["cp", "-r", tree, copy]),
                ("remove", ["rm", "-rf", tree]),
            ]
            total = 0.0
            for phase, argv in phases:
                self._quiesce(commands, params["drop_caches"], phase)
                commands.idle(params["idle_s"], f"before {phase}: idle (untimed)")
                progress(f"{phase}: {' '.join(argv)}")
                ran = commands.run(argv, timeout=timeout, label=phase)
                program = ran.seconds
                out.raw[f"{phase}_stdout"] = text(ran.stdout)
                out.raw[f"{phase}_stderr"] = text(ran.stderr)
                sync = 0.0
                if mode == "async":
                    sync = commands.run(["sync"], timeout=timeout, label=f"{phase} sync").seconds
                seconds = program + sync
                total += seconds
                out.metric(f"{phase}_seconds", round(seconds, 6), "s")
                out.metric(f"{phase}_program_seconds", round(program, 6), "s")
                if mode == "async":
                    out.metric(f"{phase}_sync_seconds", round(sync, 6), "s")
                if phase in ("untar", "copy"):
                    self._check_tree(commands, tree if phase == "untar" else copy, spec, phase)
            out.metric("total_seconds", round(total, 6), "s")
            left = text(commands.shell('[ -e "$1" ] && echo left; true', tree, timeout=60,
                                       label="check remove").stdout)
            if "left" in left:
                raise WorkloadError(f"rm -rf left {tree} behind")
        finally:
            commands.run(["rm", "-rf", copy, tree, remote_tar], timeout=timeout, check=False,
                         label="cleanup (untimed)")
        return out

    @staticmethod
    def _quiesce(commands: Commands, drop_caches: bool, phase: str) -> None:
        if drop_caches:
            commands.shell("sync && echo 3 > /proc/sys/vm/drop_caches", timeout=600,
                           label=f"before {phase}: sync, drop caches (untimed)")
        else:
            commands.run(["sync"], timeout=600, label=f"before {phase}: sync (untimed)")

    @staticmethod
    def _check_tree(commands: Commands, path: str, spec: TreeSpec, phase: str) -> None:
        files, dirs = count_tree(commands, path, f"after {phase}: count (untimed)")
        if (files, dirs) != (len(spec.files), len(spec.directories)):
            raise WorkloadError(
                f"after {phase}, {path} holds {files} files and {dirs} directories; the tree "
                f"has {len(spec.files)} and {len(spec.directories)}")


WORKLOAD = UntarCopyRemove()
