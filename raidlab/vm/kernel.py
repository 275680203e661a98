"""The lab VM's kernel: the distribution's own kernel package, fetched and cached per version.

Why the distribution's package: it is the kernel the papers' baselines would run on a stock
machine (md, raid456 and ext4 exactly as Debian builds them), it is signed and versioned by
the distribution, and `apt-get download` fetches it without root whenever the apt lists
exist. Nothing is installed on the host: the .deb is unpacked with `dpkg-deb -x` into the
user's cache.

Cache layout, ${XDG_CACHE_HOME:-~/.cache}/raidlab/vm/kernel/<package>_<version>/:
    package.deb   the downloaded package (kept, so a different module set can be
                  unpacked again without the network)
    tree/boot/vmlinuz-<release>, tree/boot/config-<release>
    tree/boot/vmlinux-<release>   the uncompressed kernel, when it has a PVH entry point
    tree/lib/modules/<release>/   the modules the lab VM needs (the closure of the wanted
                  list) plus the full tree's module index, built by `depmod -b`
    tree.json     what was kept; written last, so its presence means the tree is complete

Why the uncompressed vmlinux: Debian compresses its bzImage with xz, and under TCG the
kernel's own decompressor runs emulated, about 2.5 s of every boot (measured: first console
line after 2.8 s from the bzImage, 0.3-0.4 s from vmlinux). Debian builds with CONFIG_PVH, so
QEMU can boot the ELF vmlinux directly; it is unpacked once on the host with Python's lzma
or zlib. Kernels without a PVH note, or compressed otherwise, boot from the bzImage.

The package name is resolved from the `linux-image-amd64` metapackage (`apt-cache depends`),
so the cache follows the distribution's current kernel. RAIDLAB_VM_KERNEL_DEB=/path/to.deb
uses a given package instead (offline machines); with no apt lists, the newest cached kernel
is used.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import lzma
import os
import re
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

from raidlab.errors import MissingToolError, RaidlabError, ToolFailedError, VMError
from raidlab.outputs import write_whole
from raidlab.vm import elf
from raidlab.vm import modules as kmod
from raidlab.tools.base import run, which

METAPACKAGE = "linux-image-amd64"
KERNEL_DEB_ENV = "RAIDLAB_VM_KERNEL_DEB"
TREE_FORMAT = 2

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def vm_cache_dir() -> Path:
    """${XDG_CACHE_HOME:-~/.cache}/raidlab/vm (created on use, not here)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "raidlab" / "vm"


@dataclasses.dataclass(frozen=True)
class KernelPackage:
    name: str        # linux-image-6.1.0-56-amd64
    version: str     # 6.1.192-2

    @property
    def cache_dir(self) -> Path:
        safe_version = self.version.replace(":", "%3a")
        return vm_cache_dir() / "kernel" / f"{self.name}_{safe_version}"


@dataclasses.dataclass(frozen=True)
class KernelTree:
    package: KernelPackage
    release: str                 # `uname -r` in the VM, e.g. 6.1.0-56-amd64
    root: Path                   # the unpacked tree
    modules: tuple[str, ...]     # module names whose closure is in the tree

    @property
    def vmlinuz(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.release}"

    @property
    def vmlinux(self) -> Path:
        return self.root / "boot" / f"vmlinux-{self.release}"

    @property
    def boot_image(self) -> Path:
        """What QEMU's -kernel gets: the PVH vmlinux when there is one, else the bzImage."""
        return self.vmlinux if self.vmlinux.exists() else self.vmlinuz

    @property
    def modules_dir(self) -> Path:
        return self.root / "lib" / "modules" / self.release

    def read_index(self, name: str) -> str:
        """A module index file of the full package (modules.dep, modules.softdep, ...)."""
        return (self.modules_dir / name).read_text()

    def load_plan(self, wanted: Iterable[str]) -> kmod.LoadPlan:
        return kmod.load_order(
            wanted,
            kmod.parse_modules_dep(self.read_index("modules.dep")),
            kmod.parse_modules_softdep(self.read_index("modules.softdep")),
            builtin=kmod.parse_modules_builtin(self.read_index("modules.builtin")),
        )


# ---- resolving the package (pure parsers + apt calls) ----

