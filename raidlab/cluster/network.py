"""A cluster's network on this host: the bridge, each node's namespace and cable, its address
and the token buckets on both ends of its cable (names and numbers: raidlab.cluster.plan).

Each object is recorded in the lab's state file just before it is created and updated with
its identity (interface index, namespace inode) right after, so a killed daemon's objects
are listed on disk for `raidlab lab cleanup`, and that cleanup deletes only objects that are
still the recorded ones (raidlab.lab.cleanup.release_link / release_netns). Each is pushed
on the session's cleanup stack as it is made; the stack releases in reverse: cables, then
namespaces, then the bridge.
"""

from __future__ import annotations

from typing import Any

from raidlab import sched
from raidlab.cluster.plan import NODE_IFNAME, PEER_RETRIES, ClusterSpec, LinkShape, NodePlan, bridge_name
from raidlab.lab import LabSession, release_link, release_netns
from raidlab.tools import ip as ip_tool


async def _blocking(fn, *args, **kwargs):
    return await sched.to_thread_run_sync(lambda: fn(*args, **kwargs))


async def _add_link(session: LabSession, name: str, link_kind: str, create) -> None:
    """Record, create, identify and push the release of one root-namespace link."""
    lab = session.lab
    resource = lab.record("link", name=name, link_kind=link_kind)
    try:
        await _blocking(create)
    except BaseException:
        lab.forget(resource)  # ip refused (e.g. the name was taken meanwhile): nothing made
        raise
    lab.update(resource, ifindex=ip_tool.link_ifindex(name))
    session.push_sync(f"{link_kind} {name}", lambda: release_link(resource.fields), resource)


async def _add_netns(session: LabSession, name: str) -> None:
    lab = session.lab
    resource = lab.record("netns", name=name)
    try:
        await _blocking(ip_tool.add_netns, name)
    except BaseException:
        lab.forget(resource)
        raise
    lab.update(resource, inode=ip_tool.netns_inode(name))
    session.push_sync(f"network namespace {name}", lambda: release_netns(resource.fields), resource)


async def build_network(session: LabSession, spec: ClusterSpec, nodes: list[NodePlan]) -> None:
    """The bridge, then per node: namespace, cable, addresses, links up, how long its TCP
    waits for a dead peer (raidlab.cluster.plan, "A dead peer"), both token buckets."""
    bridge = bridge_name(spec.name)
    shape = spec.link
    await _add_link(session, bridge, "bridge", lambda: ip_tool.add_bridge(bridge))
    await _blocking(ip_tool.set_up, bridge)
    session.status(f"bridge {bridge} up")
    for node in nodes:
        await _add_netns(session, node.namespace)
        await _add_link(session, node.veth, "veth",
                        lambda node=node: ip_tool.add_veth(node.veth, NODE_IFNAME, node.namespace))
        await _blocking(ip_tool.set_master_up, node.veth, bridge)
        await _blocking(ip_tool.set_up, "lo", netns=node.namespace)
        await _blocking(ip_tool.add_address, NODE_IFNAME, node.cidr, netns=node.namespace)
        await _blocking(ip_tool.set_up, NODE_IFNAME, netns=node.namespace)
        await _blocking(ip_tool.set_netns_sysctl, node.namespace, "net.ipv4.tcp_retries2", PEER_RETRIES)
        await _shape(node, shape)
        session.status(f"node {node.index}: namespace {node.namespace}, {node.cidr}, "
                       f"cable {node.veth}")


async def _shape(node: NodePlan, shape: LinkShape) -> None:
    """tbf on both ends: the node's eth0 (what it sends) and the switch end (what it gets)."""
    params = {"rate_bits": shape.rate_bits, "burst_bytes": shape.burst_bytes,
              "limit_bytes": shape.limit_bytes}
    await _blocking(ip_tool.set_tbf, NODE_IFNAME, netns=node.namespace, **params)
    await _blocking(ip_tool.set_tbf, node.veth, **params)


def link_counters(node: NodePlan) -> dict[str, Any]:
    """The token buckets of a node's cable (blocking): `sent` is what the node sent (its eth0's
    tbf), `received` what the switch delivered to it (the switch end's tbf); bytes, packets,
    drops, overlimits (packets that waited for tokens) and the bytes queued now."""
    return {"sent": ip_tool.qdisc_stats(NODE_IFNAME, netns=node.namespace),
            "received": ip_tool.qdisc_stats(node.veth)}
