"""A second user for the security tests: commands run as `nobody` with runuser, as another
student on a shared lab machine would run them, against what root made.

Homes for those tests are made under `shared_dir()`: a directory every user may enter (0755,
root's), so what keeps `nobody` out is raidlab's own permissions, not the test's temporary
directory (pytest's is 0700).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

NOBODY = "nobody"
PYTHON = "/usr/bin/python3"  # the system's: the venv under the checkout may be closed to nobody


def available() -> str | None:
    """Why the second user cannot be used here, or None."""
    if os.geteuid() != 0:
        return "needs root to run commands as another user"
    if not shutil.which("runuser"):
        return "runuser (util-linux) is missing"
    if subprocess.run(["id", NOBODY], capture_output=True).returncode != 0:
        return f"no user {NOBODY}"
    return None


def as_nobody(argv: list[str], *, timeout: float = 120, input: str | None = None,
              cwd: str | os.PathLike = "/") -> subprocess.CompletedProcess:
    """Run argv as nobody (its own environment, cwd `cwd`); never raises on its status."""
    return subprocess.run(["runuser", "-u", NOBODY, "--", *argv], capture_output=True, text=True,
                          timeout=timeout, input=input, cwd=cwd, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


def python_as_nobody(code: str, *, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run Python source `code` as nobody with the system interpreter."""
    return as_nobody([PYTHON, "-c", code], timeout=timeout)


def shared_dir(prefix: str = "raidlab-shared-") -> Path:
    """A new directory under /tmp that every user may enter and none but root may write
    (0755); the caller removes it."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(path, 0o755)
    return path
