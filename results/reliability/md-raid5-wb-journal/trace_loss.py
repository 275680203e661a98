"""Would md's recovery have kept a lost file? One failed md-raid5-wb crash point, kept by --keep-failed.

    python results/reliability/md-raid5-wb-journal/trace_loss.py KEPT_POINT_DIR [--files 120] [--recovered IMAGE]

KEPT_POINT_DIR is one `raidlab crashtest md-raid5-wb ... --keep-failed DIR` point directory:
the drive images as the power cut left them (before md's recovery touched them) and
point.json. The script builds, on the host and without md, two arrays from those images
(the members mapped as raidlab.baselines.md_oracle maps them, the journal read by
raidlab.baselines.md_journal):

* "every walked page": every data page as the members hold it, then every data page of the
  journal records recovery walks from the superblock's tail, in order of sequence number;
* "md's recovery": the same, but without the pages md's recovery drops because a later flush
  payload in the walk says their stripe reached the members (md_journal.replay_split, after
  r5c_recovery_analyze_meta_block).

On each it replays ext4's journal (e2fsck -fy) and reads every file the crash point lost
(debugfs), comparing it with the file the untar wrote (rebuilt from the point's seed,
raidlab.campaigns.crash.make_tree). It also counts the dropped pages the members do not
hold as the walk last wrote them (md_journal.flush_drops): each a write md had finished on a
member, and recorded as finished, that the member's volatile cache lost to the cut.

Reads only the kept images; writes the reconstructions (temporary files unless --recovered).
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
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


def write_members(path: Path, members: list[Path]) -> None:
    """The array md's members hold, read through the engine's mapping of md's superblocks
    (raidlab.baselines.md_oracle), to `path`."""
    array, _, opened = open_md_members(members)

    async def copy(out) -> None:
        for offset in range(0, array.size, CHUNK):
            out.write(await array.read(offset, min(CHUNK, array.size - offset)))

    try:
        with open(path, "wb") as out:
            trio.run(copy, out)
    finally:
        for image in opened:
            image.close()


def replay(path: Path, pages: list[tuple[int, bytes]]) -> None:
    """Write each (array sector, 4 KiB page) over the array image `path`, in order."""
    with open(path, "r+b") as out:
        for location, page in pages:
            out.seek(location * SECTOR)
            out.write(page)


def read_files(image: Path, lost: list[str], content: dict[str, bytes]) -> tuple[int, dict[str, bool]]:
    """e2fsck -fy on `image` (its exit code), then whether each lost file reads as written."""
    fsck = subprocess.run(["e2fsck", "-fy", str(image)], capture_output=True, text=True)
    intact = {rel: subprocess.run(["debugfs", "-R", f"cat /{rel}", str(image)], capture_output=True).stdout
              == content[rel] for rel in lost}
    return fsck.returncode, intact


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("point_dir", type=Path)
    ap.add_argument("--files", type=int, default=120, help="the crash test's --files (default 120)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--recovered", type=Path, metavar="IMAGE",
                    help="keep the array as md's recovery leaves it (members + the walked pages it does not drop) in IMAGE")
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
    members = [i for i in images if i != journal]
    sb = read_superblock(members[0])
    written, dropped = md_journal.replay_split(state.chain, sb.chunk_sectors, sb.raid_disks - 1)
    page_of = dict(zip((at for _, _, at in written + dropped),
                       md_journal.log_blocks(journal, [at for _, _, at in written + dropped])))
    base = Path(tempfile.mkstemp(suffix=".img", dir=args.point_dir)[1])
    views = {"every walked page": written + dropped, "md's recovery": written}
    outputs = {"every walked page": Path(tempfile.mkstemp(suffix=".img", dir=args.point_dir)[1]),
               "md's recovery": args.recovered or Path(tempfile.mkstemp(suffix=".img", dir=args.point_dir)[1])}
    try:
        write_members(base, members)
        results = {}
        for name, entries in views.items():
            shutil.copyfile(base, outputs[name])
            replay(outputs[name], [(location, page_of[at]) for _, location, at in
                                   sorted(entries, key=lambda e: e[0].seq)])
            results[name] = read_files(outputs[name], lost, content)
    finally:
        base.unlink()
        for name, path in outputs.items():
            if not (name == "md's recovery" and args.recovered):
                path.unlink()
    files = [{"file": rel, "bytes": len(content[rel]),
              **{f"intact ({name})": results[name][1][rel] for name in views}} for rel in lost]
    report = {"point": point["point"], "seed": point["seed"], "journal": state.summary,
              "superblock_events": events, "power_cut": point.get("power_cut"),
              "walked_pages": len(written) + len(dropped), **md_journal.flush_drops(journal, members, state),
              "e2fsck_exit": {name: results[name][0] for name in views}, "lost_files": files}
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0
    print(f"point {report['point']} (seed {report['seed']}): {len(files)} lost files")
    print(f"journal: {state.summary}")
    print("superblock events: " + ", ".join(f"{name} ({e['role']}) {e['events']}" for name, e in events.items()))
    for image, cut in (point.get("power_cut") or {}).items():
        print(f"  {Path(image).name}: {cut}")
    print(f"walked data pages: {report['walked_pages']}; dropped by a later flush payload: {report['dropped_pages']}, "
          f"of which the members lack {report['dropped_pages_the_members_lack']} (stripes "
          f"{', '.join(map(str, report['dropped_stripes_lacking']))})")
    for name in views:
        print(f"{name}: e2fsck -fy exit {results[name][0]}")
    for f in files:
        print(f"  {f['file']} ({f['bytes']} bytes): "
              + ", ".join(f"{'intact' if f[f'intact ({name})'] else 'lost'} ({name})" for name in views))
    return 0


if __name__ == "__main__":
    sys.exit(main())
