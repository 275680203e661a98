"""What a lab may have left on the host, checked *independently* of raidlab's own scanning:
the raw text of `losetup -a`, /proc/mounts, and the environment of every process; for a
cluster, `ip netns list`, `ip -o link`, the namespaces' bind mounts and its nbdkit servers.

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
        if target.startswith(str(lab_dir)):
            hits.append(line)
        elif lab_name and source == f"raidlab:{lab_name}" and f"/labs/{lab_name}/" not in target:
            # a volume of this name mounted outside any lab directory; one inside another
            # lab directory belongs to another test's lab of the same name
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


def network_leftovers(name: str) -> dict[str, list[str]]:
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    found = {
        "namespaces": [line for line in namespaces.splitlines() if line.split()[0].startswith(f"rlx-{name}-")],
        "links": [ifname for ifname in (line.split(":")[1].strip().split("@")[0] for line in links.splitlines())
                  if ifname == f"rlx-{name}" or ifname.startswith(f"rlv-{name}-")],
        "nsfs mounts": [line for line in Path("/proc/mounts").read_text().splitlines()
                        if f"/run/netns/rlx-{name}-" in line],
        "nbdkit": [line for line in _process_table() if "nbdkit" in line and f"rlx-{name}-" in line],
    }
    return {k: v for k, v in found.items() if v}


def _process_table() -> list[str]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(") ", 1)[1][0]
        except (OSError, IndexError):
            continue
        if state != "Z":  # a zombie holds nothing; init reaps it
            out.append(f"{entry}: {cmdline}")
    return out
