"""The lab VM runner: md and the workloads inside a small QEMU VM, for hosts without md.

Why it exists: many hosts (containers, minimal VMs, this project's CI machines) run a kernel
without md and without loadable modules, yet the papers' baselines must be the real kernel
md driver. The lab VM boots the distribution's stock kernel package with an initramfs the
toolkit builds, attaches the lab's emulated disk files as virtio disks, and runs commands in
it over a framed channel (docs/vm-runner.md).

Parts, each with its own header explaining its choices:
    kernel.py     fetch and cache the kernel package (apt-get download, dpkg-deb -x, depmod -b)
    modules.py    module load order from modules.dep / modules.softdep (pure)
    elf.py        shared-library closure of host programs (pure ELF reading)
    cpio.py       newc archive writer (pure)
    protocol.py   the command channel framing, host and guest halves
    initramfs.py  assemble and cache the initramfs
    qemu.py       LabVM: boot, run, put/get/fetch, shutdown, kill

What it costs (measured with `raidlab vm bench` on the 2-core development host, TCG because
KVM does not boot there, other jobs running): boot to a ready command channel 4.9-6.4 s
(PVH vmlinux, 90 MiB initramfs); about 80 ms per command round trip; CPU-bound work 10-18x
slower than the host (busybox sh loop, sha256sum), memory copies ~80-95x, O_DIRECT disk I/O
2-7x, fio 4 KiB random reads ~4.7x. Disk timing is therefore far closer to native than CPU
timing; a TCG run's CPU-heavy numbers must not be compared with native ones.

Needs: qemu-system-x86, busybox-static, kmod (depmod), dpkg and apt (apt lists present, or
RAIDLAB_VM_KERNEL_DEB), and ~240 MiB in ${XDG_CACHE_HOME:-~/.cache}/raidlab/vm. No root:
QEMU runs as the calling user on image files that user can read and write.

Typical use:

    from raidlab.vm import LabVM, VMDisk, build_vm_image
    image = build_vm_image()                    # cached after the first call
    with LabVM(image, [VMDisk("d0.img")]) as vm:
        print(vm.run("mdadm --version").stderr_text)
"""

from raidlab.vm.initramfs import WANTED_MODULES, VMImage, build_vm_image
from raidlab.vm.qemu import LabVM, VMDisk, guest_device

__all__ = ["WANTED_MODULES", "LabVM", "VMDisk", "VMImage", "build_vm_image", "guest_device"]
