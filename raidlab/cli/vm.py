"""`raidlab vm ...`: build, inspect, use and measure the lab VM (raidlab.vm).

Parsing only; the actions live in raidlab.vm. Progress and timings go to stderr so
that `raidlab vm exec -- CMD` prints exactly CMD's stdout on stdout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import click
from rich.console import Console

from raidlab.errors import UsageError

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


def _progress(message: str) -> None:
    err.print(f"[dim]vm:[/dim] {message}")


def _mib(path) -> str:
    return f"{os.path.getsize(path) / 2**20:.1f} MiB"


def register(cli: click.Group) -> None:
    @cli.group("vm")
    def vm_group() -> None:
        """The lab VM: md and workloads inside QEMU, for hosts without md or root."""

    @vm_group.command("build")
    @click.option("--force", is_flag=True, help="rebuild the initramfs even if cached")
    @click.option("--probe-kvm/--no-probe-kvm", default=True, show_default=True,
                  help="decide now (and cache) whether KVM boots this kernel")
    def build_cmd(force: bool, probe_kvm: bool) -> int:
        """Fetch the kernel package and build the initramfs (both cached)."""
        from raidlab.vm import build_vm_image
        from raidlab.vm import qemu as vmq
        from raidlab.tools import qemu as qemu_tool

        qemu_tool.find()
        start = time.monotonic()
        image = build_vm_image(progress=_progress, force=force)
        kernel = image.kernel
        out.print(f"kernel package  {kernel.package.name} {kernel.package.version} "
                  f"(release {kernel.release})")
        out.print(f"boot image      {image.boot_image}  ({_mib(image.boot_image)}"
                  f"{', PVH' if image.boot_image == kernel.vmlinux else ', bzImage'})")
        out.print(f"initramfs       {image.initramfs}  ({_mib(image.initramfs)})")
        out.print(f"modules         {' '.join(image.module_order)}")
        out.print(f"programs        {' '.join(sorted(image.manifest['programs']))}")
        if probe_kvm or not qemu_tool.kvm_accessible() or vmq.cached_kvm_probe(image):
            if qemu_tool.kvm_accessible() and vmq.cached_kvm_probe(image) is None:
                _progress(f"probing KVM (up to {vmq.KVM_PROBE_SECONDS:g} s, once)")
            accel, why = vmq.choose_accelerator(image)
            out.print(f"accelerator     {accel} ({why})")
        else:
            out.print("accelerator     KVM not probed yet (the first boot will)")
        err.print(f"[dim]vm: ready in {time.monotonic() - start:.1f} s[/dim]")
        return 0

    @vm_group.command("exec", context_settings={"ignore_unknown_options": True})
    @click.option("--disk", "disks", multiple=True, metavar="FILE",
                  help="host file (or nbd:// URL) attached as /dev/vda, /dev/vdb, ... (repeatable)")
    @click.option("--read-only-disk", "ro_disks", multiple=True, metavar="FILE",
                  help="like --disk, attached read-only (after the --disk ones)")
    @click.option("--timeout", type=float, default=600.0, show_default=True,
                  help="seconds the command may run; then the VM is killed")
    @click.option("--boot-timeout", type=float, default=180.0, show_default=True)
    @click.option("--memory", "memory_mib", type=int, default=1024, show_default=True, help="MiB")
    @click.option("--cpus", type=int, default=2, show_default=True)
    @click.option("--accel", type=click.Choice(["auto", "tcg", "kvm"]), default=None,
                  help="default: $RAIDLAB_VM_ACCEL or auto")
    @click.option("--console-log", type=click.Path(dir_okay=False), default=None,
                  help="keep the guest's kernel console here")
    @click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
    def exec_cmd(disks, ro_disks, timeout, boot_timeout, memory_mib, cpus, accel, console_log,
                 command) -> int:
        """Boot the VM, run COMMAND (a shell command line, like ssh) in it, shut down.

        COMMAND's stdout and stderr are printed as they came; the exit code is COMMAND's.
        """
        from raidlab.vm import LabVM, VMDisk, build_vm_image

        script = " ".join(command)
        all_disks = [VMDisk(d) for d in disks] + [VMDisk(d, read_only=True) for d in ro_disks]
        image = build_vm_image(progress=_progress)
        with LabVM(image, all_disks, memory_mib=memory_mib, cpus=cpus, accel=accel,
                   boot_timeout=boot_timeout, console_log=console_log) as vm:
            err.print(f"[dim]vm: booted in {vm.boot_seconds:.1f} s ({vm.accel}; {vm.accel_reason})[/dim]")
            sys.stderr.flush()
            result = vm.run(script, timeout=timeout)
            sys.stdout.buffer.write(result.stdout)
            sys.stdout.buffer.flush()
            sys.stderr.buffer.write(result.stderr)
            sys.stderr.buffer.flush()
            err.print(f"[dim]vm: command exited {result.rc} after {result.seconds:.2f} s; "
                      f"boot took {vm.boot_seconds:.1f} s[/dim]")
        return result.rc

    @vm_group.command("info")
    @click.option("--json", "as_json", is_flag=True)
    def info_cmd(as_json: bool) -> int:
        """What is cached, which QEMU, which accelerator (no boot)."""
        from raidlab.vm import initramfs, kernel
        from raidlab.tools import qemu as qemu_tool
        from raidlab.tools.base import which

        info: dict = {"cache_dir": str(kernel.vm_cache_dir()),
                      "qemu": which(qemu_tool.QEMU), "qemu_version": qemu_tool.version(),
                      "kvm_accessible": qemu_tool.kvm_accessible()}
        info["kernels"] = [{"package": t.package.name, "version": t.package.version,
                            "release": t.release, "boot_image": str(t.boot_image),
                            "pvh": t.boot_image == t.vmlinux} for t in kernel.cached_trees()]
        images = []
        for path in initramfs.cached_images():
            manifest_path = path.with_suffix(".json")
            manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
            images.append({"path": str(path), "bytes": path.stat().st_size,
                           "kernel": manifest.get("kernel", {}).get("release"),
                           "modules": manifest.get("modules", {}).get("order", [])})
        info["initramfs"] = images
        try:
            probe = json.loads((kernel.vm_cache_dir() / "kvm-probe.json").read_text())
        except (OSError, ValueError):
            probe = None
        info["kvm_probe"] = probe
        ok, detail = kernel.availability()
        info["kernel_available"] = {"ok": ok, "detail": detail}
        if as_json:
            click.echo(json.dumps(info, indent=1))
            return 0
        out.print(f"cache           {info['cache_dir']}")
        out.print(f"qemu            {info['qemu'] or 'not installed'}  {info['qemu_version'] or ''}")
        out.print(f"/dev/kvm        {'accessible' if info['kvm_accessible'] else 'not accessible'}")
        if probe:
            out.print(f"KVM probe       {'works' if probe['kvm_works'] else 'fails'}: {probe['reason']}")
        out.print(f"kernel          {detail}")
        for k in info["kernels"]:
            out.print(f"  cached        {k['package']} {k['version']} -> {k['boot_image']}"
                      f"{' (PVH)' if k['pvh'] else ''}")
        for img in images:
            out.print(f"initramfs       {img['path']} ({img['bytes'] / 2**20:.1f} MiB)")
        if images and images[-1]["modules"]:
            out.print(f"module order    {' '.join(images[-1]['modules'])}")
        if not images:
            out.print("initramfs       none cached; run: raidlab vm build")
        return 0

    @vm_group.command("bench")
    @click.option("--size-mib", type=int, default=64, show_default=True)
    @click.option("--accel", type=click.Choice(["auto", "tcg", "kvm"]), default=None)
    @click.option("--json", "as_json", is_flag=True)
    def bench_cmd(size_mib: int, accel, as_json: bool) -> int:
        """Measure boot time and the VM's slowdown against this host (same busybox binary)."""
        if size_mib < 1:
            raise UsageError("--size-mib must be at least 1")
        results = measure_slowdown(size_mib, accel)
        if as_json:
            click.echo(json.dumps(results, indent=1))
            return 0
        out.print(f"boot: {results['boot_seconds']:.2f} s ({results['accel']}), "
                  f"guest uptime at ready {results['guest_uptime_at_ready']} s; "
                  f"empty command round trip {results['round_trip_seconds'] * 1000:.0f} ms")
        out.print(f"{'test':<44} {'host s':>9} {'VM s':>9} {'slowdown':>9}")
        for row in results["tests"]:
            out.print(f"{row['name']:<44} {row['host_seconds']:>9.3f} {row['vm_seconds']:>9.3f} "
                      f"{row['slowdown']:>8.1f}x")
        return 0


