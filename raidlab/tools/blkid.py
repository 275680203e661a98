"""What is on a device: `blkid -p` and `wipefs --no-act`, read-only.

Why two tools: `blkid -p` (low-level probe, no cache) names the filesystem or partition
table it finds first (TYPE=, PTTYPE=, USAGE=raid/filesystem/...), while `wipefs --no-act`
lists *every* signature at every offset (a stale md superblock under a new filesystem, a
protective MBR next to GPT). raidlab refuses to use a real block device as a member disk if
either finds anything (raidlab.disks.backend.BlockDeviceBackend), so the union is what counts.
Both only read the device. Both go through raidlab.tools.base.run, so the command lines are
recorded.
"""

from __future__ import annotations

import dataclasses
import json
import os

from raidlab.tools.base import run


@dataclasses.dataclass(frozen=True)
class Signature:
    """One thing found on a device. kind: filesystem, partition-table, raid, other."""

    type: str
    kind: str
    offset: str | None = None
    tool: str = ""

    def describe(self) -> str:
        where = f" at {self.offset}" if self.offset else ""
        return f"{self.type} ({self.kind}{where})"


_PARTITION_TABLES = {"gpt", "dos", "PMBR", "mbr", "bsd", "sun", "sgi", "mac", "atari", "solaris"}


def _kind_of(type_: str, usage: str | None = None) -> str:
    if usage == "raid" or type_.endswith("_raid_member") or type_ in {"linux_raid_member", "ddf_raid_member", "isw_raid_member"}:
        return "raid"
    if usage == "filesystem":
        return "filesystem"
    if usage == "other" and type_ == "swap":
        return "filesystem"
    if type_ in _PARTITION_TABLES:
        return "partition-table"
    return usage or "other"


def probe_blkid(device: str | os.PathLike) -> list[Signature]:
    """`blkid -p -o export DEVICE`: exit 2 means nothing found."""
    proc = run(["blkid", "-p", "-o", "export", str(device)], check=False)
    if proc.returncode == 2:
        return []
    if proc.returncode != 0:
        # blkid exits 4/8 on usage or probing errors: treat as "could not prove empty".
        return [Signature(type=f"unprobeable (blkid exit {proc.returncode})", kind="other", tool="blkid")]
    fields = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    found = []
    if "TYPE" in fields:
        found.append(Signature(fields["TYPE"], _kind_of(fields["TYPE"], fields.get("USAGE")), tool="blkid"))
    if "PTTYPE" in fields:
        found.append(Signature(fields["PTTYPE"], "partition-table", tool="blkid"))
    return found


def probe_wipefs(device: str | os.PathLike) -> list[Signature]:
    """`wipefs --no-act --json DEVICE`: every signature wipefs would erase, none erased."""
    proc = run(["wipefs", "--no-act", "--json", str(device)])
    text = proc.stdout.strip()
    if not text:
        return []
    data = json.loads(text)
    return [
        Signature(s.get("type") or "unknown", _kind_of(s.get("type") or ""), s.get("offset"), tool="wipefs")
        for s in data.get("signatures", [])
    ]


def signatures(device: str | os.PathLike) -> list[Signature]:
    """Everything either tool finds (duplicates by type removed, wipefs's offsets kept)."""
    found: dict[str, Signature] = {}
    for sig in probe_wipefs(device) + probe_blkid(device):
        found.setdefault(sig.type, sig)
    return list(found.values())
