"""e2fsck through raidlab.tools.mkfs on a real ext4 image file: the read-only check finds
damage and changes nothing; the repair (-y, the crash campaign's step in the papers' world)
mends it, and the check is clean after."""

from __future__ import annotations

import subprocess

from raidlab.tools.mkfs import e2fsck


def test_the_check_finds_damage_and_the_repair_mends_it(tmp_path):
    image = tmp_path / "fs.img"
    image.write_bytes(b"")
    subprocess.run(["truncate", "-s", "16M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    # The root directory's inode marked free in the inode bitmap.
    subprocess.run(["debugfs", "-w", "-R", "freei <2>", str(image)], check=True, capture_output=True)
    found = e2fsck(image)
    assert not found.clean and e2fsck(image).returncode == found.returncode  # -n changed nothing
    repaired = e2fsck(image, repair=True)
    assert repaired.returncode & 1  # FILE SYSTEM WAS MODIFIED
    assert e2fsck(image).clean
