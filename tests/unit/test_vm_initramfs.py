"""Pure parts of the lab VM runner: module order, ELF reading, cpio, framing, kernel lookup.

No VM is booted here. Where a real host file makes the check stronger (ldd on the host's own
mdadm and fio, GNU cpio listing our archive, busybox `sh -n` on the generated /init), the
test uses it; all of it runs unprivileged in well under a second each.
"""

from __future__ import annotations

import gzip
import lzma
import os
import re
import shutil
import struct
import subprocess

import pytest

from raidlab.errors import VMError
from raidlab.vm import elf, kernel, modules, protocol
from raidlab.vm.cpio import CpioEntry, with_parents, write_newc
from raidlab.vm.initramfs import CHANNEL_NAME, init_script
from raidlab.vm.qemu import direct_io_supported, guest_device
from raidlab.tools import qemu as qemu_tool

# ---------------------------------------------------------------- modules.dep

# A slice of Debian 6.1's real modules.dep / modules.softdep (after `depmod -b`).
MODULES_DEP = """\
kernel/drivers/md/md-mod.ko:
kernel/drivers/md/raid0.ko: kernel/drivers/md/md-mod.ko
kernel/drivers/md/raid456.ko: kernel/crypto/async_tx/async_raid6_recov.ko kernel/crypto/async_tx/async_memcpy.ko kernel/crypto/async_tx/async_pq.ko kernel/crypto/async_tx/async_xor.ko kernel/crypto/async_tx/async_tx.ko kernel/drivers/md/md-mod.ko kernel/crypto/xor.ko kernel/lib/raid6/raid6_pq.ko kernel/lib/libcrc32c.ko
kernel/crypto/async_tx/async_raid6_recov.ko: kernel/crypto/async_tx/async_memcpy.ko kernel/crypto/async_tx/async_pq.ko kernel/crypto/async_tx/async_xor.ko kernel/crypto/async_tx/async_tx.ko kernel/lib/raid6/raid6_pq.ko kernel/crypto/xor.ko
kernel/crypto/async_tx/async_memcpy.ko: kernel/crypto/async_tx/async_tx.ko
kernel/crypto/async_tx/async_pq.ko: kernel/crypto/async_tx/async_xor.ko kernel/crypto/async_tx/async_tx.ko kernel/lib/raid6/raid6_pq.ko kernel/crypto/xor.ko
kernel/crypto/async_tx/async_xor.ko: kernel/crypto/async_tx/async_tx.ko kernel/crypto/xor.ko
kernel/crypto/async_tx/async_tx.ko:
kernel/crypto/xor.ko:
kernel/lib/raid6/raid6_pq.ko:
kernel/lib/libcrc32c.ko:
kernel/crypto/crc32c_generic.ko:
kernel/arch/x86/crypto/crc32c-intel.ko:
kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko
kernel/fs/jbd2/jbd2.ko:
kernel/fs/mbcache.ko:
kernel/lib/crc16.ko:
"""
MODULES_SOFTDEP = """\
# Soft dependencies extracted from modules themselves.
softdep ext4 pre: crypto-crc32c
softdep jbd2 pre: crypto-crc32c
softdep libcrc32c pre: crc32c
"""


def _plan(wanted, dep=MODULES_DEP, softdep=MODULES_SOFTDEP, **kw):
    return modules.load_order(wanted, modules.parse_modules_dep(dep),
                              modules.parse_modules_softdep(softdep), **kw)


def _before(order, first, second):
    return order.index(first) < order.index(second)


def test_module_name_normalizes_dashes_and_compression_suffixes():
    assert modules.module_name("kernel/drivers/md/md-mod.ko") == "md_mod"
    assert modules.module_name("kernel/arch/x86/crypto/crc32c-intel.ko.xz") == "crc32c_intel"
    assert modules.module_name("raid456.ko.zst") == "raid456"


def test_raid456_loads_after_every_dependency_and_crc32c_generic_before_libcrc32c():
    plan = _plan(["md_mod", "raid0", "raid456"])
    order = list(plan.order)
    assert len(order) == len(set(order))
    index = modules.parse_modules_dep(MODULES_DEP)
    for name in order:  # every hard dependency precedes its module
        for dep in index[name].depends:
            assert _before(order, dep, name), (dep, name, order)
    # the soft dependency Debian's raid456 needs: crc32c resolved to crc32c_generic
    assert _before(order, "crc32c_generic", "libcrc32c")
    assert "crc32c_intel" not in order
    assert order[-1] == "raid456"
    assert plan.paths["md_mod"] == "kernel/drivers/md/md-mod.ko"
    assert plan.load_lines().splitlines()[0] == f"{order[0]} {plan.paths[order[0]]}"


