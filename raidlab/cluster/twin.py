"""The cluster's virtual twin: nodes, links, a switch and the cooperative disk drivers' cost,
modelled beside the disk models, so RAID-x's experiments run on the virtual clock at any size.

The live cluster (raidlab.cluster) is real: namespaces, shaped veth links, nbdkit. It runs on
the host's few cores and has no propagation delay (no netem here), and sixteen nodes with
sixteen clients are more than one host serves faithfully. The twin keeps the same structure
and puts a model where the live cluster has a kernel object:

* **Nodes.** Node k holds disks k*D .. k*D+D-1 of the array (D disks per node, node order as
  in the live cluster) and runs client k. Every node is a machine of one host model, the
  scenario's [host] (raidlab.disks.host: the same component that charges the stream runner
  and the replay), with its own processors (`Host`): they do the node's client-side driver
  work *and* serve the node's disks to the others, and run the node's programs (a putc
  loop, a compiler: `Network.compute`, booked in the host's program slices, so driver work
  that arrives while a program computes waits at most one slice, as the kernel preempts a
  user program). RAID-x's nodes are `raidx-pentium-node`: one Pentium each. Without a host
  the nodes are the catalog's `none`: driver work is free, a program still takes its time
  (the workload states it).
* **Links and the switch** (the paper's switched Fast Ethernet, full duplex, §4.1): each node
  has a cable with a send side (node to switch) and a receive side (switch to node), each a
  Timeline at the link rate. The switch itself is non-blocking (16 ports of a switch of the
  period forward at wire speed) with output queueing: a message leaves the sender's send
  side back to back, frame after frame, and enters the receiver's receive side as its frames
  arrive, one hop latency later. Frames are Ethernet's: `frame_payload` bytes of data (the
  TCP segment) take `frame_wire` bytes of the link (headers, preamble, gap), so 100 Mbit/s
  moves at most 11.8 MB/s of data. A message's receive side can begin after its first frame
  and ends no earlier than one frame after its last, so a lone transfer is pipelined and
  two senders to one receiver share its receive side.
* **The cooperative disk driver** (§5, our NBD's part). A request to a disk on another node
  is a message to that node (the request and, for a write, its data), the serving node's
  work, the disk's own service (the disk model, unchanged), and a reply (for a read, with
  its data). Driver work costs processor time at both ends: one `message` charge on the
  node's host for each message it sends or receives (so twice per request at each end: the
  request and its reply), `message_us` plus the bytes at `message_mb_s` (copies through the
  protocol stack). The paper measured this overhead's consequence (§7: "each IDE disk can
  only deliver at most 4 MB/s due to network protocols and software overheads"); the host
  catalog's entry says how its two numbers were set. A request to a disk on the client's
  own node goes straight to the disk: no network, no driver cost (the paper's local disk
  through its own driver).
* **Which client sends a request.** Each client task sets CLIENT (the engine's request
  origin, raidlab.engine.origin) to its node; the kernel hands a task's context to the tasks
  it starts, as trio does, so every member request the engine issues for that client
  carries the client's node down to the member. RAID-x's images, written home later by its background writer,
  carry the origin of the write they belong to and are sent from that node, as the live
  engine sends them (from memory, through NBD, whether or not a log on the image disk also
  holds them). The writer's own small requests (tail records, flushes) have no client and
  are charged to no cable.

One engine instance serves every client in the twin (the live cluster runs one per client
node): the layouts are pure functions of the address, so each client's driver would issue
exactly these member requests; what one instance shares that separate drivers would not
(stripe locks, the image writer's queue) is never contended by the workloads here, whose
clients each use their own region of the volume.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from raidlab import sched
from raidlab.blockdev import TargetProxy
from raidlab.disks import host as hosts
from raidlab.disks.bus import Timeline
from raidlab.disks.host import Host, HostModel
from raidlab.engine.origin import ORIGIN as CLIENT
from raidlab.errors import UsageError

HEADER_BYTES = 28  # an NBD request or simple reply header


@dataclass(frozen=True)
class NetworkParams:
    """The twin's network parameters (module doc); every one is stated by the scenario that
    uses it. What the nodes' processors cost is their host's (raidlab.disks.host)."""

    nodes: int
    disks_per_node: int = 1
    link_mb_s: float = 12.5          # 100 Mbit/s, the paper's "12.5 MB/s per switch port" (§4.1)
    latency_us: float = 20.0         # one hop through NIC, cable and switch, beyond the frames' time
    frame_payload: int = 1448        # TCP segment in a 1500-byte Ethernet frame
    frame_wire: int = 1538           # the frame on the wire with preamble and inter-frame gap

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.disks_per_node < 1:
            raise UsageError(f"a twin needs at least one node and one disk per node, not {self.nodes} and "
                             f"{self.disks_per_node}")
        if not self.link_mb_s > 0:
            raise UsageError(f"link rate {self.link_mb_s} MB/s must be positive")
        if self.latency_us < 0:
            raise UsageError(f"latency {self.latency_us} µs cannot be negative")
        if not 0 < self.frame_payload <= self.frame_wire:
            raise UsageError(f"frame payload {self.frame_payload} must be positive and within the frame "
                             f"({self.frame_wire} bytes)")


class Node:
    """One node: its machine (a Host of the twin's model) and the two sides of its cable,
    with what they did."""

    def __init__(self, index: int, model: HostModel) -> None:
        self.index = index
        self.host = Host(model)
        self.send = Timeline()
        self.receive = Timeline()
        self.counters = {"bytes_sent": 0, "bytes_received": 0, "messages_sent": 0, "messages_received": 0,
                         "send_busy_s": 0.0, "receive_busy_s": 0.0, "send_wait_s": 0.0, "receive_wait_s": 0.0,
                         "requests_served": 0, "requests_sent": 0}

    def statistics(self) -> dict[str, Any]:
        """The node's counters; the processor's come from its host, in processor-seconds over
        all its processors: busy (driver work and programs), waiting for a processor, and of
        the busy time the programs' own; and the driver's message costs that held no
        processor (a host whose message_holds_cpu is false)."""
        host = self.host
        return {"node": self.index, **self.counters, "processors": len(host.cpus), "cpu_busy_s": sum(host.busy),
                "cpu_wait_s": sum(host.wait), "program_cpu_s": host.seconds["program"],
                "message_delay_s": host.delay_s}


class Network:
    """The nodes, their cables and the switch of one twin (module doc)."""

    def __init__(self, params: NetworkParams, host: HostModel | None = None) -> None:
        self.params = params
        self.model = host if host is not None else hosts.get("none")
        self.rate = params.link_mb_s * 1e6
        self.nodes = [Node(k, self.model) for k in range(params.nodes)]

    def wire_seconds(self, nbytes: int) -> float:
        frames = max(1, math.ceil(nbytes / self.params.frame_payload))
        return (nbytes + frames * (self.params.frame_wire - self.params.frame_payload)) / self.rate

    def frame_seconds(self, nbytes: int) -> float:
        """The wire time of a message's first frame."""
        return self.wire_seconds(min(nbytes, self.params.frame_payload))

    async def message(self, src: int, dst: int, nbytes: int) -> None:
        """Move `nbytes` from node src to node dst (module doc); returns when the last frame
        has arrived."""
        now = sched.current_time()
        sender, receiver = self.nodes[src], self.nodes[dst]
        duration = self.wire_seconds(nbytes)
        first = self.frame_seconds(nbytes)
        hop = self.params.latency_us * 1e-6
        start = sender.send.reserve(now, now, duration)
        arrive = start + first + hop
        rstart = receiver.receive.reserve(now, arrive, duration)
        end = max(rstart + duration, start + duration + first + hop)
        for node, side, busy, wait in ((sender, "sent", duration, start - now),
                                       (receiver, "received", duration, rstart - arrive)):
            node.counters[f"bytes_{side}"] += nbytes
            node.counters[f"messages_{side}"] += 1
            key = "send" if side == "sent" else "receive"
            node.counters[f"{key}_busy_s"] += busy
            node.counters[f"{key}_wait_s"] += wait
        await sched.sleep_until(end)

    async def work(self, node: int, nbytes: int) -> None:
        """Driver work for one message of `nbytes` on the node's host (a `message` charge, on
        whichever of its processors can start soonest)."""
        await self.nodes[node].host.charge("message", nbytes)

    async def compute(self, node: int, seconds: float) -> None:
        """A program's own processor time on `node` (a putc loop, a compiler), on processor 0
        of its host, the one its driver work also uses first (Host.program: in slices, so the
        driver's work, which the kernel does at once, waits at most one slice)."""
        await self.nodes[node].host.program(seconds, cpu=0)

    def statistics(self) -> dict[str, Any]:
        return {"params": self.params.__dict__, "host": self.model.describe(),
                "nodes": [n.statistics() for n in self.nodes]}


class RemoteMember(TargetProxy):
    """A member disk as the client of the current task reaches it: through the network and
    both drivers when the disk is on another node, straight to the disk otherwise."""

    def __init__(self, inner: Any, home: int, network: Network) -> None:
        super().__init__(inner)
        self.home = home
        self.network = network
        self.remote_requests = 0
        self.local_requests = 0

    def _client(self) -> int | None:
        client = CLIENT.get()
        if client is None or client == self.home:
            self.local_requests += 1
            return None
        self.remote_requests += 1
        return client

    async def _request(self, client: int, sent: int, returned: int, serve) -> Any:
        net = self.network
        net.nodes[client].counters["requests_sent"] += 1
        net.nodes[self.home].counters["requests_served"] += 1
        await net.work(client, sent)
        await net.message(client, self.home, HEADER_BYTES + sent)
        await net.work(self.home, sent)
        result = await serve()
        await net.work(self.home, returned)
        await net.message(self.home, client, HEADER_BYTES + returned)
        await net.work(client, returned)
        return result

    async def read(self, offset: int, length: int) -> bytes:
        client = self._client()
        if client is None:
            return await self.inner.read(offset, length)
        return await self._request(client, 0, length, lambda: self.inner.read(offset, length))

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        client = self._client()
        if client is None:
            return await self.inner.write(offset, data, fua=fua)
        return await self._request(client, len(data), 0, lambda: self.inner.write(offset, data, fua=fua))

    async def flush(self) -> None:
        client = self._client()
        if client is None:
            return await self.inner.flush()
        return await self._request(client, 0, 0, self.inner.flush)

    async def trim(self, offset: int, length: int) -> None:
        client = self._client()
        if client is None:
            return await self.inner.trim(offset, length)
        return await self._request(client, 0, 0, lambda: self.inner.trim(offset, length))


def twin_network(p: dict[str, Any], members: int, least_nodes: int, host: HostModel | None) -> Network:
    """The twin's network for a workload's parameters (nodes, disks_per_node, link_mb_s,
    latency_us), its nodes machines of `host` (None: the catalog's `none`): `p["nodes"]`
    nodes, or when 0 as many as the members' nodes or `least_nodes` (the workload's
    clients), whichever is more."""
    dpn = p["disks_per_node"]
    disk_nodes = -(-members // dpn)
    nodes = p["nodes"] or max(least_nodes, disk_nodes)
    if nodes < disk_nodes:
        raise UsageError(f"{members} members at {dpn} per node need {disk_nodes} nodes, not {nodes}")
    return Network(NetworkParams(nodes=nodes, disks_per_node=dpn, link_mb_s=p["link_mb_s"],
                                 latency_us=p["latency_us"]), host)


def on_twin(p: dict[str, Any], least_nodes: int, holder: dict[str, Any], host: HostModel | None):
    """A `wrap_members` for raidlab.runners.virtual.build_virtual: member m on node
    m // disks_per_node of a new twin network whose nodes are machines of `host` (a
    SimSpec's host), which is left in holder["network"]."""
    def wrap(drives: list) -> list:
        network = holder["network"] = twin_network(p, len(drives), least_nodes, host)
        dpn = network.params.disks_per_node
        return [RemoteMember(d, i // dpn, network) for i, d in enumerate(drives)]
    return wrap
