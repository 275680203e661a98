"""ip(8), tc(8) and nsenter(1): network namespaces, bridges, veth pairs, token-bucket links.

What a cluster of namespaces on one host is made of (raidlab.cluster): a bridge in the root
namespace is the switch, each node is a named network namespace (`ip netns add`, which
bind-mounts the namespace at /run/netns/NAME), and a veth pair is a node's cable, one end in
the node as `eth0` and the other a port of the bridge. A `tbf` root qdisc on each end caps
what leaves that end, so both directions of a cable are shaped.

Why the programs and not netlink from Python: the command lines are the ones a student
types to look at the cluster (`ip -n NS addr`, `tc -s qdisc show`), and every call is
recorded like any other tool's (raidlab.tools.base).

Identity: a name alone does not identify a link or a namespace, since names are reused. A
link is identified by its name and interface index (indexes only grow within a boot), a
namespace by its name and the inode of /run/netns/NAME (the namespace's own nsfs inode), so
a stale cleanup never deletes a stranger's object that took the name later.

Blocking: call from a worker thread in trio code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from raidlab.tools.base import run

NETNS_DIR = Path("/run/netns")
SYS_CLASS_NET = Path("/sys/class/net")
# The kernel's limit on an interface name (IFNAMSIZ 16, with the terminating NUL).
IFNAME_MAX = 15


def _ip(netns: str | None) -> list[str]:
    return ["ip", "-n", netns] if netns else ["ip"]


def _tc(netns: str | None) -> list[str]:
    return ["tc", "-n", netns] if netns else ["tc"]


# -- namespaces -----------------------------------------------------------------------------

def netns_path(name: str) -> Path:
    return NETNS_DIR / name


def netns_names() -> set[str]:
    """Named network namespaces (what `ip netns list` reads: the files of /run/netns)."""
    try:
        return set(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return set()


def netns_inode(name: str) -> int | None:
    """The namespace's nsfs inode (its identity while it lives), None if there is none."""
    try:
        return os.stat(netns_path(name)).st_ino
    except OSError:
        return None


def add_netns(name: str) -> None:
    run(["ip", "netns", "add", name], timeout=30)


def delete_netns(name: str) -> None:
    run(["ip", "netns", "delete", name], timeout=30)


def set_netns_sysctl(netns: str, key: str, value: int | str) -> None:
    """Set a sysctl of the network namespace `netns` (the net.* keys are per namespace):
    sysctl -w, run inside it with nsenter --net."""
    run(nsenter_argv(netns, ["sysctl", "-q", "-w", f"{key}={value}"]), timeout=30)


def netns_sysctl(netns: str, key: str) -> str:
    """A sysctl's value as the network namespace `netns` sees it."""
    return run(nsenter_argv(netns, ["sysctl", "-n", key]), timeout=30).stdout.strip()


def nsenter_argv(netns: str, argv: list[str], executable: str = "nsenter") -> list[str]:
    """`argv` run in the network namespace `netns` and nothing else: unlike `ip netns exec`,
    nsenter --net keeps the caller's mount namespace, so the program sees the host's mounts
    (a lab's FUSE mount) as they are, including later unmounts."""
    return [executable, f"--net={netns_path(netns)}", "--", *argv]


# -- links ------------------------------------------------------------------------------------

def link_names() -> set[str]:
    """Interfaces of the root namespace (this process's)."""
    try:
        return set(os.listdir(SYS_CLASS_NET))
    except FileNotFoundError:
        return set()


def link_ifindex(name: str) -> int | None:
    """The interface index of a link of the root namespace, None if there is no such link."""
    try:
        return int((SYS_CLASS_NET / name / "ifindex").read_text())
    except (OSError, ValueError):
        return None


def add_bridge(name: str) -> None:
    """A bridge with STP off (its default), so ports forward as soon as they are up."""
    run(["ip", "link", "add", name, "type", "bridge"], timeout=30)


def add_veth(name: str, peer: str, peer_netns: str) -> None:
    """A veth pair: `name` in the root namespace, `peer` created directly inside `peer_netns`
    (so the peer's name never has to be free in the root namespace)."""
    run(["ip", "link", "add", name, "type", "veth", "peer", "name", peer, "netns", peer_netns],
        timeout=30)


def set_master_up(name: str, master: str) -> None:
    run(["ip", "link", "set", name, "master", master, "up"], timeout=30)


def set_up(name: str, *, netns: str | None = None) -> None:
    run([*_ip(netns), "link", "set", name, "up"], timeout=30)


def set_down(name: str, *, netns: str | None = None) -> None:
    run([*_ip(netns), "link", "set", name, "down"], timeout=30)


def link_is_up(name: str) -> bool | None:
    """Whether a root-namespace link is administratively up (IFF_UP); None if it is gone."""
    try:
        flags = int((SYS_CLASS_NET / name / "flags").read_text(), 16)
    except (OSError, ValueError):
        return None
    return bool(flags & 0x1)


def add_address(name: str, cidr: str, *, netns: str | None = None) -> None:
    run([*_ip(netns), "addr", "add", cidr, "dev", name], timeout=30)


def delete_link(name: str) -> None:
    """Delete a link of the root namespace (a veth pair goes with either end)."""
    run(["ip", "link", "delete", name], timeout=30)


# -- token bucket filter --------------------------------------------------------------------

def tbf_argv(dev: str, *, rate_bits: int, burst_bytes: int, limit_bytes: int,
             netns: str | None = None) -> list[str]:
    """`tc qdisc replace` of a tbf root qdisc on `dev`: what leaves `dev` at most at
    `rate_bits` bit/s, after a bucket of `burst_bytes`, with up to `limit_bytes` queued
    (tc-tbf(8)). Units written out (bit, bytes) so the command line reads unambiguously."""
    return [*_tc(netns), "qdisc", "replace", "dev", dev, "root", "tbf",
            "rate", f"{rate_bits}bit", "burst", str(burst_bytes), "limit", str(limit_bytes)]


def set_tbf(dev: str, *, rate_bits: int, burst_bytes: int, limit_bytes: int,
            netns: str | None = None) -> None:
    run(tbf_argv(dev, rate_bits=rate_bits, burst_bytes=burst_bytes, limit_bytes=limit_bytes,
                 netns=netns), timeout=30)


QDISC_COUNTERS = ("bytes", "packets", "drops", "overlimits", "requeues", "backlog", "qlen")


def parse_qdisc_json(text: str) -> dict | None:
    """The root qdisc of `tc -s -j qdisc show dev X`: its kind, options and counters (bytes and
    packets sent, drops, overlimits: packets that found the bucket empty and had to wait,
    backlog: bytes queued now). None when the device has no root qdisc in the output."""
    text = text.strip()
    if not text:
        return None
    for entry in json.loads(text):
        if entry.get("root"):
            out = {"kind": entry.get("kind"), "options": entry.get("options", {})}
            out.update({key: int(entry.get(key, 0)) for key in QDISC_COUNTERS})
            return out
    return None


def qdisc_stats(dev: str, *, netns: str | None = None) -> dict | None:
    """The root qdisc's kind, options and counters of `dev` (see parse_qdisc_json)."""
    proc = run([*_tc(netns), "-s", "-j", "qdisc", "show", "dev", dev], timeout=30)
    return parse_qdisc_json(proc.stdout)
