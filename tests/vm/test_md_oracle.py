"""md as the engine's oracle: md writes, the engine reads the same member images.

One lab VM for the module: md raid0 over 2, raid5 (left-symmetric, md's default) over 3,
raid10 (near=2, md's default) over 4, all created with mdadm's defaults for placement, and on
smaller members md's other RAID 5 layouts and its RAID 4, each over 4 members with a 64 KiB
chunk. Every redundant array is created with --assume-clean: the members are fresh zeroed
images, whose parity and copies already agree, so md's initial resync would only rewrite what
is there; placement does not depend on it. md fills each whole array with random data (made
on the host, read by the guest from one more disk) and reads it all back onto another disk,
with O_DIRECT both ways (dd in the guest; the bytes are moved by QEMU, not by the emulated
processor); the host checks that md read back what it was given and keeps a SHA-256 per MiB. After the arrays are stopped and the VM is gone, the engine opens the images
read-only, maps them from md's 1.2 superblocks (data offset, chunk, level, layout, slots), and
must produce the same per-MiB digests over the whole array -- every byte -- and again with
one member image removed (raid5: parity reconstruction; raid10: the other copy).
"""

from __future__ import annotations

import hashlib
import os
import shutil

import pytest
import trio

from raidlab.baselines.md_oracle import open_md_members
from raidlab.errors import VMError
from raidlab.vm import LabVM, VMDisk, build_vm_image, guest_device

pytestmark = [pytest.mark.vm, pytest.mark.md, pytest.mark.long]

MEMBER_MIB = 24
SMALL_MEMBER_MIB = 8
PATTERN_MIB = 3 * MEMBER_MIB  # at least the largest array (md2: raid10 over 4 members)
MiB = 1 << 20
ARRAYS = {  # md device: (level, first disk index, disks, extra mdadm options)
    "md0": (0, 0, 2, ""),
    "md1": (5, 2, 3, ""),
    "md2": (10, 5, 4, ""),
}
OTHER_ALGORITHMS = ("left-asymmetric", "right-asymmetric", "right-symmetric", "parity-first", "parity-last")
for _i, _algorithm in enumerate(OTHER_ALGORITHMS):
    ARRAYS[f"md{3 + _i}"] = (5, 9 + 4 * _i, 4, f"--layout={_algorithm} --chunk=64")
ARRAYS["md8"] = (4, 9 + 4 * len(OTHER_ALGORITHMS), 4, "--chunk=64")
FIRST_SMALL = 9  # images from here on are SMALL_MEMBER_MIB


@pytest.fixture(scope="module")
def md_written(tmp_path_factory):
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
    try:
        image = build_vm_image()
    except VMError as exc:
        if exc.fields.get("missing"):
            pytest.skip(f"no lab-VM kernel reachable: {exc}")
        raise
    base = tmp_path_factory.mktemp("md-oracle")
    images = []
    for i in range(sum(n for _l, _f, n, _o in ARRAYS.values())):
        path = base / f"m{i}.img"
        with open(path, "wb") as f:
            f.truncate((MEMBER_MIB if i < FIRST_SMALL else SMALL_MEMBER_MIB) * MiB)
        images.append(path)
    # The data md writes: random bytes made on the host (the guest's /dev/urandom and
    # sha256sum would run on the emulated processor), given to the guest as one more disk.
    pattern = base / "pattern.img"
    pattern.write_bytes(os.urandom(PATTERN_MIB * MiB))
    out = {}
    # The lab VM takes at most 26 disks: the default arrays in one boot, the others in a second.
    for group in ({md: a for md, a in ARRAYS.items() if a[1] < FIRST_SMALL},
                  {md: a for md, a in ARRAYS.items() if a[1] >= FIRST_SMALL}):
        out.update(_write_arrays(image, images, pattern, group))
    return out


