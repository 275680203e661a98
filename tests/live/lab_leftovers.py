"""What a lab may have left on the host, checked *independently* of raidlab's own scanning:
the raw text of `losetup -a`, /proc/mounts, and the environment of every process.

Other engineers' tests may hold loop devices and mounts at the same time, so everything is
matched by the lab's directory (unique per test: it lives in the test's tmp_path).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def loops_of(lab_dir: Path) -> list[str]:
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if str(lab_dir) in line]


def mounts_of(lab_dir: Path, lab_name: str | None = None) -> list[str]:
    text = Path("/proc/mounts").read_text()
    hits = []
    for line in text.splitlines():
        source, target = line.split()[:2]
        target = target.replace("\\040", " ")
        if target.startswith(str(lab_dir)) or (lab_name and source == f"raidlab:{lab_name}"):
            hits.append(line)
    return hits


def processes_of(lab_dir: Path) -> list[str]:
    """Processes whose environment names the lab (our COMMAND children carry
    RAIDLAB_LAB_DIR), plus any whose command line mentions it."""
    hits = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(") ", 1)[1][0]
        except OSError:
            continue
        if state == "Z":
            continue  # a zombie holds no resources; its parent (init) reaps it
        if f"RAIDLAB_LAB_DIR={lab_dir}".encode() in env or str(lab_dir).encode() in cmdline:
            hits.append(f"{entry}: {cmdline.decode(errors='replace')[:100]}")
    return hits


def leftovers(lab_dir: Path, lab_name: str | None = None) -> dict[str, list[str]]:
    found = {"loops": loops_of(lab_dir), "mounts": mounts_of(lab_dir, lab_name),
             "processes": processes_of(lab_dir)}
    return {k: v for k, v in found.items() if v}
