"""Would md's recovery have kept a lost file? One failed md-raid5-wb crash point, kept by --keep-failed.

    python results/reliability/md-raid5-wb-journal/trace_loss.py KEPT_POINT_DIR [--files 120] [--recovered IMAGE]

KEPT_POINT_DIR is one `raidlab crashtest md-raid5-wb ... --keep-failed DIR` point directory:
the drive images as the power cut left them (before md's recovery touched them) and
point.json. The script builds, on the host and without md, the array as md's documented
recovery should leave it: every data page as the members hold it, then every data page of
the journal records recovery walks from the superblock's tail, in order of sequence number
(raidlab.baselines.md_journal; the members mapped as raidlab.baselines.md_oracle maps them). It then
replays ext4's journal on that image (e2fsck -fy) and reads each file the crash point lost
(debugfs), comparing it with the file the untar wrote (rebuilt from the point's seed,
raidlab.campaigns.crash.make_tree).

A lost file that is intact here was on the drives after the cut, in the members or in the
records recovery walks: what lost it is md's recovery or what ran after it, not the cut.
Reads only the kept images; writes the reconstruction (a temporary file unless --recovered).
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import trio

from raidlab.baselines import md_journal
from raidlab.baselines.md_oracle import open_md_members
from raidlab.baselines.md_superblock import read_superblock
from raidlab.campaigns.crash import make_tree

SECTOR = 512
CHUNK = 1 << 20


def write_recovered(path: Path, members: list[Path], journal: Path, chain: set[int]) -> int:
    """The array as md's recovery should leave it: the array md's members hold (read through
    the engine's mapping of md's superblocks, raidlab.baselines.md_oracle), then every data page
    of the records recovery walks, in order of seq. Returns the pages replayed."""
    array, _, opened = open_md_members(members)

    async def copy(out) -> None:
        for offset in range(0, array.size, CHUNK):
            out.write(await array.read(offset, min(CHUNK, array.size - offset)))

    try:
        with open(path, "wb") as out:
            trio.run(copy, out)
            replayed = 0
            for meta, location, page in md_journal.data_pages(journal):
                if meta.seq in chain:
                    out.seek(location * SECTOR)
                    out.write(page)
                    replayed += 1
    finally:
        for image in opened:
            image.close()
    return replayed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("point_dir", type=Path)
    ap.add_argument("--files", type=int, default=120, help="the crash test's --files (default 120)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--recovered", type=Path, metavar="IMAGE",
                    help="also write the array as recovery should leave it (members + the walked records) to IMAGE")
    args = ap.parse_args()
    point = json.loads((args.point_dir / "point.json").read_text())
    images = sorted(args.point_dir.glob("*.img"))
    journal = next((i for i in images if md_journal.is_journal(i)), None)
    if journal is None:
        raise SystemExit("no md write-journal image in the point directory")
    state = md_journal.describe(journal)

    with tarfile.open(fileobj=io.BytesIO(make_tree(point["seed"], args.files))) as tar:
        content = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    lost = [entry.split(" (")[0] for entry in point["damaged"]]
    # md's superblock writes carry the same event count on every device: counts that differ
    # mean the cut fell inside one superblock update.
    events = {image.name: {"role": "journal" if image == journal else sb.role, "events": sb.events}
              for image, sb in ((i, read_superblock(i)) for i in images)}
    recovered = args.recovered or Path(tempfile.mkstemp(suffix=".img", dir=args.point_dir)[1])
    try:
        replayed = write_recovered(recovered, [i for i in images if i != journal], journal,
                                   {m.seq for m in state.chain})
        fsck = subprocess.run(["e2fsck", "-fy", str(recovered)], capture_output=True, text=True)
        files = []
        for rel in lost:
            got = subprocess.run(["debugfs", "-R", f"cat /{rel}", str(recovered)], capture_output=True).stdout
            files.append({"file": rel, "bytes": len(content[rel]), "intact_in_reconstruction": got == content[rel],
                          "reconstruction_bytes": len(got)})
    finally:
        if args.recovered is None:
            recovered.unlink()
    report = {"point": point["point"], "seed": point["seed"], "journal": state.summary,
              "superblock_events": events, "power_cut": point.get("power_cut"), "replayed_pages": replayed,
              "e2fsck_exit": fsck.returncode, "lost_files": files}
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0
    print(f"point {report['point']} (seed {report['seed']}): {len(files)} lost files")
    print(f"journal: {state.summary}")
    print("superblock events: " + ", ".join(f"{name} ({e['role']}) {e['events']}" for name, e in events.items()))
    for image, cut in (point.get("power_cut") or {}).items():
        print(f"  {Path(image).name}: {cut}")
    print(f"reconstruction: members + {replayed} data pages of the walked records; e2fsck -fy exit {fsck.returncode}")
    for f in files:
        print(f"  {f['file']} ({f['bytes']} bytes): "
              + ("intact" if f["intact_in_reconstruction"] else f"not intact ({f['reconstruction_bytes']} bytes read)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
