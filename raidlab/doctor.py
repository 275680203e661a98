"""What this host can do for raidlab: tools, kernel capabilities, usable runners.

Why a separate module from the CLI: `raidlab run` and the test suite ask the same questions
("can the native md runner work here?") and must get the same answers as the user sees in
`raidlab doctor`. Every check is cheap (no VM boot, no device created): the answers come from
/proc, /sys, /dev and `--version` lines, and one probe of the cluster's kernel features
inside a throwaway network namespace (it exists only while the probe runs). KVM is reported as "present" only; whether a guest
actually boots under it is decided by the VM runner's own probe.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import os
import platform
import subprocess
from pathlib import Path

from raidlab import archs
from raidlab.errors import UsageError
from raidlab.lab.private import HOME_ENV, check_ancestors, private_dir, raidlab_home
from raidlab.tools.base import PACKAGES, version_of, which
from raidlab.vm import kernel as vm_kernel

# Program -> (arguments that print a version, what raidlab uses it for)
TOOLS: dict[str, tuple[tuple[str, ...], str]] = {
    "losetup": (("--version",), "attach emulated disks and volumes as loop devices"),
    "mount": (("--version",), "mount filesystems for workloads"),
    "blkid": (("--version",), "refuse real devices that carry data"),
    "fusermount3": (("--version",), "unmount the lab's FUSE filesystem"),
    "mkfs.ext4": (("-V",), "make the workload filesystem"),
    "e2fsck": (("-V",), "check filesystems after tests and crashes"),
    "mdadm": (("--version",), "md baselines (native or in the lab VM)"),
    "fio": (("--version",), "raw-device workloads and verification"),
    "bonnie++": ((), "Bonnie workload"),
    "postmark": (("-h",), "PostMark workload"),
    "nbdkit": (("--version",), "serve disks over NBD (lab VM, cluster)"),
    "nbdfuse": (("--version",), "reach remote disks (RAID-x cluster)"),
    "nbdinfo": (("--version",), "check the cluster's NBD servers (RAID-x cluster)"),
    "ip": (("-V",), "the cluster's namespaces, cables and bridge"),
    "tc": (("-V",), "shape the cluster's cables (tbf)"),
    "nsenter": (("--version",), "run nbdkit and nbdfuse inside a node's namespace"),
    "unshare": (("--version",), "probe the cluster's kernel features in a throwaway namespace"),
    "qemu-system-x86_64": (("--version",), "the lab VM runner"),
    "busybox": (("--help",), "the lab VM's initramfs"),
    "depmod": (("--version",), "module index of the lab VM's kernel"),
    "tar": (("--version",), "untar/copy/remove workload"),
}


@dataclasses.dataclass
class ToolStatus:
    name: str
    found: bool
    path: str | None
    version: str | None
    package: str
    purpose: str

    @property
    def hint(self) -> str | None:
        return None if self.found else f"apt-get install {self.package}"


@dataclasses.dataclass
class Capability:
    name: str
    ok: bool
    detail: str


@dataclasses.dataclass
class Runner:
    name: str
    usable: bool
    reason: str


@dataclasses.dataclass
class ArchitectureStatus:
    name: str
    family: str
    runners: list[str]   # where it can run at all (the registry)
    usable: list[str]    # where it can run on this host
    summary: str


@dataclasses.dataclass
class Report:
    kernel: str
    is_root: bool
    tools: list[ToolStatus]
    capabilities: list[Capability]
    runners: list[Runner]
    architectures: list[ArchitectureStatus] = dataclasses.field(default_factory=list)

    @property
    def any_runner(self) -> bool:
        return any(r.usable for r in self.runners)

    def as_json(self) -> dict:
        return {
            "kernel": self.kernel,
            "root": self.is_root,
            "tools": {
                t.name: {
                    "found": t.found,
                    "path": t.path,
                    "version": t.version,
                    "package": t.package,
                    "purpose": t.purpose,
                    "install_hint": t.hint,
                }
                for t in self.tools
            },
            "home": str(raidlab_home()),
            "capabilities": {c.name: {"ok": c.ok, "detail": c.detail} for c in self.capabilities},
            "runners": {r.name: {"usable": r.usable, "reason": r.reason} for r in self.runners},
            "architectures": {a.name: {"family": a.family, "runners": a.runners, "usable_here": a.usable}
                              for a in self.architectures},
            "ok": self.any_runner,
        }


def _package_version(package: str) -> str | None:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _short(version: str | None) -> str | None:
    """First line, without the build-options parenthesis some tools append."""
    if not version:
        return version
    head = version.split(" (")[0]
    if not any(ch.isdigit() for ch in head):  # "cpio (GNU cpio) 2.13": the number is after it
        head = version
    return head.strip()[:60]


def _tool_status(name: str) -> ToolStatus:
    args, purpose = TOOLS[name]
    path = which(name)
    version = None
    if path:
        # Programs without a version flag (bonnie++) report their Debian package's version.
        version = _short(version_of(name, args)) if args else None
        if not version or "invalid option" in version or "usage" in version.lower():
            pkg_version = _package_version(PACKAGES.get(name, name))
            version = f"{PACKAGES.get(name, name)} {pkg_version}" if pkg_version else "unknown"
    return ToolStatus(name, path is not None, path, version, PACKAGES.get(name, name), purpose)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _proc_devices_has(name: str) -> bool:
    for line in _read("/proc/devices").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == name:
            return True
    return False


def _filesystems_has(name: str) -> bool:
    return any(line.split()[-1] == name for line in _read("/proc/filesystems").splitlines() if line.split())


def check_loop() -> Capability:
    if os.path.exists("/dev/loop-control") or _proc_devices_has("loop"):
        return Capability("loop", True, "loop driver present (/dev/loop-control)")
    return Capability("loop", False, "no loop driver: kernel built without CONFIG_BLK_DEV_LOOP or module not loaded")


def check_fuse() -> Capability:
    if os.path.exists("/dev/fuse") and _filesystems_has("fuse"):
        return Capability("fuse", True, "/dev/fuse present, fuse in /proc/filesystems")
    return Capability("fuse", False, "no FUSE: /dev/fuse or the fuse filesystem missing (modprobe fuse)")


def check_md() -> Capability:
    if os.path.exists("/proc/mdstat"):
        personalities = _read("/proc/mdstat").splitlines()[:1]
        return Capability("md", True, personalities[0] if personalities else "/proc/mdstat present")
    return Capability("md", False, "no md driver (/proc/mdstat missing); md baselines need the lab VM runner")


def check_nbd() -> Capability:
    if os.path.exists("/sys/module/nbd") or os.path.exists("/dev/nbd0"):
        return Capability("nbd", True, "nbd driver present")
    return Capability("nbd", False, "no nbd driver (not needed: QEMU's own NBD client and nbdfuse are used)")


# Everything `raidlab cluster up` asks of the kernel, tried where nothing outlives the try: a
# network namespace of its own (unshare), gone with the shell.
_CLUSTER_PROBE = ("ip link add name rlxp0 type veth peer name rlxp1 && ip link add name rlxpbr type bridge && "
                  "ip link set rlxp0 master rlxpbr && tc qdisc add dev rlxp0 root tbf rate 100mbit burst 16k limit 32k")


def check_cluster() -> Capability:
    """Network namespaces, veth pairs, a bridge and tc's tbf: the live cluster's kernel parts."""
    if os.geteuid() != 0:
        return Capability("cluster", False, "needs root to make network namespaces")
    missing = [t for t in ("unshare", "ip", "tc") if which(t) is None]
    if missing:
        return Capability("cluster", False, "cannot probe: missing " + ", ".join(missing))
    try:
        proc = subprocess.run(["unshare", "--net", "sh", "-c", _CLUSTER_PROBE], capture_output=True, text=True,
                              timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Capability("cluster", False, f"probe failed: {exc}")
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no reason given"])[-1]
        return Capability("cluster", False, f"namespace, veth, bridge or tbf refused: {why}")
    return Capability("cluster", True, "network namespaces, veth, bridge and tc tbf work (probed)")


def check_kvm() -> Capability:
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        reason = "no /dev/kvm" if exc.errno == errno.ENOENT else f"/dev/kvm: {exc.strerror}"
        return Capability("kvm", False, reason + " (the lab VM uses TCG)")
    try:
        api = fcntl.ioctl(fd, 0xAE00)  # KVM_GET_API_VERSION
    except OSError as exc:
        return Capability("kvm", False, f"KVM_GET_API_VERSION failed: {exc.strerror}")
    finally:
        os.close(fd)
    return Capability(
        "kvm", True, f"/dev/kvm opens (API {api}); whether a guest boots is probed by the VM runner"
    )


def check_tcg() -> Capability:
    qemu = which("qemu-system-x86_64")
    if qemu is None:
        return Capability("qemu-tcg", False, "qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")
    try:
        out = subprocess.run([qemu, "-accel", "help"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Capability("qemu-tcg", False, f"qemu-system-x86_64 -accel help failed: {exc}")
    if "tcg" in out.split():
        return Capability("qemu-tcg", True, "QEMU supports TCG (software emulation)")
    return Capability("qemu-tcg", False, "this QEMU build has no TCG accelerator")


def _vm_kernel_state() -> tuple[bool, str]:
    """Is a lab-VM kernel cached, or can one be fetched? (the VM runner's own answer)."""
    return vm_kernel.availability()


def architectures(runners: list[Runner]) -> list[ArchitectureStatus]:
    """Every architecture of the registry (raidlab.archs) and the runners it can use here: a
    live runner where the doctor runner its family names for it is usable (the registry
    refuses a family that names none, so none is left out unsaid)."""
    usable = {r.name: r.usable for r in runners}
    out = []
    for arch in archs.REGISTRY.values():
        here = []
        for runner in arch.runners:
            if runner == "sim":
                here.append(runner)  # virtual time needs nothing of the host
                continue
            needed = archs.family(arch.family).doctor_runners[runner]
            if needed not in usable:
                raise RuntimeError(f"the {arch.family} family needs the doctor runner {needed!r}, which "
                                   f"raidlab doctor does not probe")
            if usable[needed]:
                here.append(runner)
        out.append(ArchitectureStatus(arch.name, arch.family, list(arch.runners), here, arch.summary))
    return out


def check_home() -> Capability:
    """The lab home in use (raidlab.lab.private): $RAIDLAB_HOME or the caller's default, and
    whether raidlab will keep labs there (a directory private to the caller, or one it can
    make so). Nothing is created."""
    home = raidlab_home()
    source = f"from ${HOME_ENV}" if os.environ.get(HOME_ENV) else f"the default; ${HOME_ENV} chooses another"
    try:
        check_ancestors(home)
        if home.exists():
            private_dir(home, create=False, tighten=False)
    except UsageError as exc:
        return Capability("lab home", False, f"{home} ({source}): {exc.message}")
    made = "" if home.exists() else ", made by the first `raidlab create`"
    return Capability("lab home", True, f"{home} ({source}{made})")


def collect() -> Report:
    is_root = os.geteuid() == 0
    tools = [_tool_status(name) for name in TOOLS]
    have = {t.name: t.found for t in tools}
    caps = [check_home(), check_loop(), check_fuse(), check_md(), check_nbd(), check_kvm(), check_tcg(),
            check_cluster()]
    ok = {c.name: c.ok for c in caps}

    runners: list[Runner] = []
    missing = [t for t in ("losetup", "fusermount3", "mkfs.ext4") if not have[t]]
    if not is_root:
        runners.append(Runner("native-engine", False, "needs root for loop devices and mounts"))
    elif not (ok["loop"] and ok["fuse"]):
        runners.append(Runner("native-engine", False, "needs loop and FUSE in the kernel"))
    elif missing:
        runners.append(Runner("native-engine", False, "missing: " + ", ".join(missing)))
    else:
        runners.append(Runner("native-engine", True, "loop + FUSE + root"))

    if not ok["md"]:
        runners.append(Runner("native-md", False, "kernel has no md driver"))
    elif not have["mdadm"]:
        runners.append(Runner("native-md", False, "mdadm not installed (apt-get install mdadm)"))
    elif not is_root:
        runners.append(Runner("native-md", False, "needs root"))
    else:
        runners.append(Runner("native-md", True, "md driver + mdadm + root"))

    kernel_ok, kernel_detail = _vm_kernel_state()
    vm_missing = [t for t in ("qemu-system-x86_64", "busybox", "depmod", "mdadm") if not have[t]]
    if vm_missing:
        runners.append(Runner("vm", False, "missing: " + ", ".join(vm_missing)))
    elif not (ok["qemu-tcg"] or ok["kvm"]):
        runners.append(Runner("vm", False, "QEMU has neither TCG nor usable KVM"))
    elif not kernel_ok:
        runners.append(Runner("vm", False, kernel_detail))
    else:
        accel = "KVM if its boot probe passes, else TCG" if ok["kvm"] else "TCG"
        runners.append(Runner("vm", True, f"QEMU ({accel}); {kernel_detail}"))

    cluster_missing = [t for t in ("ip", "tc", "nsenter", "nbdkit", "nbdinfo", "nbdfuse") if not have[t]]
    if not ok["cluster"]:
        runners.append(Runner("cluster", False, {c.name: c for c in caps}["cluster"].detail))
    elif cluster_missing:
        runners.append(Runner("cluster", False, "missing: " + ", ".join(cluster_missing)))
    elif not runners[0].usable:
        runners.append(Runner("cluster", False, "needs the native engine runner: " + runners[0].reason))
    else:
        runners.append(Runner("cluster", True, "raidlab cluster up and arrays over it (RAID-x)"))

    return Report(platform.release(), is_root, tools, caps, runners, architectures(runners))
