"""Live runs of a scenario: one (architecture, case, repetition) on a fresh array.

Why each run builds its own array, and starts it cold: the VC-RAID paper (§4.1) loaded the
driver, ran the benchmark, unloaded it and rebooted before every test, so each began from
the same state with an empty cache-disk log and cold caches. The closest we can do is, for
every run: create -> mkfs -> mount -> umount -> settle -> drop the page cache -> mount ->
workload -> umount -> destroy. Nothing carries over from one run to the next, and within a
run mkfs's writes do not wait in a write-back cache for the workload: the daemon's `settle`
op (raidlab.service.daemon) destages VC-RAID's and DCD's RAM buffer and cache-disk logs home
(their drain()), writes RAID-x's pending images, and flushes the drives' write caches; then
`sync; echo 3 > /proc/sys/vm/drop_caches` where the file system lives (this host, or the lab
VM, where md runs too). The first mount and umount put the file system's first-mount writes
before the settle. `[scenario] cold_start = false` leaves all this out (mkfs -> mount ->
workload); the result's `cold_start` records what the settle did. For the same reason ext4
is made without lazy initialisation (raidlab.tools.mkfs.mkfs_argv): the kernel thread that
would otherwise zero its inode tables after the first mount would write into the workload.

An [[arch]] that names a TSS `policy` has it manage the array from the workload's start to
its end, through the control socket (raidlab.service.tss_control.PolicyBeside); the
result's `policy` says what it moved.

Arrays are made exactly as `raidlab create`/`destroy` make them (ArraySpec saved in a lab,
raidlab.service.control.start_daemon, then stop_daemon / release_leftovers / remove_lab), and
every command that touches the array (mkfs, mount, the workload, umount) goes through a
RunnerSession (raidlab.runners.session), so the same code runs natively or inside the lab VM
that the array daemon owns.

A run killed outright (SIGKILL) leaves its array; the next run, or `raidlab lab cleanup`,
destroys it (OWNER_FILE records who made it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from raidlab import workloads
from raidlab.errors import RaidlabError
from raidlab.lab import Lab, labs_dir, process_start_time, same_process
from raidlab.lab.proc import boot_id
from raidlab.signals import deferred_signals
from raidlab.runners import speed
from raidlab.runners.session import SCRATCH_PREFIX, open_session
from raidlab.scenarios import MOUNTED_FILESYSTEMS, ArchEntry, PlannedRun, Scenario
from raidlab.service import control
from raidlab.service.spec import SPEC_FILE, ArraySpec
from raidlab.service.tss_control import PolicyBeside
from raidlab.tools.mkfs import mkfs_argv
from raidlab.tools.mount import mounts_under
from raidlab.vm.hosted import AVAILABLE_ENV

MKFS_TIMEOUT = 3600.0
MOUNT_TIMEOUT = 600.0
UMOUNT_TIMEOUT = 3600.0  # umount writes back everything an async run left dirty
STATUS_TIMEOUT = 120.0
SETTLE_TIMEOUT = 3600.0  # destaging a full cache-disk log to a raid5 of 1990s drives
DROP_CACHES = "echo 3 > /proc/sys/vm/drop_caches"  # after `sync`, a command of its own


@contextlib.contextmanager
def scratch_array(entry: ArchEntry, runner: str, *, home: str | None,
                  status: Callable[[str], None] = lambda s: None,
                  vm_available_mib: int | None = None) -> Iterator[Any]:
    """A fresh array for one run, exactly as `raidlab create` makes it; destroyed (images
    removed) on the way out whatever happens. Yields (lab, ready record). `vm_available_mib`
    (runner vm): the guest memory left to the workload, handed to the daemon as
    RAIDLAB_VM_AVAILABLE_MIB (see raidlab/vm/hosted.py, which also takes out what
    the array holds in host RAM, e.g. a VC-RAID RAM buffer)."""
    with contextlib.ExitStack() as stack:
        cluster = members = None
        if entry.cluster_nodes is not None:
            cluster, members = stack.enter_context(scratch_cluster(entry, home=home, status=status))
        lab = Lab(_lab_name_for(entry), home=home, create=True)
        if (lab.path / SPEC_FILE).exists():  # a previous process with our pid left it: release it
            with deferred_signals():
                _destroy_scratch(lab)
            lab = Lab(lab.name, home=home, create=True)
        _claim_scratch(lab)
        ArraySpec(lab.name, entry.arch, entry.disks, entry.disk_model, entry.disk_size, entry.chunk,
                  entry.discipline, dict(entry.options), runner, partitions=entry.partitions,
                  bus=entry.bus, write_cache=entry.write_cache, flushes=entry.flushes, span=entry.span,
                  cluster=cluster, node=0 if cluster else None, members=members).save(lab.path)
        try:
            status(f"creating {entry.arch}" + (f" over cluster {cluster}" if cluster else ""))
            env = {AVAILABLE_ENV: str(vm_available_mib)} if runner == "vm" and vm_available_mib else None
            ready = control.start_daemon(lab, "create", home=home, on_status=status, env=env)
            yield lab, ready
        finally:
            with deferred_signals():
                status(f"destroying {entry.arch}")
                _destroy_scratch(lab)


@contextlib.contextmanager
def scratch_cluster(entry: ArchEntry, *, home: str | None,
                    status: Callable[[str], None] = lambda s: None) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A cluster of `entry.cluster_nodes` nodes, one disk of the entry's model and size each,
    brought up for one run and taken down after it, whatever happens; yields (its name, the
    members as node 0 reaches them). Owned like a scratch array (OWNER_FILE), so a killed
    run's cluster is taken down by the next run or `raidlab lab cleanup`."""
    from raidlab.cluster import control as cluster_control
    from raidlab.cluster.members import resolve
    from raidlab.cluster.plan import ClusterSpec

    name = f"rc{os.getpid() % 1_000_000}"
    spec = ClusterSpec(name, nodes=entry.cluster_nodes, disk_model=entry.disk_model, disk_size=entry.disk_size)
    status(f"bringing up cluster {name} ({entry.cluster_nodes} nodes)")
    cluster_control.up(spec, home=home, on_status=status)
    try:
        _claim_scratch(Lab(name, home=home))
        _spec, members = resolve(name, 0, home=home)
        yield name, members
    finally:
        with deferred_signals():
            status(f"taking cluster {name} down")
            cluster_control.down(name, home=home)