def test_without_the_soft_dependency_choice_crc32c_is_left_unresolved():
    # Shows the choice matters: with no alias mapping "crc32c" is not a module, and the plan
    # says so instead of silently producing an order raid456 cannot load in.
    plan = _plan(["raid456"], choices={})
    assert "crc32c_generic" not in plan.order
    assert plan.unresolved_soft == ("crc32c",)


def test_ext4_gets_crc32c_through_the_crypto_alias():
    order = list(_plan(["ext4"]).order)
    assert sorted(order) == ["crc16", "crc32c_generic", "ext4", "jbd2", "mbcache"]
    assert order[-1] == "ext4"
    assert _before(order, "crc32c_generic", "jbd2")  # jbd2's own softdep, not only ext4's


def test_post_soft_dependencies_load_after_their_module():
    dep = "a.ko:\nb.ko:\n"
    plan = modules.load_order(["a"], modules.parse_modules_dep(dep),
                              modules.parse_modules_softdep("softdep a post: b\n"))
    assert plan.order == ("a", "b")


def test_missing_module_names_who_needs_it():
    with pytest.raises(modules.ModuleGraphError, match=r"module md_mod \(needed by raid0\)"):
        _plan(["raid0"], dep="kernel/drivers/md/raid0.ko: kernel/drivers/md/md-mod.ko\n")


def test_builtin_module_is_not_loaded_and_is_reported():
    plan = _plan(["loop", "md_mod"], builtin=["kernel/drivers/block/loop.ko"])
    assert plan.order == ("md_mod",)
    assert plan.builtin == ("loop",)


def test_dependency_cycle_is_an_error():
    with pytest.raises(modules.ModuleGraphError, match="cycle"):
        _plan(["a"], dep="a.ko: b.ko\nb.ko: a.ko\n", softdep="")


def test_malformed_modules_dep_line_is_an_error():
    with pytest.raises(modules.ModuleGraphError, match="line 1"):
        modules.parse_modules_dep("kernel/foo.ko kernel/bar.ko\n")


# ---------------------------------------------------------------- ELF

def _elf(interp=None, needed=(), runpath=None, rpath=None, notes=()):
    """A minimal 64-bit little-endian ELF with the given PT_INTERP / dynamic / note contents."""
    base = 0x400000
    strtab = bytearray(b"\0")

    def add_str(text):
        off = len(strtab)
        strtab.extend(text.encode() + b"\0")
        return off

    dyn = [(elf.DT_NEEDED, add_str(n)) for n in needed]
    if runpath:
        dyn.append((elf.DT_RUNPATH, add_str(runpath)))
    if rpath:
        dyn.append((elf.DT_RPATH, add_str(rpath)))
    note_blob = b""
    for name, ntype, desc in notes:
        nb = name.encode() + b"\0"
        note_blob += struct.pack("<III", len(nb), len(desc), ntype)
        note_blob += nb + b"\0" * (-len(nb) % 4) + desc + b"\0" * (-len(desc) % 4)
    phnum = 2 + bool(interp) + bool(notes)
    pos = 64 + 56 * phnum
    interp_bytes = (interp.encode() + b"\0") if interp else b""
    interp_off = pos
    strtab_off = interp_off + len(interp_bytes)
    dyn_off = strtab_off + len(strtab)
    dyn_off += -dyn_off % 8
    dyn.append((elf.DT_STRTAB, base + strtab_off))
    dyn.append((elf.DT_NULL, 0))
    dyn_blob = b"".join(struct.pack("<qQ", t, v) for t, v in dyn)
    note_off = dyn_off + len(dyn_blob)
    total = note_off + len(note_blob)

    def ph(p_type, off, size):
        return struct.pack("<IIQQQQQQ", p_type, 4, off, base + off, base + off, size, size, 8)

    phdrs = ph(elf.PT_LOAD, 0, total)
    if interp:
        phdrs += ph(elf.PT_INTERP, interp_off, len(interp_bytes))
    phdrs += ph(elf.PT_DYNAMIC, dyn_off, len(dyn_blob))
    if notes:
        phdrs += ph(elf.PT_NOTE, note_off, len(note_blob))
    ehdr = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8 + struct.pack(
        "<HHIQQQIHHHHHH", 2, 62, 1, base, 64, 0, 0, 64, 56, phnum, 64, 0, 0)
    body = ehdr + phdrs + interp_bytes + bytes(strtab)
    body += b"\0" * (dyn_off - len(body)) + dyn_blob + note_blob
    assert len(body) == total
    return body


