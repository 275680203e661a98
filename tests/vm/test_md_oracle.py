"""md as the engine's oracle: md writes, the engine reads the same member images.

One lab VM for the module: md raid0 over 2, raid5 (left-symmetric, md's default) over 3,
raid10 (near=2, md's default) over 4, all created with mdadm's defaults, and on smaller
members md's other RAID 5 layouts and its RAID 4, each over 4 members with a 64 KiB chunk. md fills each whole array with random data (from the guest's /dev/urandom) and
reports a SHA-256 per MiB of the array, read back through md with O_DIRECT. After the arrays
are stopped and the VM is gone, the engine opens the images read-only, maps them from md's
1.2 superblocks (data offset, chunk, level, layout, slots), and must produce the same
per-MiB digests over the whole array -- every byte -- and again with one member image
removed (raid5: parity reconstruction; raid10: the other copy).
"""

from __future__ import annotations

import hashlib
import shutil

import pytest
import trio

from raidlab.baselines.md_oracle import open_md_members
from raidlab.errors import VMError
from raidlab.vm import LabVM, VMDisk, build_vm_image, guest_device

pytestmark = [pytest.mark.vm, pytest.mark.md]

MEMBER_MIB = 24
SMALL_MEMBER_MIB = 8
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
    out = {}
    # The lab VM takes at most 26 disks: the default arrays in one boot, the others in a second.
    for group in ({md: a for md, a in ARRAYS.items() if a[1] < FIRST_SMALL},
                  {md: a for md, a in ARRAYS.items() if a[1] >= FIRST_SMALL}):
        out.update(_write_arrays(image, images, group))
    return out


def _write_arrays(image, images, arrays) -> dict:
    """Boot a VM over the images `arrays` use, create each array, fill it with random data,
    and return each one's size, per-MiB digests (read back through md), mdadm --detail and
    member images."""
    first_image = min(first for _l, first, _n, _o in arrays.values())
    last_image = max(first + n for _l, first, n, _o in arrays.values())
    out = {}
    with LabVM(image, [VMDisk(str(p)) for p in images[first_image:last_image]]) as vm:
        for md, (level, first, n, options) in arrays.items():
            members = " ".join(guest_device(first - first_image + k) for k in range(n))
            vm.run(f"mdadm --create /dev/{md} --run --level={level} --raid-devices={n} {options} {members} "
                   f"< /dev/null", timeout=120, check=True)
        for md in arrays:
            vm.run(f"mdadm --wait /dev/{md}; true", timeout=600)
        for md, (level, first, n, _options) in arrays.items():
            size = int(vm.run(f"blockdev --getsize64 /dev/{md}", check=True).stdout_text)
            assert size % MiB == 0
            vm.run(f"dd if=/dev/urandom of=/dev/{md} bs=1M count={size // MiB} oflag=direct conv=fsync 2>/dev/null",
                   timeout=600, check=True)
            vm.run("echo 3 > /proc/sys/vm/drop_caches", check=True)
            digests = vm.run(
                f"i=0; while [ $i -lt {size // MiB} ]; do dd if=/dev/{md} bs=1M skip=$i count=1 iflag=direct "
                f"2>/dev/null | sha256sum | cut -d' ' -f1; i=$((i + 1)); done", timeout=600, check=True
            ).stdout_text.split()
            detail = vm.run(f"mdadm --detail /dev/{md}", check=True).stdout_text
            out[md] = {"size": size, "digests": digests, "detail": detail,
                       "images": images[first:first + n]}
        for md in arrays:
            vm.run(f"mdadm --stop /dev/{md}", timeout=120, check=True)
    assert not vm.running
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
