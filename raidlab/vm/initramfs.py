"""The lab VM's whole userland: one initramfs built by the toolkit, cached by its inputs.

Why an initramfs and no root filesystem image: the guest needs a shell, md's tools and the
workload programs, nothing that must survive a reboot. An initramfs is one file QEMU hands to
the kernel, needs no root to build (see cpio.py), and the guest runs from RAM, so member
disks are the only block devices and their timing is not polluted by a system disk.

Contents:
* busybox-static with its applet links (sh, dd, insmod, mount, poweroff, cp, rm, ...);
* host programs the papers' workloads and md baselines need, with the exact shared
  libraries they use on the host (elf.py): mdadm, dmsetup, bcache-tools, e2fsprogs, GNU
  tar, fio, postmark, bonnie++. The VM runs the *same binaries* as a native run would;
* the kernel modules in WANTED_MODULES and their dependencies, ordered by modules.py and
  loaded at boot, and ON_DEMAND_MODULES (device mapper, bcache) with theirs, loaded by the
  architectures that use them, with a module index made by `depmod -b` over the initramfs
  tree (so a guest `modprobe` finds them, and anything extra a user adds);
* /init: mounts, loads the modules in order, links each disk under /dev/raidlab/<serial>,
  then runs the command agent (protocol.py) on the virtio-serial port.

The archive is uncompressed: under TCG decompression is emulated instruction by instruction
and costs more boot time than copying the larger file.

Cache: ${XDG_CACHE_HOME:-~/.cache}/raidlab/vm/initramfs/<release>-<key>.cpio, where key is a
hash of every input (kernel package, module files, program and library contents, the init
script, the format version). Same inputs, same file, no rebuild.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from raidlab.errors import MissingToolError, VMError
from raidlab.vm import elf
from raidlab.vm.cpio import CpioEntry, write_newc
from raidlab.vm.kernel import KernelTree, Progress, _quiet, prepare_kernel, vm_cache_dir
from raidlab.vm.modules import LoadPlan
from raidlab.vm.protocol import GUEST_AGENT
from raidlab.tools.base import PACKAGES, require, run
from raidlab.workloads.cprogram import PROGRAMS, program

FORMAT_VERSION = 1
CHANNEL_NAME = "raidlab.cmd"

# What the lab VM loads at boot. Dependencies (virtio core, async_tx, xor, raid6_pq, libcrc32c,
# crc32c_generic, jbd2, mbcache, crc16) are added by modules.load_order.
WANTED_MODULES: tuple[str, ...] = (
    "virtio_pci", "virtio_blk", "virtio_console",        # disks and the command port
    "md_mod", "raid0", "raid1", "raid10", "raid456",     # the md baselines
    "loop",                                              # engine volumes as files, images
    "ext4",                                              # the papers' workloads run on ext4
)

# In the initramfs but loaded only by the architectures that use them (the guest's modprobe,
# over the module index built here): the kernel's caches, descendants of the papers' ideas.
ON_DEMAND_MODULES: tuple[str, ...] = ("dm_mod", "dm_writecache", "dm_cache", "dm_cache_smq", "bcache")

# Host programs copied into the VM (name -> aliases created as links to it).
HOST_PROGRAMS: dict[str, tuple[str, ...]] = {
    "mdadm": (),
    "dmsetup": (),
    "make-bcache": (),
    "bcache-super-show": (),
    "mke2fs": ("mkfs.ext4", "mkfs.ext3", "mkfs.ext2"),
    "e2fsck": ("fsck.ext4", "fsck.ext3", "fsck.ext2"),
    "tune2fs": ("e2label",),
    "dumpe2fs": (),
    "tar": (),
    "fio": (),
    "postmark": (),
    "bonnie++": (),
}

HOST_CONFIG_FILES = ("/etc/mke2fs.conf",)

GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

INIT_SCRIPT = r"""#!/bin/sh
# raidlab lab-VM /init (PID 1). Built by raidlab/vm/initramfs.py; see its header.
export PATH=@PATH@ HOME=/root TERM=dumb
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/shm /dev/pts /run /tmp /root /mnt
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
ln -sf /proc/self/fd /dev/fd
hostname raidlab-vm
kver=$(uname -r)
failed=
while read -r name path; do
    [ -d "/sys/module/$name" ] && continue
    insmod "/lib/modules/$kver/$path" || failed="$failed${failed:+,}$name"
