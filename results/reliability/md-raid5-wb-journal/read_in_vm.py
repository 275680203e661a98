"""Read a lost file's blocks through md itself: right after assembly, and after ext4's mount.

    python results/reliability/md-raid5-wb-journal/read_in_vm.py KEPT_POINT_DIR [--files 120]

Needs root and the lab VM. The kept images (as the power cut left them) are copied, the copies
attached to a lab VM, and md assembles them there (its recovery runs). For each file the point
lost, its 1 KiB blocks (their numbers from the reconstruction trace_loss.py builds on the host,
after e2fsck -fy) are read from /dev/md0 and compared with the file the untar wrote:

1. right after `mdadm --assemble`, before anything else touches the array;
2. after `mount` and `umount` (ext4's journal replay) and dropping the guest's caches.

So it shows whether md's recovery already returns the wrong data, or whether the loss comes
later. The kept images are not changed.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from raidlab.campaigns.crash import make_tree
from raidlab.vm import LabVM, VMDisk, build_vm_image, guest_device

BLOCK = 1024


def _blocks(image: Path, rel: str) -> list[int]:
    out = subprocess.run(["debugfs", "-R", f"blocks /{rel}", str(image)], capture_output=True, text=True).stdout
    return [int(b) for b in out.split()]


def _guest_digests(vm: LabVM, blocks: list[int]) -> list[str]:
    script = "; ".join(f"dd if=/dev/md0 bs={BLOCK} skip={b} count=1 2>/dev/null | sha256sum" for b in blocks)
    return [line.split()[0] for line in vm.run(script, timeout=300, check=True).stdout.decode().splitlines()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("point_dir", type=Path)
    ap.add_argument("--files", type=int, default=120)
    args = ap.parse_args()
    point = json.loads((args.point_dir / "point.json").read_text())
    lost = [entry.split(" (")[0] for entry in point["damaged"]]
    with tarfile.open(fileobj=io.BytesIO(make_tree(point["seed"], args.files))) as tar:
        content = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="md-wb-read-", dir=args.point_dir) as tmp:
        tmp = Path(tmp)
        recon = tmp / "recon.img"
        subprocess.run([sys.executable, str(here / "trace_loss.py"), str(args.point_dir), "--files", str(args.files),
                        "--recovered", str(recon), "--json"], check=True, capture_output=True)
        subprocess.run(["e2fsck", "-fy", str(recon)], capture_output=True)
        want: dict[str, list[tuple[int, str]]] = {}
        for rel in lost:
            data = content[rel]
            want[rel] = [(b, hashlib.sha256(data[i * BLOCK:(i + 1) * BLOCK].ljust(BLOCK, b"\0")).hexdigest())
                         for i, b in enumerate(_blocks(recon, rel))]
        recon.unlink()
        images = sorted(args.point_dir.glob("*.img"))
        for image in images:
            subprocess.run(["cp", "--sparse=always", str(image), str(tmp / image.name)], check=True)
        report = {"point": point["point"], "seed": point["seed"], "files": {}}
        with LabVM(build_vm_image(), [VMDisk(str(tmp / i.name)) for i in images]) as vm:
            members = " ".join(guest_device(k) for k in range(len(images)))
            assembled = vm.run(f"mdadm --assemble --run /dev/md0 {members} 2>&1; cat /proc/mdstat", timeout=300)
            report["assemble"] = assembled.stdout.decode(errors="replace")[-800:]
            every = [b for blocks in want.values() for b, _ in blocks]
            before = dict(zip(every, _guest_digests(vm, every)))
            mount = vm.run("mkdir -p /mnt/t && mount /dev/md0 /mnt/t && umount /mnt/t && echo 3 > /proc/sys/vm/drop_caches",
                           timeout=300)
            report["mount_rc"] = mount.rc
            after = dict(zip(every, _guest_digests(vm, every))) if mount.rc == 0 else {}
        for rel, blocks in want.items():
            report["files"][rel] = {
                "blocks": len(blocks),
                "right_after_assembly": sum(before.get(b) == d for b, d in blocks),
                "after_mount": sum(after.get(b) == d for b, d in blocks) if after else None}
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