def test_parse_synthetic_elf():
    data = _elf("/lib64/ld-test.so.2", ["libA.so.1", "libc.so.6"], runpath="$ORIGIN/lib:/opt/x")
    info = elf.parse_elf(data)
    assert info.interpreter == "/lib64/ld-test.so.2"
    assert info.needed == ("libA.so.1", "libc.so.6")
    assert info.runpath == ("$ORIGIN/lib", "/opt/x")
    assert not info.is_static


def test_not_elf_and_32bit_are_refused():
    with pytest.raises(elf.ElfError, match="not an ELF"):
        elf.parse_elf(b"#!/bin/sh\n")
    with pytest.raises(elf.ElfError, match="64-bit"):
        elf.parse_elf(b"\x7fELF" + bytes([1, 1]) + b"\0" * 58)


def test_library_closure_follows_runpath_origin_and_search_dirs(tmp_path):
    libdir = tmp_path / "sys"
    (tmp_path / "app" / "lib").mkdir(parents=True)
    libdir.mkdir()
    loader = tmp_path / "ld.so"
    loader.write_bytes(_elf())
    prog = tmp_path / "app" / "prog"
    prog.write_bytes(_elf(str(loader), ["libA.so"], runpath="$ORIGIN/lib"))
    (tmp_path / "app" / "lib" / "libA.so").write_bytes(_elf(None, ["libB.so"]))
    (libdir / "libB.so").write_bytes(_elf())
    got = elf.library_closure([prog], library_dirs=[str(libdir)])
    assert got == sorted([str(loader), str(tmp_path / "app" / "lib" / "libA.so"), str(libdir / "libB.so")])
    (libdir / "libB.so").unlink()
    with pytest.raises(elf.ElfError, match="needs libB.so"):
        elf.library_closure([prog], library_dirs=[str(libdir)])


def _ldd_closure(program: str) -> set[str]:
    out = subprocess.run(["ldd", program], capture_output=True, text=True, check=True).stdout
    paths = set()
    for line in out.splitlines():
        words = line.split()
        if "=>" in words and words[words.index("=>") + 1].startswith("/"):
            paths.add(words[words.index("=>") + 1])
        elif words and words[0].startswith("/"):
            paths.add(words[0])
    return {os.path.realpath(p) for p in paths}


@pytest.mark.parametrize("program", ["mdadm", "fio", "tar", "mke2fs"])
def test_library_closure_matches_ldd_on_host_programs(program):
    path = shutil.which(program) or shutil.which(program, path="/usr/sbin:/sbin")
    if path is None or shutil.which("ldd") is None:
        pytest.skip(f"{program} or ldd not installed")
    ours = {os.path.realpath(p) for p in elf.library_closure([path])}
    assert ours == _ldd_closure(path)


def test_static_busybox_needs_nothing():
    path = shutil.which("busybox")
    if path is None:
        pytest.skip("busybox not installed")
    assert elf.read_elf(path).is_static
    assert elf.library_closure([path]) == []


def test_pvh_note_detection_and_vmlinux_extraction():
    with_pvh = _elf(notes=[("Xen", elf.XEN_ELFNOTE_PHYS32_ENTRY, b"\0\0\0\x01")])
    without = _elf(notes=[("GNU", 3, b"abcd")])
    assert elf.has_pvh_entry(with_pvh)
    assert not elf.has_pvh_entry(without)
    # a bzImage-like blob: setup code, then the compressed kernel, then trailing data
    fake_setup = b"MZ" + os.urandom(3000)
    for packed in (lzma.compress(with_pvh, format=lzma.FORMAT_XZ), gzip.compress(with_pvh)):
        assert kernel.extract_vmlinux(fake_setup + packed + b"\0" * 100) == with_pvh
    assert kernel.extract_vmlinux(fake_setup + lzma.compress(b"not an elf", format=lzma.FORMAT_XZ)) is None


# ---------------------------------------------------------------- cpio

def test_cpio_parents_sorted_first_and_conflicts_refused():
    entries = with_parents([CpioEntry("usr/bin/x", "file", data=b"1"), CpioEntry("init", "file", data=b"")])
    paths = [e.path for e in entries]
    assert paths == ["init", "usr", "usr/bin", "usr/bin/x"]
    assert entries[1].kind == "dir"
    with pytest.raises(ValueError, match="both"):
        with_parents([CpioEntry("a", "file", data=b""), CpioEntry("a/b", "file", data=b"")])