def _median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2]


def measure_slowdown(size_mib: int, accel: str | None) -> dict:
    """Boot once, time the same commands in the VM and on the host (busybox on both)."""
    from raidlab.vm import LabVM, VMDisk, build_vm_image, guest_device
    from raidlab.tools.base import require

    busybox = require("busybox")
    loop_count = 20000 * max(1, size_mib // 16)
    tests = [
        ("dd zero -> null, 1 MiB blocks, 16x size", "dd if=/dev/zero of=/dev/null bs=1M count={n16}"),
        ("sha256sum of zeros", "dd if=/dev/zero bs=1M count={n} 2>/dev/null | sha256sum"),
        (f"sh loop, {loop_count} iterations",
         f"i=0; while [ $i -lt {loop_count} ]; do i=$((i+1)); done"),
        ("dd write to disk, O_DIRECT", "dd if=/dev/zero of={disk} bs=1M count={n} oflag=direct"),
        ("dd read from disk, O_DIRECT", "dd if={disk} of=/dev/null bs=1M count={n} iflag=direct"),
        ("fio 4 KiB random reads (4096), O_DIRECT",
         "fio --name=r --filename={disk} --rw=randread --bs=4k --size={n}M --io_size=16M "
         "--direct=1 --ioengine=psync --randrepeat=1 --output-format=terse >/dev/null"),
    ]
    image = build_vm_image(progress=_progress)
    with tempfile.TemporaryDirectory(prefix="raidlab-vm-bench-", dir=os.path.expanduser("~")) as tmp:
        host_disk = os.path.join(tmp, "host.img")
        vm_disk = os.path.join(tmp, "vm.img")
        for path in (host_disk, vm_disk):
            with open(path, "wb") as f:
                f.truncate(size_mib * 2**20)
        rows = []

        def host_time(cmd: str) -> float:
            start = time.monotonic()
            subprocess.run([busybox, "sh", "-c", cmd], check=True, capture_output=True)
            return time.monotonic() - start

        with LabVM(image, [VMDisk(vm_disk)], accel=accel) as vm:
            round_trip = _median([vm.run("true").seconds for _ in range(5)])
            host_round_trip = _median([host_time("true") for _ in range(5)])
            for name, template in tests:
                vm_cmd = template.format(n=size_mib, n16=16 * size_mib, disk=guest_device(0))
                host_cmd = template.format(n=size_mib, n16=16 * size_mib, disk=host_disk)
                vm_seconds = _median([vm.run(vm_cmd, timeout=600, check=True).seconds - round_trip
                                      for _ in range(3)])
                host_seconds = _median([host_time(host_cmd) - host_round_trip for _ in range(3)])
                rows.append({"name": name, "vm_command": vm_cmd, "host_command": host_cmd,
                             "host_seconds": max(host_seconds, 1e-4), "vm_seconds": vm_seconds,
                             "slowdown": vm_seconds / max(host_seconds, 1e-4)})
            stats = vm.statistics()
        shutil.rmtree(tmp, ignore_errors=True)
    return {"accel": stats["accel"], "boot_seconds": stats["boot_seconds"],
            "guest_uptime_at_ready": stats["guest_uptime_at_ready"],
            "round_trip_seconds": round_trip, "size_mib": size_mib, "tests": rows}
