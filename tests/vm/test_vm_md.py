"""md in the lab VM: a real RAID5 over three host image files, checked in the VM and on the host.

The host kernel has no md; the VM's stock Debian kernel does. mdadm creates the array over
three virtio disks backed by files in the test's directory, resync is waited for (recorded as
`resync: waited`; --assume-clean is not used), a random pattern goes through /dev/md0 with
O_DIRECT and comes back identical. Then, on the host, the member images must carry md 1.2
superblocks (magic a92b4efc at 4 KiB) that describe the array mdadm reported, and the
pattern's first stripe must sit where md's left-symmetric layout puts it, with parity equal
to the XOR of the two data chunks -- an independent check of what md wrote.
"""

from __future__ import annotations

import os
import shutil
import struct
import uuid

import pytest

from raidlab.errors import VMError
from raidlab.vm import LabVM, VMDisk, build_vm_image, guest_device

pytestmark = [pytest.mark.vm, pytest.mark.md]

MEMBER_MIB = 64
PATTERN_BYTES = 4 * 2**20
MD_MAGIC = 0xA92B4EFC
SUPERBLOCK_OFFSET = 4096  # md 1.2: 4 KiB from the start of the member


@pytest.fixture(scope="module")
def vm_image():
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
    try:
        return build_vm_image()
    except VMError as exc:
        if exc.fields.get("missing"):
            pytest.skip(f"no lab-VM kernel reachable: {exc}")
        raise


def read_md_superblock(image_path) -> dict:
    """The fields of an md 1.2 superblock this test checks (struct mdp_superblock_1)."""
    with open(image_path, "rb") as f:
        f.seek(SUPERBLOCK_OFFSET)
        raw = f.read(1024)
    magic, major, _feature_map, _pad = struct.unpack_from("<IIII", raw, 0)
    set_uuid = raw[16:32]
    level, layout, size = struct.unpack_from("<iiQ", raw, 72)
    chunksize, raid_disks = struct.unpack_from("<II", raw, 88)
    data_offset, data_size, super_offset = struct.unpack_from("<QQQ", raw, 128)
    (dev_number,) = struct.unpack_from("<I", raw, 160)
    # dev_roles[] starts at byte 256: this device's slot in the array (0xffff: spare/faulty)
    (role,) = struct.unpack_from("<H", raw, 256 + 2 * dev_number)
    return {"magic": magic, "major_version": major, "set_uuid": set_uuid, "level": level,
            "layout": layout, "size_sectors": size, "chunk_sectors": chunksize,
            "raid_disks": raid_disks, "data_offset": data_offset, "data_size": data_size,
            "super_offset": super_offset, "dev_number": dev_number, "role": role}


def _detail_fields(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" : ")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def test_raid5_over_three_virtio_disks(vm_image, tmp_path, record_property):
    images = []
    for i in range(3):
        path = tmp_path / f"member{i}.img"
        with open(path, "wb") as f:
            f.truncate(MEMBER_MIB * 2**20)
        images.append(path)
    pattern = os.urandom(PATTERN_BYTES)
    members = " ".join(guest_device(i) for i in range(3))

    with LabVM(vm_image, [VMDisk(str(p)) for p in images]) as vm:
        record_property("boot_seconds", round(vm.boot_seconds, 2))
        created = vm.run(f"mdadm --create /dev/md0 --level=5 --raid-devices=3 --run {members}",
                         timeout=120, check=True)
        assert "array /dev/md0 started" in created.stderr_text
        # Resync is waited for, not skipped: the parity check below needs a consistent array.
        vm.run("mdadm --wait /dev/md0; true", timeout=600)  # exits 1 when nothing was running
        record_property("resync", "waited")
        mdstat = vm.run("cat /proc/mdstat", check=True).stdout_text
        assert "md0 : active raid5" in mdstat and "[3/3] [UUU]" in mdstat
        assert "resync" not in mdstat and "recovery" not in mdstat

        vm.put("/run/pattern", pattern)
        vm.run("dd if=/run/pattern of=/dev/md0 bs=1M oflag=direct conv=fsync", timeout=300, check=True)
        vm.run("echo 3 > /proc/sys/vm/drop_caches", check=True)
        vm.run(f"dd if=/dev/md0 of=/run/readback bs=1M count={PATTERN_BYTES >> 20} iflag=direct",
               timeout=300, check=True)
        assert vm.run("cmp /run/pattern /run/readback").rc == 0
        assert vm.get("/run/readback") == pattern

        detail = _detail_fields(vm.run("mdadm --detail /dev/md0", check=True).stdout_text)
        assert detail["Raid Level"] == "raid5"
        assert detail["Raid Devices"] == "3" and detail["Active Devices"] == "3"
        assert detail["Failed Devices"] == "0"
        assert detail["State"].split(",")[0].strip() in ("clean", "active")
        assert detail["Layout"] == "left-symmetric"
        assert detail["Chunk Size"] == "512K"
        assert detail["Version"] == "1.2"
        array_uuid = detail["UUID"].replace(":", "")

        stopped = vm.run("mdadm --stop /dev/md0", check=True)
        assert "stopped /dev/md0" in stopped.stderr_text
        assert "md0" not in vm.run("cat /proc/mdstat").stdout_text
    assert not vm.running

    # ---- on the host: what md wrote into the image files ----
    supers = [read_md_superblock(p) for p in images]
    for sb in supers:
        assert sb["magic"] == MD_MAGIC, f"no md superblock at 4 KiB (magic {sb['magic']:#x})"
        assert sb["major_version"] == 1 and sb["super_offset"] == SUPERBLOCK_OFFSET // 512
        assert (sb["level"], sb["layout"], sb["raid_disks"]) == (5, 2, 3)  # 2 = left-symmetric
        assert sb["chunk_sectors"] == 1024
    assert len({sb["set_uuid"] for sb in supers}) == 1
    assert uuid.UUID(bytes=supers[0]["set_uuid"]).hex == array_uuid
    # mdadm builds a new RAID5 degraded and recovers onto the last member, which therefore
    # gets device number 3 but role (slot) 2.
    assert sorted(sb["role"] for sb in supers) == [0, 1, 2]

    # Stripe 0 of a left-symmetric RAID5 over 3 disks: data chunk 0 on disk 0, chunk 1 on
    # disk 1, parity on disk 2 -- at each member's data_offset.
    chunk = supers[0]["chunk_sectors"] * 512
    by_role = {sb["role"]: (path, sb) for path, sb in zip(images, supers)}
    stripe = []
    for role in (0, 1, 2):
        path, sb = by_role[role]
        with open(path, "rb") as f:
            f.seek(sb["data_offset"] * 512)
            stripe.append(f.read(chunk))
    assert stripe[0] == pattern[:chunk]
    assert stripe[1] == pattern[chunk:2 * chunk]
    parity = bytes(a ^ b for a, b in zip(stripe[0], stripe[1]))
    assert stripe[2] == parity
