"""The toolkit's own static C programs (tps, seqfile, replay): built on first use, cached by source.

Why static C: the lab VM has busybox and no Python or shared libraries to spare, and the
same binary must run on the host and in the VM. Each program is built with `gcc -O2
-static` and cached under ~/.cache/raidlab/bin/<name>-<hash of source and flags>; the lab
VM's image includes every program of PROGRAMS (raidlab.vm.initramfs), and the workloads copy
theirs in with put where the image predates them.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from raidlab.errors import UsageError
from raidlab.tools.base import require, run as run_on_host

GCC_FLAGS = ["-O2", "-static", "-Wall", "-Wextra"]
HERE = Path(__file__).parent
PROGRAMS = {"tps": HERE / "tps.c", "seqfile": HERE / "seqfile.c", "replay": HERE / "replay.c"}


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "raidlab" / "bin"


def static_program(source: Path, name: str) -> Path:
    """The static program `name` built from `source` on first use, cached by source hash."""
    text = source.read_bytes()
    key = hashlib.sha256(text + " ".join(GCC_FLAGS).encode()).hexdigest()[:16]
    target = _cache_root() / f"{name}-{key}"
    if target.exists():
        return target
    require("gcc")
    if not any(Path(d, "libc.a").exists() for d in
               ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/lib/aarch64-linux-gnu")):
        raise UsageError(f"building the {name} program statically needs libc.a",
                         hint="install it with: apt-get install libc6-dev  (or run: make setup)")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{name}-build-")
    os.close(fd)
    try:
        run_on_host(["gcc", *GCC_FLAGS, "-o", tmp, str(source)], timeout=300)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)        # atomic: concurrent builders end with one good file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def program(name: str) -> Path:
    """The static program `name` of PROGRAMS."""
    return static_program(PROGRAMS[name], name)