# Who made a scratch array: a `raidlab run` killed where it cannot clean up (SIGKILL, a lost
# session or machine) leaves its array -- daemon, mounts, 1 GiB-class member images -- and the
# next run, or `raidlab lab cleanup NAME`, destroys it once this owner is gone.
OWNER_FILE = "run-owner.json"


# The host directories a native run makes beside its array, kept in its owner record.
OWNER_DIRS = ("mountpoint", "scratch")


def _claim_scratch(lab, **host_dirs: str) -> None:
    """Record this process as the owner of scratch array `lab`, with the host directories a
    native run made for it (OWNER_DIRS: the mount point of its file system, the session's
    scratch directory); a later call adds to the directories recorded before."""
    pid = os.getpid()
    path = lab.path / OWNER_FILE
    dirs: dict[str, str] = {}
    with contextlib.suppress(OSError, ValueError):
        before = json.loads(path.read_text())
        if before.get("pid") == pid:
            dirs = {key: before[key] for key in OWNER_DIRS if before.get(key)}
    dirs.update(host_dirs)
    path.write_text(json.dumps({"pid": pid, "start_time": process_start_time(pid), "boot_id": boot_id(),
                                **dirs}) + "\n")


def abandoned_owner(lab_path: Path) -> dict[str, Any] | None:
    """The owner record of a scratch array whose `raidlab run` is gone (another boot, or no
    process with that pid and start time); None for a live run's array or a user's array."""
    try:
        owner = json.loads((lab_path / OWNER_FILE).read_text())
        pid = int(owner["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if owner.get("boot_id") == boot_id() and same_process(pid, owner.get("start_time")):
        return None
    return owner


def _destroy_scratch(lab) -> None:
    try:
        control.stop_daemon(lab)
    finally:
        control.release_leftovers(lab)
        control.remove_lab(lab, keep_images=False)


def remove_abandoned_scratch(lab) -> str | None:
    """Destroy `lab` (daemon, mounts, loops, images; a cluster's namespaces and links) if it
    is a scratch array or cluster of a `raidlab run` that is gone; a line saying so, or None
    if it is not one."""
    from raidlab.cluster.plan import CLUSTER_FILE

    owner = abandoned_owner(lab.path)
    if owner is None:
        return None
    what = "cluster" if (lab.path / CLUSTER_FILE).exists() else "array"
    with deferred_signals():
        _destroy_scratch(lab)  # unmounts what is on the array, lazily; stops a cluster's daemon
    if owner.get("mountpoint"):
        _rmdir_quietly(str(owner["mountpoint"]))
    if owner.get("scratch"):
        _remove_session_scratch(str(owner["scratch"]))
    return f"destroyed scratch {what} {lab.name} left by a killed `raidlab run` (pid {owner['pid']})"


def remove_abandoned_scratch_arrays(home: str | None) -> list[str]:
    """Every scratch array (and scratch cluster) left by a killed `raidlab run` under `home`:
    destroyed, one line each; one that cannot be released is named with the reason and left
    alone."""
    from raidlab.cluster.plan import CLUSTER_FILE

    lines = []
    # arrays first: a cluster goes down only once no array runs over it
    owned = sorted(labs_dir(home).glob(f"*/{OWNER_FILE}"), key=lambda f: ((f.parent / CLUSTER_FILE).exists(), f))
    for owner_file in owned:
        try:
            line = remove_abandoned_scratch(Lab(owner_file.parent.name, home=home))
        except RaidlabError as exc:
            line = f"could not destroy scratch array {owner_file.parent.name}: {exc}"
        if line:
            lines.append(line)
    return lines


def _lab_name_for(entry: ArchEntry) -> str:
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in entry.label)
    return f"run{os.getpid()}-{safe}"[:64]


def _mountpoint(session) -> str:
    # A short path on purpose: PostMark 1.5x keeps path names in 80-byte buffers and crashes
    # or truncates under a deep directory (seen under pytest's tmp_path). Natively a fresh
    # empty directory of its own (removed with rmdir, never recursively, after umount); in
    # the VM a fixed directory of the guest's RAM root.
    if session.runner == "native":
        return tempfile.mkdtemp(prefix="raidlab-mnt-", dir="/tmp")
    return "/mnt/raidlab"


def _rmdir_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _remove_session_scratch(path: str) -> None:
    """Remove the scratch directory of a killed run's native session (its workload's files,
    e.g. the tar an untar reads), only if it is one (tempfile's name for it) and nothing is
    mounted at or below it."""
    real = os.path.realpath(path)
    if not os.path.basename(real).startswith(SCRATCH_PREFIX):
        return
    with contextlib.suppress(OSError):
        if not mounts_under(real):
            shutil.rmtree(real)


def _array_status(lab, when: str) -> dict[str, Any]:
    """The daemon's status of the lab's array; a result stands without it, so a failure is
    recorded with its reason instead of raised."""
    try:
        return control.request(lab, "status", timeout=STATUS_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - say why, keep the run
        return {"error": f"status {when} failed: {exc}"}


def run_case(run: PlannedRun, scenario: Scenario, runner: str, *, home: str | None,
             status: Callable[[str], None]) -> dict[str, Any]:
    """create -> mkfs -> mount -> umount -> settle -> drop caches -> mount -> workload ->
    umount -> destroy (module doc; without a file system, or with cold_start off, the steps
    that do not apply are left out); the result document."""
    workload = workloads.get(scenario.workload)
    setup: list[dict] = []
    # `dirs` closes after the array is destroyed: a mount point left busy by an interrupt is
    # free by then (destroy lazily unmounts what is on the array), and removed.
    with contextlib.ExitStack() as dirs, scratch_array(run.arch, runner, home=home, status=status,
                                                        vm_available_mib=scenario.vm_available_mib) as (lab, ready):
        session = open_session(lab)
        close = getattr(session, "close", None)
        if close:  # a native session's scratch directory goes even when umount fails
            dirs.callback(close)
        if session.runner == "native":  # and after a SIGKILL, with whoever cleans up
            _claim_scratch(lab, scratch=session.scratch)
        mountpoint: str | None = None
        mounted = False
        mount_tried = False  # an interrupt may land after the kernel mounted, before exec returned
        cold_start: dict[str, Any] | None = None
        policy: PolicyBeside | None = None
        policy_record: dict[str, Any] | None = None
        mount_options = list(run.case.mount_options)
        if hasattr(workload, "mount_options"):  # e.g. the untar workload's sync mode
            resolved = workload.resolve(dict(run.case.params)) if hasattr(workload, "resolve") else run.case.params
            mount_options += [o for o in workload.mount_options(resolved) if o not in mount_options]
        fstype = run.case.filesystem
        formatted = fstype in MOUNTED_FILESYSTEMS and not getattr(workload, "raw_device_only", False)

        def mount() -> None:
            nonlocal mounted, mount_tried
            argv = ["mount", "-t", fstype]
            if mount_options:
                argv += ["-o", ",".join(mount_options)]
            status("mount " + (",".join(mount_options) or "(defaults)"))
            mount_tried = True
            setup.append(session.exec(argv + [session.device, mountpoint], timeout=MOUNT_TIMEOUT).as_record())
            mounted = True

        try:
            uname = session.exec(["uname", "-r"], timeout=60, check=False)  # the VM's kernel differs
            runner_kernel = uname.stdout.decode(errors="replace").strip() if uname.rc == 0 else None
            if formatted:
                status(f"mkfs.{fstype}")
                mountpoint = _mountpoint(session)
                if session.runner == "native":  # rmdir only: never deletes through a mount
                    dirs.callback(_rmdir_quietly, mountpoint)
                    _claim_scratch(lab, mountpoint=mountpoint)  # for whoever cleans up after a SIGKILL
                setup.append(session.exec(mkfs_argv(fstype, session.device, run.case.mkfs_options),
                                          timeout=MKFS_TIMEOUT).as_record())
                setup.append(session.exec(["mkdir", "-p", mountpoint], timeout=60).as_record())
                mount()
            if scenario.cold_start:
                if formatted:
                    status("umount")
                    setup.append(session.exec(["umount", mountpoint], timeout=UMOUNT_TIMEOUT).as_record())
                    mounted = mount_tried = False
                cold_start = _settle(lab, session, setup, status)
                if formatted:
                    mount()
            # How fast the machine is now, where the workload is about to run (raidlab.runners.speed).
            status("speed probe")
            speed_record = speed.probe(session)
            # The array's account before the workload (after mkfs, the settle and the mount):
            # subtracted from the one after umount, it leaves what the workload itself did
            # (md's initial resync, mkfs, the settle and the mount are in both).
            status_before = _array_status(lab, "before the workload")
            if run.arch.policy is not None:  # a TSS policy manages the array while the workload runs
                status(f"{run.arch.policy} policy started")
                policy = PolicyBeside(lab, run.arch.policy, run.arch.policy_options).start()
            status(f"{scenario.workload} running")
            result = workload.run(session, mountpoint, dict(run.case.params),
                                  progress=status)  # the step line names the workload already
            speed_record = speed.finish(speed_record)
        finally:
            if policy is not None:
                policy_record = policy.stop()
            # Interrupted in the lab VM, this umount re-raises the interrupt at once instead of
            # queueing behind the guest's running command (raidlab.runners.session.DaemonSession);
            # the array is destroyed next and its daemon kills the VM.
            if mount_tried:
                with deferred_signals():
                    status("umount")
                    umount = session.exec(["umount", mountpoint], timeout=UMOUNT_TIMEOUT, check=False)
                    if mounted or umount.rc == 0:
                        setup.append(umount.as_record())
                    if umount.rc != 0:  # the array is destroyed next; a lazy umount lets it go
                        session.exec(["umount", "-l", mountpoint], timeout=60, check=False)
        # The array's own account of the run (member I/O, cache hits and destages, mdstat),
        # after umount so the filesystem's last writes are in it: what explains a result.
        array_status = _array_status(lab, "after the run")
    result = dict(result)
    result["array_status"] = array_status
    result["array_status_before"] = status_before
    result["setup_commands"] = setup
    result["cold_start"] = cold_start
    result["mount_options"] = mount_options if mounted else None
    result["runner_kernel"] = runner_kernel
    if policy_record is not None:
        if policy_record["error"] is not None:  # a policy that died left the workload unmanaged
            raise RaidlabError(f"the {run.arch.policy} policy beside the workload failed: {policy_record['error']}")
        result["policy"] = policy_record
    result["speed"] = speed_record
    result["array"] = {k: ready.get(k) for k in ("arch", "capacity", "state", "device", "guest_device")
                       if k in ready}
    if ready.get("vm"):  # the lab VM: its RAM and what was free for page cache before the run
        result["vm"] = ready["vm"]
    return result


def _settle(lab, session, setup: list[dict], status: Callable[[str], None]) -> dict[str, Any]:
    """The cold start between mkfs and the workload, with nothing mounted on the array: the
    daemon's settle (write-back caches destaged home, drives flushed), then the page cache
    dropped where the file system lives. Returns the settle's record (drained_bytes, seconds,
    note) with the seconds the page-cache drop took."""
    status("settle: caches written home")
    settled = dict(control.request(lab, "settle", timeout=SETTLE_TIMEOUT))
    status("drop the page cache")
    sync = session.exec(["sync"], timeout=600)
    drop = session.exec(["sh", "-c", DROP_CACHES], timeout=600)
    setup += [sync.as_record(), drop.as_record()]
    settled["drop_caches_seconds"] = round(sync.seconds + drop.seconds, 3)
    return settled
