"""Releasing a lab's kernel objects: the steps shared by a live run's cleanup stack and the
stale cleanup of what a killed run left behind.

`cleanup_stale` releases what the state file lists: it kills recorded processes (checked by
start time, so a reused pid is never hit), unmounts mounts on the lab's loop devices and
under its directory, aborts the connections of its FUSE mounts, detaches its loops and
lazily unmounts its dead FUSE mount. It also *scans* for what the record may have missed in
the instant between creation and recording: loop devices whose backing file lies in the
lab's mount, mounts under the lab directory, and processes whose environment carries the
dead run's RAIDLAB_LAB_RUN token. Each step keeps going when one release fails, so one
stuck object does not keep the others alive. Last come a cluster's network objects (links,
then namespaces), each released only if it is still the object that was recorded.

A state file is only a file: damaged or forged, it could name any process, device, mount,
file or link of the host. So a record is acted on only if it names what raidlab makes for
this lab (`foreign`): a process whose environment carries the lab's directory (every child
a session starts does), a loop device, mount or image under the lab's directory, a link or
namespace with a cluster's prefix. Anything else is left alone, said as a failure, and its
record dropped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raidlab.errors import LabError, RaidlabError
from raidlab.lab.fuse_control import abort_connection, is_fuse_fstype
from raidlab.lab.proc import (parse_environ, process_group, process_start_time, process_state,
                              processes_with_env, same_process, signal_group_or_pid)
from raidlab.lab.state import (LAB_DIR_ENV, LAB_NAME_RE, RUN_TOKEN_ENV, TERMINATE_GRACE_SECONDS, Lab,
                               Resource, labs_dir)
from raidlab.tools import ip as ip_tool
from raidlab.tools import losetup
from raidlab.tools import mount as mount_tool


def release_process(fields: dict[str, Any], *, grace: float = TERMINATE_GRACE_SECONDS,
                    lab_dir: str | None = None) -> str:
    """Terminate a recorded child process group (blocking; used by stale cleanup). With
    `lab_dir`, only processes whose environment names that lab directory are signalled: a
    group whose leader is gone, or a record that names someone else's process, is not."""
    pid, pgid, start = fields["pid"], fields.get("pgid"), fields.get("start_time")
    if lab_dir is not None:
        return _release_lab_group(pid, pgid, start, lab_dir, grace)
    if not same_process(pid, start):
        # Leader gone; its group may still have members (children of a shell).
        if pgid:
            signal_group_or_pid(pid, pgid, signal.SIGKILL)
        return "already exited"
    signal_group_or_pid(pid, pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and same_process(pid, start):
        time.sleep(0.05)
    signal_group_or_pid(pid, pgid, signal.SIGKILL)
    return "terminated"


def _release_lab_group(pid: int, pgid: int | None, start: int | None, lab_dir: str, grace: float) -> str:
    leader = same_process(pid, start) and _names_lab(pid, lab_dir)
    members = [p for p in group_members(pgid) if _names_lab(p, lab_dir)] if pgid else []
    terminate_pids(sorted(set(members) | ({pid} if leader else set())), grace)
    return "terminated" if leader else "already exited" + (f"; killed {len(members)} of its group" if members else "")


def _names_lab(pid: int, lab_dir: str) -> bool:
    try:
        env = parse_environ(Path(f"/proc/{pid}/environ").read_bytes())
    except OSError:
        return False
    named = env.get(LAB_DIR_ENV)
    return named is not None and os.path.realpath(named) == os.path.realpath(lab_dir)


def group_members(pgid: int) -> list[int]:
    """The pids of process group `pgid` (ours excluded)."""
    out, me = [], os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        if process_group(int(entry)) == pgid:
            out.append(int(entry))
    return out


CLUSTER_PREFIXES = ("rlx-", "rlv-")  # raidlab.cluster.plan's names of bridges, namespaces, ports


def foreign(lab: Lab, res: Resource) -> str | None:
    """Why record `res` names nothing raidlab makes for `lab` (module doc), or None."""
    roots = {os.path.abspath(lab.path), os.path.realpath(lab.path)}

    def inside(path: Any) -> bool:
        return isinstance(path, str) and any(os.path.abspath(path).startswith(root + "/") for root in roots)

    f = res.fields
    if res.kind == "loop" and not inside(f.get("backing_file")):
        return f"its backing file {f.get('backing_file')} is outside the lab"
    if res.kind == "mount" and not inside(f.get("target")):
        return f"{f.get('target')} is outside the lab"
    if res.kind in ("fuse_mount", "image") and not inside(f.get("path")):
        return f"{f.get('path')} is outside the lab"
    if res.kind in ("link", "netns") and not str(f.get("name", "")).startswith(CLUSTER_PREFIXES):
        return f"{f.get('name')} is not a name raidlab gives"
    if res.kind == "process":
        if f.get("pgid") not in (None, f.get("pid")):
            return f"its group {f.get('pgid')} is not its own"
        if same_process(f.get("pid"), f.get("start_time")) and not _names_lab(f["pid"], str(lab.path)):
            return f"pid {f['pid']} runs, but its environment does not name the lab"
    return None


def kill_tagged_processes(run_id: str, *, grace: float = TERMINATE_GRACE_SECONDS) -> list[int]:
    """SIGTERM, then SIGKILL, every process carrying RAIDLAB_LAB_RUN=run_id (blocking)."""
    pids = processes_with_env(RUN_TOKEN_ENV, run_id)
    terminate_pids(pids, grace)
    return pids


def terminate_pids(pids: list[int], grace: float) -> None:
    """SIGTERM each of `pids`, wait up to `grace` seconds, SIGKILL those still there (each
    checked by start time, so a reused pid is never hit). Blocking."""
    starts = {pid: process_start_time(pid) for pid in pids}
    for pid in pids:
        signal_group_or_pid(pid, None, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(same_process(p, starts[p]) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if same_process(pid, starts[pid]):
            signal_group_or_pid(pid, None, signal.SIGKILL)


def unmount_users_of(device: str) -> list[str]:
    """Unmount every mount whose source is `device` (lazily if busy). Blocking."""
    done = []
    for entry in mount_tool.mounts_of_source(device):
        try:
            mount_tool.umount(entry.mount_point, timeout=60)
        except RaidlabError:
            mount_tool.umount(entry.mount_point, lazy=True, timeout=60)
        done.append(entry.mount_point)
    return done


def release_loop(fields: dict[str, Any]) -> str:
    """Detach a recorded loop device if it still serves the recorded file. Blocking."""
    device = fields["device"]
    state = losetup.sysfs_state(device)
    if not state:
        return "already detached"
    backing = losetup.strip_deleted(state.get("backing_file", ""))
    if fields.get("backing_file") and backing not in recorded_backing_names(fields):
        return f"now serves {backing}: left alone"
    names = recorded_backing_names(fields) if fields.get("backing_file") else backing
    unmounted = unmount_users_of(device)
    released = losetup.detach_and_wait(device, backing=names)
    note = f"unmounted {', '.join(unmounted)}; " if unmounted else ""
    return note + ("detached" if released else "detach pending (still open: autoclear)")


def recorded_backing_names(fields: dict[str, Any]) -> set[str]:
    """The names the kernel may give a recorded loop's backing file: its path, and -- once
    its FUSE mount was detached while the loop still held the file -- the path relative to
    that mount ("/disks/d0"), which is how the kernel names a file of a detached mount."""
    names = {fields["backing_file"]}
    mount = fields.get("mountpoint")
    if mount and fields["backing_file"].startswith(mount.rstrip("/") + "/"):
        names.add(fields["backing_file"][len(mount.rstrip("/")):])
    return names


def detach_loops_under(directory: str | os.PathLike) -> list[str]:
    """Unmount and detach every loop device backed by a file under `directory` (e.g. loops a
    COMMAND attached itself to the lab's FUSE files). Blocking; returns what it did."""
    done = []
    for dev in losetup.devices_backed_under(directory):
        if not losetup.serves(dev.device, losetup.strip_deleted(dev.backing_file)):
            continue   # released between the listing and now
        unmount_users_of(dev.device)
        released = losetup.detach_and_wait(dev.device, backing=losetup.strip_deleted(dev.backing_file))
        done.append(f"{dev.device} {'detached' if released else 'autoclear pending'}")
    return done


def held_under(directory: str | os.PathLike) -> list[str]:
    """What the host still holds of a lab directory, found without its state file (the check
    a campaign makes after each run): loop devices backed by a file under it, mounts at or
    under it, and processes (not zombies) whose command line or environment names it. One
    line each; empty when nothing is left. Blocking."""
    root = os.path.abspath(directory)
    held = [f"loop {dev.device} on {dev.backing_file}" for dev in losetup.devices_backed_under(root)]
    for line in Path("/proc/mounts").read_text().splitlines():
        target = line.split()[1].replace("\\040", " ")
        if target == root or target.startswith(root + "/"):
            held.append(f"mount {target}")
    me = os.getpid()
    needle = root.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if (needle in cmdline or needle in environ) and process_state(int(entry)) not in (None, "Z"):
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")[:80]
            held.append(f"process {entry}: {command}")
    return held


def release_fuse_mount(path: str, scratch: str | os.PathLike | None = None) -> str:
    """Unmount a FUSE mount whose server is gone or hung: abort its connection first when
    `scratch` is given (so nothing waits on it), then a lazy unmount. Blocking."""
    if not mount_tool.is_mount_point(path):
        return "not mounted"
    if scratch is not None:
        abort_connection(path, scratch)
    mount_tool.umount(path, lazy=True, timeout=60)
    return "unmounted (lazy)"


def release_link(fields: dict[str, Any]) -> str:
    """Delete a recorded link of the root namespace (a bridge, or a veth pair by its root-side
    end) if it is still the one recorded: same name and interface index. A record without an
    index was made just before the link was created, so the name alone decides. Blocking."""
    name = fields["name"]
    now = ip_tool.link_ifindex(name)
    if now is None:
        return "already gone"
    if fields.get("ifindex") is not None and now != fields["ifindex"]:
        return f"now another link (index {now}): left alone"
    ip_tool.delete_link(name)
    return "deleted"


def release_netns(fields: dict[str, Any]) -> str:
    """Delete a recorded network namespace if it is still the one recorded (same name and
    nsfs inode; a record without an inode was made just before creating it). The namespace
    itself goes once no process is left in it, with the interfaces inside. Blocking."""
    name = fields["name"]
    now = ip_tool.netns_inode(name)
    if now is None:
        return "already gone"
    if fields.get("inode") is not None and now != fields["inode"]:
        return f"now another namespace (inode {now}): left alone"
    ip_tool.delete_netns(name)
    return "deleted"


@dataclass
class StaleReport:
    released: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def nothing_to_do(self) -> bool:
        return not self.released and not self.failed


def cleanup_stale(lab: Lab) -> StaleReport:
    """Release what a killed run of `lab` left behind. The caller must own the lab's lock.

    Order: processes, mounts on the lab's loops and under its directory, loops, the FUSE
    mount, scratch images, network links and namespaces -- the reverse of how a run creates
    them (a cluster builds its network first; its servers, the processes, run inside it).
    """
    if not lab.holds_lock:
        raise LabError(f"cleanup of lab {lab.name!r} needs its lock")
    report = StaleReport()
    state = lab.read_state()
    resources = []
    for res in lab.resources():
        why = foreign(lab, res)
        if why is None:
            resources.append(res)
        else:
            report.failed.append(f"{res.describe()}: not this lab's ({why}): left alone, record dropped")
            lab.forget(res)

    def attempt(what: str, fn: Callable[[], str], resource: Resource | None = None) -> None:
        try:
            outcome = fn()
        except Exception as exc:  # keep going: release everything else
            report.failed.append(f"{what}: {exc}")
            return
        report.released.append(f"{what}: {outcome}")
        if resource is not None:
            lab.forget(resource)

    # 1. processes: recorded ones, then anything carrying the dead run's token
    for res in reversed([r for r in resources if r.kind == "process"]):
        attempt(res.describe(), lambda f=res.fields: release_process(f, grace=2.0, lab_dir=str(lab.path)), res)
    run_id = state.get("owner", {}).get("run_id")
    if run_id:
        pids = kill_tagged_processes(run_id, grace=2.0)
        if pids:
            report.released.append(f"processes of the run {run_id[:8]}: killed {pids}")

    # 2. mounts: recorded ones, then every other non-FUSE mount under the lab directory
    for res in [r for r in resources if r.kind == "mount"]:
        attempt(res.describe(), lambda f=res.fields: _release_mount(f), res)
    for entry in mount_tool.mounts_under(lab.path):
        if not is_fuse_fstype(entry.fstype):
            attempt(f"mount {entry.mount_point}",
                    lambda p=entry.mount_point: _release_mount({"target": p}))

    # 3. the lab's FUSE mounts: recorded, plus any under the lab directory. Abort their
    #    connections first, so detaching the loops below cannot wait on a hung server.
    fuse_res = [r for r in resources if r.kind == "fuse_mount"]
    fuse_paths = {r.fields["path"] for r in fuse_res} | {
        e.mount_point for e in mount_tool.mounts_under(lab.path) if is_fuse_fstype(e.fstype)}
    for path in fuse_paths:
        with contextlib.suppress(Exception):
            abort_connection(path, lab.fusectl_dir)

    # 4. loops: recorded, plus any whose backing file is in the lab's mount
    loops = {r.fields["device"]: r for r in resources if r.kind == "loop"}
    try:
        scanned = losetup.devices_backed_under(lab.mountpoint)
    except RaidlabError as exc:
        scanned = []
        report.failed.append(f"listing loop devices: {exc}")
    found = {d.device: losetup.strip_deleted(d.backing_file) for d in scanned}
    for device in sorted(set(loops) | set(found)):
        res = loops.get(device)
        fields = res.fields if res else {"device": device, "backing_file": found[device]}
        attempt(f"loop device {device}", lambda f=fields: release_loop(f), res)

    # 5. the FUSE mounts themselves (lazy: a dead server's mount cannot be stat'ed)
    for path in sorted(fuse_paths, key=lambda p: -p.count("/")):
        attempt(f"FUSE mount {path}", lambda p=path: release_fuse_mount(p))
    for res in fuse_res:
        if not mount_tool.is_mount_point(res.fields["path"]):
            lab.forget(res)

    # 6. scratch images of the dead run
    for res in [r for r in lab.resources() if r.kind == "image"]:
        if res.fields.get("keep"):
            lab.forget(res)
            continue
        attempt(res.describe(), lambda f=res.fields: _remove_file(f["path"]), res)

    # 7. a cluster's network: links (bridge ports and veth pairs), newest first, then the
    #    namespaces (each empty now: its processes were released in step 1)
    for kind, release in (("link", release_link), ("netns", release_netns)):
        for res in reversed([r for r in lab.resources() if r.kind == kind]):
            attempt(res.describe(), lambda f=res.fields, rel=release: rel(f), res)
    if not report.failed:
        lab.end_run()
    return report


def _release_mount(fields: dict[str, Any]) -> str:
    target = fields["target"]
    if not mount_tool.is_mount_point(target):
        return "not mounted"
    try:
        mount_tool.umount(target, timeout=60)
        return "unmounted"
    except RaidlabError:
        mount_tool.umount(target, lazy=True, timeout=60)
        return "unmounted (lazy)"


def _remove_file(path: str) -> str:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return "already gone"
    return "removed"


def list_labs(home: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """Every lab directory with its status: running (locked), stale (resources left by a
    killed run) or idle."""
    base = labs_dir(home)
    out = []
    if not base.is_dir():
        return out
    for entry in sorted(base.iterdir()):
        if not entry.is_dir() or not LAB_NAME_RE.match(entry.name):
            continue
        lab = Lab(entry.name, home=home)
        state = lab.read_state()
        resources = lab.resources()
        if lab.in_use():
            status = "running"
        elif resources:
            status = "stale"
        else:
            status = "idle"
        out.append({"name": lab.name, "path": str(lab.path), "status": status,
                    "pid": state.get("owner", {}).get("pid") if status == "running" else None,
                    "resources": [r.describe() for r in resources]})
    return out


def cleanup_lab(name: str, *, home: str | os.PathLike | None = None) -> StaleReport:
    """`raidlab lab cleanup NAME`: release a killed run's leftovers (refused while running)."""
    lab = Lab(name, home=home)
    with lab.owned():
        return cleanup_stale(lab)