done < /etc/raidlab/modules.load
echo "raidlab-init: modules loaded (failed: ${failed:-none})"

port=
i=0
while [ $i -lt 200 ]; do
    for p in /sys/class/virtio-ports/*; do
        [ "$(cat "$p/name" 2>/dev/null)" = "@CHANNEL@" ] && port=/dev/${p##*/}
    done
    [ -n "$port" ] && [ -c "$port" ] && break
    port=
    i=$((i + 1))
    sleep 0.05
done
if [ -z "$port" ]; then
    echo "raidlab-init: no virtio-serial port named @CHANNEL@; powering off"
    poweroff -f
fi

mkdir -p /dev/raidlab
disks=
for b in /sys/block/vd*; do
    [ -e "$b" ] || continue
    dev=${b##*/}
    serial=$(cat "$b/serial" 2>/dev/null)
    [ -n "$serial" ] && ln -sf "/dev/$dev" "/dev/raidlab/$serial"
    disks="$disks${disks:+,}$dev:$serial"
done

@AGENT@
up=$(cut -d' ' -f1 /proc/uptime)
raidlab_agent "$port" "kver=$kver uptime=$up failed=$failed disks=$disks"
echo "raidlab-init: command channel closed; powering off"
sync
poweroff -f
"""


def init_script() -> str:
    return (INIT_SCRIPT.replace("@PATH@", GUEST_PATH)
            .replace("@CHANNEL@", CHANNEL_NAME)
            .replace("@AGENT@", GUEST_AGENT.strip("\n")))


@dataclasses.dataclass(frozen=True)
class VMImage:
    """Everything QEMU needs to boot the lab VM: kernel, initramfs, and what went into them."""

    kernel: KernelTree
    initramfs: Path
    manifest: dict

    @property
    def boot_image(self) -> Path:
        return self.kernel.boot_image

    @property
    def module_order(self) -> list[str]:
        return list(self.manifest["modules"]["order"])


def _sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _host_program(name: str) -> str:
    try:
        return require(name)
    except MissingToolError:
        raise MissingToolError(name, PACKAGES.get(name) or _PROGRAM_PACKAGES.get(name)) from None


_PROGRAM_PACKAGES = {"mke2fs": "e2fsprogs", "tune2fs": "e2fsprogs", "dumpe2fs": "e2fsprogs"}


@dataclasses.dataclass
class _Inputs:
    plan: LoadPlan                    # loaded at boot
    content: LoadPlan                 # in the archive: the boot plan and the on-demand modules
    busybox: str
    programs: dict[str, str]          # name -> host path (as found on PATH)
    libraries: list[str]
    config_files: list[str]
    init: str
    extra_programs: dict[str, str] = dataclasses.field(default_factory=dict)  # guest path -> host file

    def key(self, kernel: KernelTree) -> str:
        h = hashlib.sha256()

        def add(*parts: str) -> None:
            for part in parts:
                h.update(part.encode())
                h.update(b"\0")

        add("format", str(FORMAT_VERSION), kernel.package.name, kernel.package.version, kernel.release)
        for name in self.content.order:
            add("module", name, self.content.paths[name], _sha256(kernel.modules_dir / self.content.paths[name]))
        add("boot", *self.plan.order)
        add("busybox", _sha256(self.busybox))
        for name, path in sorted(self.programs.items()):
            add("program", name, path, _sha256(path), *HOST_PROGRAMS.get(name, ()))
        for path in self.libraries:
            add("library", path, _sha256(path))
        for path in self.config_files:
            add("config", path, _sha256(path))
        for guest, host in sorted(self.extra_programs.items()):
            add("extra", guest, _sha256(host))
        add("init", self.init)
        return h.hexdigest()


def _gather(kernel: KernelTree, modules: Iterable[str], programs: Iterable[str],
            on_demand: Iterable[str] = ON_DEMAND_MODULES) -> _Inputs:
    modules = tuple(modules)
    plan = kernel.load_plan(modules)
    content = kernel.load_plan(modules + tuple(m for m in on_demand if m not in modules))
    busybox = _host_program("busybox")
    if not elf.read_elf(busybox).is_static:
        raise VMError(f"{busybox} is not statically linked", hint="apt-get install busybox-static")
    found = {name: _host_program(name) for name in programs}
    try:
        libraries = elf.library_closure(found.values())
    except elf.ElfError as exc:
        raise VMError(f"cannot collect libraries for the lab VM: {exc}") from exc
    config = [p for p in HOST_CONFIG_FILES if os.path.exists(p)]
    return _Inputs(plan, content, busybox, found, libraries, config, init_script(), workload_programs())


def workload_programs() -> dict[str, str]:
    """Static workload programs built by the toolkit itself (raidlab.workloads.cprogram: the
    TPS client, seqfile) as /usr/local/bin/NAME, those that build. Skipped otherwise: the
    workloads also copy theirs in with put."""
    out = {}
    for name in PROGRAMS:
        try:
            binary = program(name)
        except Exception:  # no gcc / libc.a: the workload reports that itself when it runs
            continue
        if elf.read_elf(str(binary)).is_static:
            out[f"usr/local/bin/{name}"] = str(binary)
    return out


def _busybox_entries(busybox: str) -> list[CpioEntry]:
    entries = [CpioEntry("bin/busybox", "file", 0o755, source=busybox)]
    applets = run([busybox, "--list-full"], timeout=30).stdout.split()
    for applet in applets:
        applet = applet.strip("/")
        if applet and applet != "bin/busybox":
            entries.append(CpioEntry(applet, "symlink", 0o777, target="/bin/busybox"))
    return entries


def _module_entries(kernel: KernelTree, plan: LoadPlan, staging: Path) -> list[CpioEntry]:
    """Copy the planned modules into a staging tree, run depmod -b over it, list it."""
    mod_root = staging / "lib" / "modules" / kernel.release
    mod_root.mkdir(parents=True)
    for name in plan.order:
        rel = plan.paths[name]
        (mod_root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kernel.modules_dir / rel, mod_root / rel)
    for index in ("modules.order", "modules.builtin", "modules.builtin.modinfo"):
        if (kernel.modules_dir / index).exists():
            shutil.copyfile(kernel.modules_dir / index, mod_root / index)
    run(["depmod", "-b", str(staging), kernel.release], timeout=300)
    entries = []
    for path in sorted(mod_root.rglob("*")):
        if path.is_file():
            entries.append(CpioEntry(str(path.relative_to(staging)), "file", 0o644, data=path.read_bytes()))
    return entries


def _entries(kernel: KernelTree, inputs: _Inputs, staging: Path, manifest: dict) -> list[CpioEntry]:
    by_path: dict[str, CpioEntry] = {}

    def add(entry: CpioEntry) -> None:
        by_path[entry.path.strip("/")] = entry

    for d in ("proc", "sys", "dev", "run", "tmp", "root", "mnt", "var/tmp", "etc/raidlab"):
        add(CpioEntry(d, "dir", 0o1777 if d in ("tmp", "var/tmp") else 0o755))
    add(CpioEntry("dev/console", "chardev", 0o600, rdev=(5, 1)))
    add(CpioEntry("dev/null", "chardev", 0o666, rdev=(1, 3)))
    for entry in _busybox_entries(inputs.busybox):
        add(entry)
    # Host programs after busybox: where both have a name (tar, mke2fs), the real one wins.
    for name, path in inputs.programs.items():
        add(CpioEntry(path, "file", 0o755, source=os.path.realpath(path)))
        for alias in HOST_PROGRAMS.get(name, ()):
            add(CpioEntry(os.path.join(os.path.dirname(path), alias), "symlink", 0o777,
                          target=os.path.basename(path)))
    for lib in inputs.libraries:
        add(CpioEntry(lib, "file", 0o755, source=os.path.realpath(lib)))
    for conf in inputs.config_files:
        add(CpioEntry(conf, "file", 0o644, source=conf))
    for guest, host in inputs.extra_programs.items():
        add(CpioEntry(guest, "file", 0o755, source=host))
    for entry in _module_entries(kernel, inputs.content, staging):
        add(entry)
    add(CpioEntry("etc/passwd", "file", 0o644, data=b"root:x:0:0:root:/root:/bin/sh\n"))
    add(CpioEntry("etc/group", "file", 0o644, data=b"root:x:0:\n"))
    add(CpioEntry("etc/mtab", "symlink", 0o777, target="/proc/mounts"))
    add(CpioEntry("etc/fstab", "file", 0o644, data=b""))
    add(CpioEntry("etc/raidlab/modules.load", "file", 0o644, data=inputs.plan.load_lines().encode()))
    add(CpioEntry("etc/raidlab/build.json", "file", 0o644,
                  data=(json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()))
    add(CpioEntry("init", "file", 0o755, data=inputs.init.encode()))
    return list(by_path.values())


def build_initramfs(
    kernel: KernelTree,
    modules: Iterable[str] = WANTED_MODULES,
    programs: Iterable[str] = tuple(HOST_PROGRAMS),
    progress: Progress | None = None,
    force: bool = False,
) -> VMImage:
    """Build (or find in the cache) the initramfs for `kernel`."""
    progress = progress or _quiet
    inputs = _gather(kernel, modules, programs)
    key = inputs.key(kernel)
    out_dir = vm_cache_dir() / "initramfs"
    target = out_dir / f"{kernel.release}-{key[:16]}.cpio"
    manifest_path = target.with_suffix(".json")
    if target.exists() and manifest_path.exists() and not force:
        return VMImage(kernel, target, json.loads(manifest_path.read_text()))

    progress(f"building the initramfs ({len(inputs.content.order)} modules, "
             f"{len(inputs.programs)} programs, {len(inputs.libraries)} libraries)")
    manifest = {
        "format": FORMAT_VERSION,
        "key": key,
        "kernel": {"package": kernel.package.name, "version": kernel.package.version,
                   "release": kernel.release},
        "modules": {"order": list(inputs.plan.order),
                    "paths": [inputs.plan.paths[n] for n in inputs.plan.order],
                    "on_demand": [n for n in inputs.content.order if n not in inputs.plan.paths],
                    "builtin": list(inputs.plan.builtin),
                    "unresolved_soft": list(inputs.plan.unresolved_soft)},
        "programs": dict(sorted(inputs.programs.items())),
        "libraries": inputs.libraries,
        "busybox": inputs.busybox,
        "extra_programs": dict(sorted(inputs.extra_programs.items())),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as tmp:
        entries = _entries(kernel, inputs, Path(tmp) / "staging", manifest)
        partial = Path(tmp) / "initramfs.cpio"
        with open(partial, "wb") as f:
            size = write_newc(entries, f)
        manifest["size"] = size
        manifest["entries"] = len(entries)
        os.replace(partial, target)
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    progress(f"initramfs written: {target} ({size / 2**20:.1f} MiB)")
    _prune_old_images(out_dir, kernel.release, keep=KEEP_IMAGES)
    return VMImage(kernel, target, manifest)


KEEP_IMAGES = 2  # per kernel release: the new one and its predecessor (a VM may be starting from it)


def _prune_old_images(out_dir: Path, release: str, keep: int) -> None:
    images = sorted(out_dir.glob(f"{release}-*.cpio"), key=lambda p: p.stat().st_mtime)
    for old in images[:-keep]:
        for path in (old, old.with_suffix(".json")):
            path.unlink(missing_ok=True)


def build_vm_image(progress: Progress | None = None, force: bool = False,
                   modules: Iterable[str] = WANTED_MODULES) -> VMImage:
    """Kernel (fetched and cached) plus initramfs (built and cached): ready to boot.

    Holds an exclusive lock on the cache while it works, so that concurrent runs (parallel
    test sessions, two users of one cache) neither download twice nor replace a tree the
    other is reading.
    """
    modules = tuple(modules)
    cache = vm_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kernel = prepare_kernel(modules + ON_DEMAND_MODULES, progress)
        return build_initramfs(kernel, modules, progress=progress, force=force)


def cached_images() -> list[Path]:
    return sorted((vm_cache_dir() / "initramfs").glob("*.cpio"), key=lambda p: p.stat().st_mtime)

