"""ext4 on a loop device over an emulated disk file: mkfs, mount, write a file tree, unmount,
remount (so reads come from the disk, not the page cache), verify checksums, unmount,
`e2fsck -fn` clean. Once on the `none` model and once on the HP C2200A model (a small disk:
the model's ~30 ms per request is real time here).
"""

from __future__ import annotations

import hashlib
import os
import random
import time

import pytest

from raidlab.export.background import serve_in_background
from raidlab.export.serve import ServeRequest
from raidlab.tools import mkfs
from raidlab.tools import mount as mount_tool

from lab_leftovers import leftovers

pytestmark = [pytest.mark.root, pytest.mark.live]

MiB = 1 << 20


def _write_tree(root, seed: int, files: int, max_size: int) -> dict[str, str]:
    rng = random.Random(seed)
    sums = {}
    for i in range(files):
        sub = root / f"dir{i % 4}"
        sub.mkdir(exist_ok=True)
        data = rng.randbytes(rng.randint(0, max_size))
        path = sub / f"file{i}.bin"
        path.write_bytes(data)
        sums[str(path.relative_to(root))] = hashlib.sha256(data).hexdigest()
    return sums


def _checksums(root) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if rel.startswith("lost+found"):
                continue
            with open(path, "rb") as fh:
                out[rel] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.mark.parametrize("model,size,files,max_size", [
    ("none", 64 * MiB, 40, 256 * 1024),
    ("hp-c2200a", 16 * MiB, 8, 64 * 1024),
])
def test_ext4_on_an_emulated_disk(tmp_path, model, size, files, max_size):
    req = ServeRequest(disks=1, model=model, size=size, name=f"ext4-{model}",
                       home=str(tmp_path))
    mnt = tmp_path / "fs"
    mnt.mkdir()
    with serve_in_background(req) as lab:
        [d0] = lab.disks
        mkfs.mkfs_ext4(d0.device, label="raidlab")
        mount_tool.mount(d0.device, mnt)
        try:
            written = _write_tree(mnt, seed=len(model), files=files, max_size=max_size)
        finally:
            mount_tool.umount(mnt)
        reads_before = lab.call(d0.target.statistics)["reads"]
        mount_tool.mount(d0.device, mnt, options=["ro"])
        try:
            assert _checksums(mnt) == written
        finally:
            mount_tool.umount(mnt)
        disk = lab.call(d0.target.statistics)
        assert disk["reads"] > reads_before  # the verify read the emulated disk
        assert disk["flushes"] >= 1          # ext4's journal commits flushed through FUSE
        result = mkfs.e2fsck(d0.device)
        assert result.clean, result.output
        lab_dir = lab.session.lab.path
    assert leftovers(lab_dir, req.name) == {}
    assert not mount_tool.is_mount_point(mnt)


def test_a_mount_left_on_a_lab_disk_is_released_with_the_lab(tmp_path):
    """A workload that forgets to unmount: the lab unmounts it before detaching the loop."""
    req = ServeRequest(disks=1, model="none", size=32 * MiB, name="forgot", home=str(tmp_path))
    mnt = tmp_path / "left"
    mnt.mkdir()
    with serve_in_background(req) as lab:
        [d0] = lab.disks
        mkfs.mkfs_ext4(d0.device)
        mount_tool.mount(d0.device, mnt)
        (mnt / "f").write_bytes(b"x" * 10000)
        lab_dir = lab.session.lab.path
    assert not mount_tool.is_mount_point(mnt)
    assert leftovers(lab_dir, req.name) == {}
    assert any("unmounted" in line and str(mnt) in line for line in lab.status_lines)


def _sectors_written(device: str) -> int:
    return int((open(f"/sys/block/{os.path.basename(device)}/stat").read().split())[6])


@pytest.mark.parametrize("lazy_init", [True, False], ids=["-E nodiscard (lazy init)", "mkfs_argv"])
def test_a_benchmark_ext4_writes_nothing_while_idle_after_mount(tmp_path, lazy_init):
    """mkfs_argv's ext4 has its inode tables zeroed by mkfs; mkfs.ext4's default leaves that to
    the kernel's ext4lazyinit thread after the first mount (16 MiB of a 1 GiB file system with
    1 KiB blocks), which would write into the measured workload."""
    import time

    from raidlab.tools import losetup
    from raidlab.tools.base import run

    image = tmp_path / "fs.img"
    with open(image, "wb") as fh:
        fh.truncate(1 << 30)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    loop = losetup.attach(image, direct_io=False)
    try:
        if lazy_init:  # the command line a live run used before
            argv = ["mkfs.ext4", "-F", "-q", "-E", "nodiscard", "-b", "1024", loop.device]
        else:
            argv = mkfs.mkfs_argv("ext4", loop.device, ["-b", "1024"])
        run(argv, timeout=300)
        mount_tool.mount(loop.device, mnt, fstype="ext4")
        try:
            before = _sectors_written(loop.device)
            time.sleep(10)
            written = _sectors_written(loop.device) - before
        finally:
            mount_tool.umount(mnt)
    finally:
        losetup.detach_and_wait(loop.device, backing=str(image))
    if lazy_init:
        # the kernel's ext4lazyinit zeroes inode tables (MiBs when the machine is idle; it
        # paces itself, so less under load): something is written while nothing runs
        assert written > 0, written
    else:
        assert written == 0


@pytest.mark.parametrize("held_for", [0.5, None], ids=["transient opener", "held"])
def test_detach_waits_out_a_transient_opener(tmp_path, held_for):
    """A device detached while something has it open (udev probing a device attached a
    moment ago) is only marked for autoclear; a short-lived opener must not make the device
    count as held, one that keeps it open must."""
    import threading

    from raidlab.tools import losetup

    image = tmp_path / "d.img"
    with open(image, "wb") as fh:
        fh.truncate(16 << 20)
    loop = losetup.attach(image, direct_io=False)
    fd = os.open(loop.device, os.O_RDONLY)
    closer = threading.Timer(held_for, os.close, (fd,)) if held_for else None
    try:
        if closer:
            closer.start()
        released = losetup.detach_and_wait(loop.device, grace=2.0)
        assert released is (held_for is not None)
        assert bool(losetup.sysfs_state(loop.device)) is (held_for is None)
    finally:
        if closer:
            closer.join()
        else:
            os.close(fd)
        deadline = time.monotonic() + 5
        while losetup.sysfs_state(loop.device) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert not losetup.sysfs_state(loop.device)


def test_a_loop_number_taken_by_another_file_is_left_alone(tmp_path):
    """A loop device is known by its number, and a freed number goes to the next attach:
    detaching by number with the file it should serve leaves another's device attached."""
    from raidlab.tools import losetup

    ours, theirs = tmp_path / "ours.img", tmp_path / "theirs.img"
    for image in (ours, theirs):
        with open(image, "wb") as fh:
            fh.truncate(16 << 20)
    loop = losetup.attach(ours, direct_io=False)
    assert losetup.detach_and_wait(loop.device, backing=str(ours))
    other = losetup.attach(theirs, direct_io=False)   # may reuse the number
    try:
        assert losetup.serves(other.device, str(theirs)) and not losetup.serves(other.device, str(ours))
        assert losetup.detach_and_wait(other.device, backing=str(ours))   # not ours: released for us
        assert losetup.serves(other.device, str(theirs))                  # and still theirs
    finally:
        losetup.detach_and_wait(other.device, backing=str(theirs))
    assert not losetup.serves(other.device, str(theirs))