def parse_apt_depends(text: str, metapackage: str = METAPACKAGE) -> str:
    """The concrete kernel package from `apt-cache depends linux-image-amd64` output."""
    for line in text.splitlines():
        m = re.match(r"\s*\|?Depends:\s*(\S+)", line)
        if m and m.group(1).startswith("linux-image-") and m.group(1) != metapackage \
                and not m.group(1).startswith("<"):
            return m.group(1)
    raise VMError(f"apt-cache depends {metapackage} names no linux-image package",
                  hint="run `apt-get update`, or set RAIDLAB_VM_KERNEL_DEB to a kernel .deb")


def parse_apt_show_version(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    raise VMError("apt-cache show printed no Version field")


def _no_kernel_error(reason: str) -> VMError:
    return VMError(
        f"no kernel package for the lab VM: {reason}",
        hint=(f"run `apt-get update` so apt can resolve {METAPACKAGE} (network needed once), "
              f"or set {KERNEL_DEB_ENV}=/path/to/linux-image-*.deb"),
        missing=METAPACKAGE,
    )


# What apt's answer depends on: its package lists, its sources and preferences, and what
# dpkg has installed. Each file's size and modification time stand for its content.
APT_STATE = (Path("/var/lib/apt/lists"), Path("/etc/apt"), Path("/var/lib/dpkg/status"))


def apt_state_key(paths: Iterable[Path] | None = None) -> str | None:
    """A fingerprint of apt's state (names, sizes, modification times), or None without lists."""
    entries = []
    for base in APT_STATE if paths is None else paths:
        if not base.exists():
            if base.name == "lists":
                return None
            continue
        try:
            files = [base] if base.is_file() else sorted(
                p for p in base.rglob("*") if p.is_file() and not p.is_symlink())
        except OSError:  # a directory this user may not read (auth.conf.d)
            files = [base]
        for path in files:
            try:
                st = path.stat()
            except OSError:
                continue
            entries.append(f"{path}\0{st.st_size}\0{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


def resolve_package(metapackage: str = METAPACKAGE) -> KernelPackage:
    """Concrete package and candidate version behind `metapackage`, asked of apt.

    apt-cache rebuilds its package cache in memory on each call where no pkgcache.bin is
    kept (container images drop it): about a second of processor time, twice per VM boot.
    The answer is kept in the VM cache beside a fingerprint of apt's state and asked again
    only when that state changes (an `apt-get update`, a new source, an installed package).
    """
    key = apt_state_key()
    memo = vm_cache_dir() / "kernel" / "resolved.json"
    if key is not None:
        try:
            data = json.loads(memo.read_text())
            if data["key"] == key and data["metapackage"] == metapackage:
                return KernelPackage(data["name"], data["version"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    package = _ask_apt(metapackage)
    if key is not None:
        text = json.dumps({"key": key, "metapackage": metapackage, "name": package.name,
                           "version": package.version})
        try:
            memo.parent.mkdir(parents=True, exist_ok=True)
            write_whole(memo, lambda partial: partial.write_text(text))
        except (OSError, RaidlabError):
            pass  # a cache it cannot write asks apt each time
    return package


def _ask_apt(metapackage: str) -> KernelPackage:
    if which("apt-cache") is None:
        raise _no_kernel_error("apt-cache is not installed (not a Debian/Ubuntu host)")
    try:
        depends = run(["apt-cache", "depends", metapackage], timeout=60).stdout
    except ToolFailedError as exc:
        raise _no_kernel_error(f"apt-cache does not know {metapackage}") from exc
    if "Depends:" not in depends:
        raise _no_kernel_error(f"apt-cache does not know {metapackage}")
    name = parse_apt_depends(depends, metapackage)
    try:
        shown = run(["apt-cache", "show", "--no-all-versions", name], timeout=60).stdout
    except ToolFailedError as exc:
        raise _no_kernel_error(f"apt-cache cannot show {name}") from exc
    return KernelPackage(name, parse_apt_show_version(shown))


def package_of_deb(deb: Path) -> KernelPackage:
    fields = run(["dpkg-deb", "-f", str(deb), "Package", "Version"], timeout=60).stdout
    values = dict(line.split(": ", 1) for line in fields.splitlines() if ": " in line)
    if not values.get("Package", "").startswith("linux-image-"):
        raise VMError(f"{deb} is not a linux-image package (Package: {values.get('Package')})")
    return KernelPackage(values["Package"], values["Version"])


def cached_trees() -> list[KernelTree]:
    """Complete kernel trees in the cache, newest package version last (by mtime)."""
    base = vm_cache_dir() / "kernel"
    trees = []
    for meta in sorted(base.glob("*/tree.json"), key=lambda p: p.stat().st_mtime):
        try:
            trees.append(_tree_from_json(meta))
        except (ValueError, KeyError, OSError):
            continue
    return trees


def _tree_from_json(meta: Path) -> KernelTree:
    data = json.loads(meta.read_text())
    if data.get("format") != TREE_FORMAT:
        raise ValueError("old tree format")
    return KernelTree(KernelPackage(data["package"], data["version"]), data["release"],
                      meta.parent / "tree", tuple(data["modules"]))


# ---- the uncompressed kernel (pure) ----

def extract_vmlinux(bzimage: bytes) -> bytes | None:
    """The ELF vmlinux inside a bzImage compressed with xz or gzip, or None.

    Same idea as the kernel's scripts/extract-vmlinux: try each compression magic where it
    occurs and keep the first stream that decompresses to an ELF file.
    """
    candidates = ((b"\xfd7zXZ\x00", "xz"), (b"\x1f\x8b\x08", "gzip"))
    for magic, kind in candidates:
        pos = bzimage.find(magic)
        while pos >= 0:
            try:
                if kind == "xz":
                    out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(bzimage[pos:])
                else:
                    out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(bzimage[pos:])
            except (lzma.LZMAError, zlib.error, EOFError):
                out = b""
            if out[:4] == b"\x7fELF":
                return out
            pos = bzimage.find(magic, pos + 1)
    return None


def _write_pvh_vmlinux(vmlinuz: Path, target: Path) -> bool:
    vmlinux = extract_vmlinux(vmlinuz.read_bytes())
    if vmlinux is None:
        return False
    try:
        if not elf.has_pvh_entry(vmlinux):
            return False
    except elf.ElfError:
        return False
    target.write_bytes(vmlinux)
    return True


# ---- fetching and unpacking ----

def _download(package: KernelPackage, progress: Progress) -> Path:
    deb = package.cache_dir / "package.deb"
    if deb.exists():
        return deb
    if which("apt-get") is None:
        raise _no_kernel_error("apt-get is not installed")
    package.cache_dir.mkdir(parents=True, exist_ok=True)
    progress(f"downloading {package.name} {package.version} with apt-get download")
    with tempfile.TemporaryDirectory(dir=package.cache_dir, prefix=".download-") as tmp:
        try:
            run(["apt-get", "download", "-q", f"{package.name}={package.version}"],
                cwd=tmp, timeout=1800)
        except ToolFailedError as exc:
            lines = (exc.fields.get("stderr") or "").strip().splitlines()
            detail = f" ({lines[-1]})" if lines else ""
            raise _no_kernel_error(f"apt-get download {package.name} failed{detail}") from exc
        debs = list(Path(tmp).glob("*.deb"))
        if len(debs) != 1:
            raise VMError(f"apt-get download left {len(debs)} .deb files, expected 1")
        os.replace(debs[0], deb)
    return deb


def _unpack(package: KernelPackage, deb: Path, wanted: tuple[str, ...], progress: Progress) -> KernelTree:
    cache = package.cache_dir
    progress(f"unpacking {deb.name} ({deb.stat().st_size / 2**20:.0f} MiB) with dpkg-deb -x")
    with tempfile.TemporaryDirectory(dir=cache, prefix=".unpack-") as tmp:
        full = Path(tmp) / "full"
        run(["dpkg-deb", "-x", str(deb), str(full)], timeout=1800)
        vmlinuzes = sorted((full / "boot").glob("vmlinuz-*"))
        if len(vmlinuzes) != 1:
            raise VMError(f"{deb.name} holds {len(vmlinuzes)} vmlinuz files, expected 1")
        release = vmlinuzes[0].name[len("vmlinuz-"):]
        # Debian 12 still ships modules under /lib; newer releases use /usr/lib.
        for prefix in ("lib", "usr/lib"):
            if (full / prefix / "modules" / release).is_dir():
                break
        else:
            raise VMError(f"{deb.name} has no modules directory for {release}")
        if prefix != "lib":
            (full / "lib").mkdir(exist_ok=True)
            os.replace(full / prefix / "modules", full / "lib" / "modules")
        progress(f"building the module index with depmod -b ({release})")
        run(["depmod", "-b", str(full), release], timeout=600)

        full_modules = full / "lib" / "modules" / release
        tree = Path(tmp) / "tree"
        modules_dir = tree / "lib" / "modules" / release
        modules_dir.mkdir(parents=True)
        (tree / "boot").mkdir()
        for name in (f"vmlinuz-{release}", f"config-{release}"):
            if (full / "boot" / name).exists():
                shutil.copy2(full / "boot" / name, tree / "boot" / name)
        pvh = _write_pvh_vmlinux(tree / "boot" / f"vmlinuz-{release}", tree / "boot" / f"vmlinux-{release}")
        progress("uncompressed PVH kernel: " + ("yes (fast boot)" if pvh else "no, booting the bzImage"))
        for index_file in full_modules.glob("modules.*"):
            if not index_file.name.endswith(".bin"):
                shutil.copy2(index_file, modules_dir / index_file.name)
        partial = KernelTree(package, release, tree, wanted)
        plan = partial.load_plan(wanted)
        for name in plan.order:
            relpath = plan.paths[name]
            (modules_dir / relpath).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(full_modules / relpath, modules_dir / relpath)

        final = cache / "tree"
        if final.exists():
            shutil.rmtree(final)
        os.replace(tree, final)
    meta = {"format": TREE_FORMAT, "package": package.name, "version": package.version,
            "release": release, "modules": list(wanted)}
    (cache / "tree.json").write_text(json.dumps(meta, indent=1) + "\n")
    return KernelTree(package, release, cache / "tree", wanted)


def prepare_kernel(wanted_modules: Iterable[str], progress: Progress | None = None) -> KernelTree:
    """A cached kernel tree holding vmlinuz and the closure of `wanted_modules`.

    Resolution order: RAIDLAB_VM_KERNEL_DEB; else apt's current candidate for
    linux-image-amd64 (downloaded once per version); else, when apt cannot answer, the newest
    complete tree already in the cache. Raises VMError (one line, what to do) otherwise.
    """
    progress = progress or _quiet
    wanted = tuple(wanted_modules)
    local_deb = os.environ.get(KERNEL_DEB_ENV)
    if local_deb:
        deb = Path(local_deb)
        if not deb.is_file():
            raise VMError(f"{KERNEL_DEB_ENV}={local_deb} is not a file")
        package = package_of_deb(deb)
    else:
        try:
            package = resolve_package()
        except VMError:
            cached = [t for t in cached_trees() if set(wanted) <= set(t.modules)]
            if cached:
                progress(f"apt cannot resolve {METAPACKAGE}; using cached {cached[-1].package.name}")
                return cached[-1]
            raise
        deb = None

    meta = package.cache_dir / "tree.json"
    if meta.exists():
        try:
            tree = _tree_from_json(meta)
            if set(wanted) <= set(tree.modules) and tree.boot_image.exists():
                return tree
        except (ValueError, KeyError):
            pass
    try:
        if deb is None:
            deb = _download(package, progress)
        else:
            package.cache_dir.mkdir(parents=True, exist_ok=True)
        return _unpack(package, deb, wanted, progress)
    except MissingToolError:
        raise
    except kmod.ModuleGraphError as exc:
        raise VMError(f"kernel {package.name} {package.version}: {exc}") from exc


def availability() -> tuple[bool, str]:
    """Cheap answer for `raidlab doctor`: is a lab-VM kernel cached or fetchable?"""
    trees = cached_trees()
    if trees:
        t = trees[-1]
        return True, f"kernel {t.package.name} {t.package.version} cached in {t.root.parent}"
    if os.environ.get(KERNEL_DEB_ENV):
        return True, f"kernel package from {KERNEL_DEB_ENV}"
    try:
        package = resolve_package()
    except (VMError, MissingToolError) as exc:
        return False, str(exc)
    return True, f"{package.name} {package.version} will be fetched with apt-get download"