def test_cpio_archive_lists_with_gnu_cpio_and_is_deterministic(tmp_path):
    if shutil.which("cpio") is None:
        pytest.skip("cpio not installed")
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(1001))
    entries = [
        CpioEntry("/bin/busybox", "file", 0o755, data=b"\x7fELF fake"),
        CpioEntry("bin/sh", "symlink", 0o777, target="/bin/busybox"),
        CpioEntry("dev/console", "chardev", 0o600, rdev=(5, 1)),
        CpioEntry("lib/data.bin", "file", 0o644, source=str(src)),
        CpioEntry("tmp", "dir", 0o1777),
    ]
    archive = tmp_path / "a.cpio"
    with open(archive, "wb") as f:
        size = write_newc(entries, f)
    assert size == archive.stat().st_size and size % 4 == 0
    listing = subprocess.run(["cpio", "-itv", "--quiet", "-F", str(archive)],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    by_name = {line.split()[-1] if "->" not in line else line.split()[-3]: line for line in listing}
    assert by_name["bin/sh"].startswith("lrwxrwxrwx") and by_name["bin/sh"].endswith("-> /bin/busybox")
    assert by_name["dev/console"].startswith("crw-------")
    assert re.search(r"\b5,\s*1\b", by_name["dev/console"]), by_name["dev/console"]
    assert by_name["tmp"].startswith("drwxrwxrwt")
    assert " root " in by_name["lib/data.bin"]
    content = subprocess.run(["cpio", "-i", "--quiet", "--to-stdout", "lib/data.bin"],
                             input=archive.read_bytes(), capture_output=True, check=True).stdout
    assert content == src.read_bytes()
    again = tmp_path / "b.cpio"
    with open(again, "wb") as f:
        write_newc(list(reversed(entries)), f)
    assert again.read_bytes() == archive.read_bytes()


# ---------------------------------------------------------------- protocol

def test_requests_are_single_ascii_lines():
    script = "printf 'a\\nb'; echo \"$HOME\" | tr a-z A-Z\n\x00\xff"
    line = protocol.encode_run(7, script)
    assert line.count(b"\n") == 1 and line.endswith(b"\n")
    verb, rid, b64 = line.split()
    assert (verb, rid) == (b"RUN", b"7")
    import base64

    assert base64.b64decode(b64).decode() == script
    put = protocol.encode_put(3, "/tmp/x y", b"\n\n@@RAIDLAB DONE\n", 0o755)
    header, payload = put.split(b"\n", 1)
    assert header.split()[:3] == [b"PUT", b"3", b"17"] and header.split()[4] == b"755"
    assert payload == b"\n\n@@RAIDLAB DONE\n"


def _stream():
    out = b"line1\n\x00\xff@@RAIDLAB DONE 9 9 9 9\n"
    return (b"@@RAIDLAB READY kver=6.1.0-56-amd64 uptime=3.2 failed= disks=vda:raidlab-d0\n"
            + b"@@RAIDLAB DONE 1 3 %d 4\n" % len(out) + out + b"err\n"
            + b"@@RAIDLAB FILE 2 -1\n"
            + b"@@RAIDLAB FILE 3 0\n"
            + b"@@RAIDLAB STORED 4 0\n@@RAIDLAB BYE 5\n"), out


def test_frame_reader_whole_and_byte_by_byte_agree():
    stream, out = _stream()
    whole = protocol.FrameReader().feed(stream)
    reader = protocol.FrameReader()
    pieces = []
    for i in range(len(stream)):
        pieces.extend(reader.feed(stream[i:i + 1]))
    assert pieces == whole
    assert [f.verb for f in whole] == ["READY", "DONE", "FILE", "FILE", "STORED", "BYE"]
    ready, done = whole[0], whole[1]
    assert ready.fields()["kver"] == "6.1.0-56-amd64" and ready.fields()["failed"] == ""
    assert done.request_id == 1 and done.args[1] == "3"
    assert done.payloads == (out, b"err\n")
    assert whole[2].payloads == () and whole[3].payloads == (b"",)
    assert reader.buffered == 0


def test_frame_reader_waits_for_the_whole_payload():
    reader = protocol.FrameReader()
    assert reader.feed(b"@@RAIDLAB DONE 1 0 5 0\nabc") == []
    assert reader.feed(b"de")[0].payloads == (b"abcde", b"")


@pytest.mark.parametrize("bad, message", [
    (b"hello\n", "expected a header"),
    (b"@@RAIDLAB WHAT 1\n", "unknown reply"),
    (b"@@RAIDLAB DONE 1 0 x 0\n", "malformed DONE"),
    (b"x" * (protocol.MAX_HEADER + 1), "no header line"),
])
def test_frame_reader_rejects_garbage(bad, message):
    with pytest.raises(protocol.ProtocolError, match=message):
        protocol.FrameReader().feed(bad)


def test_generated_init_is_valid_busybox_shell(tmp_path):
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox not installed")
    script = init_script()
    assert "@" + "AGENT@" not in script and CHANNEL_NAME in script and "raidlab_agent" in script
    path = tmp_path / "init"
    path.write_text(script)
    check = subprocess.run([busybox, "sh", "-n", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    broken = tmp_path / "broken"
    broken.write_text(script.replace("esac", "", 1))
    assert subprocess.run([busybox, "sh", "-n", str(broken)], capture_output=True).returncode != 0


# ---------------------------------------------------------------- kernel package lookup

APT_DEPENDS = """\
linux-image-amd64
  Depends: linux-image-6.1.0-56-amd64
  Recommends: <linux-image-foo>
"""


def test_parse_apt_depends_and_version():
    assert kernel.parse_apt_depends(APT_DEPENDS) == "linux-image-6.1.0-56-amd64"
    assert kernel.parse_apt_depends("x\n |Depends: linux-image-6.1.0-9-amd64\n") == "linux-image-6.1.0-9-amd64"
    with pytest.raises(VMError, match="names no linux-image"):
        kernel.parse_apt_depends("linux-image-amd64\n  Depends: initramfs-tools\n")
    assert kernel.parse_apt_show_version("Package: x\nVersion: 6.1.192-2\nSize: 1\n") == "6.1.192-2"


def test_unknown_metapackage_gives_one_actionable_line():
    if shutil.which("apt-cache") is None:
        pytest.skip("apt-cache not installed")
    with pytest.raises(VMError) as info:
        kernel.resolve_package("linux-image-raidlab-does-not-exist")
    text = str(info.value)
    assert "no kernel package for the lab VM" in text
    assert "apt-get update" in text and kernel.KERNEL_DEB_ENV in text
    assert "\n" not in text


def test_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert kernel.vm_cache_dir() == tmp_path / "raidlab" / "vm"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert kernel.vm_cache_dir() == tmp_path / "h" / ".cache" / "raidlab" / "vm"


# ---------------------------------------------------------------- QEMU argv, disks

def test_qemu_argv_orders_disks_and_picks_cache_modes():
    machine = qemu_tool.QemuMachine(
        kernel="/k", initrd="/i", append="console=ttyS0", accel="tcg",
        channel_socket="/run/s.sock",
        drives=(qemu_tool.QemuDrive("/d/a,b.img", "raidlab-d0"),
                qemu_tool.QemuDrive("/d/1.img", "raidlab-d1", cache="writeback", read_only=True),
                qemu_tool.QemuDrive("nbd+unix:///x?socket=/s", "raidlab-d2")))
    argv = qemu_tool.build_argv(machine)
    drives = [argv[i + 1] for i, a in enumerate(argv) if a == "-drive"]
    assert drives[0].startswith("file=/d/a,,b.img,") and "cache=none" in drives[0]
    assert "aio=native" in drives[0]  # asynchronous kiocbs: a FUSE file's writes overlap
    assert "cache=writeback" in drives[1] and "readonly=on" in drives[1]
    assert "aio=threads" in drives[1]  # Linux AIO needs O_DIRECT
    assert "cache=" not in drives[2]  # QEMU's NBD client: no O_DIRECT on a socket
    devices = [argv[i + 1] for i, a in enumerate(argv) if a == "-device"]
    assert devices[:3] == [f"virtio-blk-pci,drive=disk{i},serial=raidlab-d{i}" for i in range(3)]
    assert devices[3] == "virtio-serial-pci,id=vser0"  # after the disks: vda.. follow the order
    assert argv[argv.index("-accel") + 1] == "tcg,thread=multi"
    assert "-no-reboot" in argv
    kvm = qemu_tool.build_argv(qemu_tool.QemuMachine(kernel="/k", initrd=None, append="", accel="kvm"))
    assert kvm[kvm.index("-accel") + 1] == "kvm" and kvm[kvm.index("-cpu") + 1] == "host"
    with pytest.raises(ValueError):
        qemu_tool.build_argv(qemu_tool.QemuMachine(kernel="/k", initrd=None, append="", accel="hvf"))


def test_direct_io_detected_on_a_disk_filesystem(tmp_path):
    image = tmp_path / "d.img"
    image.write_bytes(b"\0" * 8192)
    assert direct_io_supported(image) is True


def test_guest_device_names():
    assert [guest_device(i) for i in (0, 1, 25)] == ["/dev/vda", "/dev/vdb", "/dev/vdz"]
    with pytest.raises(ValueError):
        guest_device(26)


def _fake_cached_tree(cache_home, modules_kept):
    import json

    tree_dir = cache_home / "raidlab" / "vm" / "kernel" / "linux-image-6.1.0-99-amd64_6.1.999-1"
    (tree_dir / "tree" / "boot").mkdir(parents=True)
    (tree_dir / "tree" / "boot" / "vmlinuz-6.1.0-99-amd64").write_bytes(b"bzImage")
    (tree_dir / "tree.json").write_text(json.dumps({
        "format": kernel.TREE_FORMAT, "package": "linux-image-6.1.0-99-amd64", "version": "6.1.999-1",
        "release": "6.1.0-99-amd64", "modules": list(modules_kept)}))


def test_without_apt_the_newest_complete_cached_kernel_is_used(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(kernel.KERNEL_DEB_ENV, raising=False)

    def no_apt(*_a, **_k):
        raise kernel._no_kernel_error("apt-cache does not know linux-image-amd64")

    monkeypatch.setattr(kernel, "resolve_package", no_apt)
    with pytest.raises(VMError, match="apt-get update"):
        kernel.prepare_kernel(["md_mod"])  # nothing cached yet
    _fake_cached_tree(tmp_path, ["md_mod", "raid456"])
    tree = kernel.prepare_kernel(["md_mod"])
    assert tree.release == "6.1.0-99-amd64" and tree.boot_image.name == "vmlinuz-6.1.0-99-amd64"
    assert kernel.availability()[0] is True
    with pytest.raises(VMError, match="no kernel package for the lab VM"):
        kernel.prepare_kernel(["md_mod", "ext4"])  # the cached tree lacks ext4


def test_kernel_deb_override_must_be_a_file(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv(kernel.KERNEL_DEB_ENV, str(tmp_path / "missing.deb"))
    with pytest.raises(VMError, match="is not a file"):
        kernel.prepare_kernel(["md_mod"])


def test_old_initramfs_images_are_pruned_per_kernel_release(tmp_path):
    from raidlab.vm.initramfs import _prune_old_images

    for age, name in enumerate(["r1-aaaa", "r1-bbbb", "r1-cccc", "r2-dddd"]):
        for suffix in (".cpio", ".json"):
            path = tmp_path / (name + suffix)
            path.write_text(name)
            os.utime(path, (1000 + age, 1000 + age))
    _prune_old_images(tmp_path, "r1", keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "r1-bbbb.cpio", "r1-bbbb.json", "r1-cccc.cpio", "r1-cccc.json", "r2-dddd.cpio", "r2-dddd.json"]


def test_apt_is_asked_again_only_when_its_state_changes(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "a_Packages").write_text("one")
    monkeypatch.setattr(kernel, "APT_STATE", (lists,))
    asked = []

    def ask(metapackage):
        asked.append(metapackage)
        return kernel.KernelPackage(f"linux-image-6.1.0-{len(asked)}-amd64", f"6.1.{len(asked)}-1")

    monkeypatch.setattr(kernel, "_ask_apt", ask)
    first = kernel.resolve_package()
    assert kernel.resolve_package() == first and len(asked) == 1
    assert kernel.resolve_package("linux-image-cloud-amd64") != first and len(asked) == 2
    assert kernel.resolve_package() == kernel.KernelPackage("linux-image-6.1.0-3-amd64", "6.1.3-1")
    (lists / "b_Packages").write_text("two")  # apt-get update brought another list
    assert kernel.resolve_package().name == "linux-image-6.1.0-4-amd64" and len(asked) == 4
    assert kernel.resolve_package().name == "linux-image-6.1.0-4-amd64" and len(asked) == 4
    monkeypatch.setattr(kernel, "APT_STATE", (tmp_path / "no" / "lists",))  # no lists: always asked
    kernel.resolve_package()
    kernel.resolve_package()
    assert len(asked) == 6