def _write_arrays(image, images, pattern, arrays) -> dict:
    """Boot a VM over the images `arrays` use, the pattern disk and a read-back disk; create
    each array, write the pattern's first bytes over all of it, and read the whole array back
    through md (O_DIRECT both ways) onto the read-back disk. Return each array's size, the
    per-MiB digests of what md read back, mdadm --detail and member images."""
    first_image = min(first for _l, first, _n, _o in arrays.values())
    last_image = max(first + n for _l, first, n, _o in arrays.values())
    disks = [VMDisk(str(p)) for p in images[first_image:last_image]]
    readback = pattern.with_name(f"readback-{first_image}.img")
    with open(readback, "wb") as f:
        f.truncate(sum(os.path.getsize(images[first]) * n for _l, first, n, _o in arrays.values()))
    source, target = guest_device(len(disks)), guest_device(len(disks) + 1)
    places = {}
    with LabVM(image, [*disks, VMDisk(str(pattern), read_only=True), VMDisk(str(readback))]) as vm:
        for md, (level, first, n, options) in arrays.items():
            members = " ".join(guest_device(first - first_image + k) for k in range(n))
            clean = "--assume-clean" if level != 0 else ""
            vm.run(f"mdadm --create /dev/{md} --run --level={level} --raid-devices={n} {clean} {options} "
                   f"{members} < /dev/null", timeout=120, check=True)
        at = 0
        for md, (level, first, n, _options) in arrays.items():
            size = int(vm.run(f"blockdev --getsize64 /dev/{md}", check=True).stdout_text)
            assert size % MiB == 0 and size <= os.path.getsize(pattern)
            vm.run(f"dd if={source} of=/dev/{md} bs=1M count={size // MiB} iflag=direct oflag=direct conv=fsync "
                   f"2>/dev/null", timeout=600, check=True)
            vm.run(f"dd if=/dev/{md} of={target} bs=1M seek={at // MiB} count={size // MiB} iflag=direct "
                   f"oflag=direct conv=fsync 2>/dev/null", timeout=600, check=True)
            detail = vm.run(f"mdadm --detail /dev/{md}", check=True).stdout_text
            places[md] = (at, size, detail, images[first:first + n])
            at += size
        for md in arrays:
            vm.run(f"mdadm --stop /dev/{md}", timeout=120, check=True)
    assert not vm.running
    data, back = pattern.read_bytes(), readback.read_bytes()
    out = {}
    for md, (at, size, detail, members) in places.items():
        assert back[at:at + size] == data[:size], f"{md}: md did not read back what was written to it"
        out[md] = {"size": size, "detail": detail, "images": members,
                   "digests": [hashlib.sha256(back[at + offset:at + offset + MiB]).hexdigest()
                               for offset in range(0, size, MiB)]}
    return out


def engine_digests(paths, missing=frozenset()) -> tuple[int, list[str], dict]:
    array, supers, opened = open_md_members(paths, set(missing))

    async def read_all():
        digests = []
        for offset in range(0, array.size, MiB):
            digests.append(hashlib.sha256(await array.read(offset, MiB)).hexdigest())
        return digests

    try:
        digests = trio.run(read_all)
    finally:
        for image in opened:
            image.close()
    return array.size, digests, {"layout": array.layout, "supers": supers, "counters": array.counters}


@pytest.mark.parametrize("md,arch", [("md0", "raid0"), ("md1", "raid5"), ("md2", "raid10")])
def test_engine_reads_every_byte_md_wrote(md_written, md, arch):
    written = md_written[md]
    size, digests, info = engine_digests(written["images"])
    assert info["layout"].name == arch
    assert size == written["size"], "the engine's capacity differs from md's array size"
    assert len(digests) == len(written["digests"])
    bad = [i for i, (a, b) in enumerate(zip(digests, written["digests"])) if a != b]
    assert not bad, f"{arch}: MiB {bad[:10]} differ from what md wrote"
    # md chose the geometry; the engine took it from the superblocks.
    sb = info["supers"][0]
    assert f"Chunk Size : {sb.chunk_bytes // 1024}K" in written["detail"]
    assert info["layout"].data_offset == sb.data_offset > 0
    if arch == "raid10":
        assert info["layout"].layout == "n2" and "Layout : near=2" in written["detail"]


@pytest.mark.parametrize("md,removed", [("md1", 0), ("md1", 2), ("md2", 1), ("md2", 3)])
def test_engine_degraded_read_reconstructs_md_data(md_written, md, removed):
    written = md_written[md]
    size, digests, info = engine_digests(written["images"], missing={removed})
    assert digests == written["digests"]
    assert info["counters"]["degraded_reads"] == len(digests)
    if md == "md1":  # raid5: the removed member's chunks came from parity
        assert info["counters"]["reconstructed_reads"] > 0


@pytest.mark.parametrize("md", [f"md{3 + i}" for i in range(len(OTHER_ALGORITHMS))] + ["md8"])
def test_engine_reads_md_s_other_raid5_layouts_and_raid4_whole_and_degraded(md_written, md):
    """Each of md's RAID 5 layouts (and its RAID 4, the parity on the last member) is the
    engine's raid5 with that algorithm, byte for byte, and with any one member missing."""
    written = md_written[md]
    level = ARRAYS[md][0]
    algorithm = "parity-last" if level == 4 else OTHER_ALGORITHMS[int(md[2:]) - 3]
    size, digests, info = engine_digests(written["images"])
    assert info["layout"].name == "raid5" and info["layout"].algorithm == algorithm
    assert size == written["size"] and digests == written["digests"]
    if level == 5:
        assert f"Layout : {algorithm}" in written["detail"]
    for removed in range(ARRAYS[md][2]):
        assert engine_digests(written["images"], missing={removed})[1] == written["digests"], removed


def test_raid0_cannot_lose_a_member(md_written):
    with pytest.raises(OSError):
        engine_digests(md_written["md0"]["images"], missing={1})
