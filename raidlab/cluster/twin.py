"""The cluster's virtual twin: nodes, links, a switch and the cooperative disk drivers' cost,
modelled beside the disk models, so RAID-x's experiments run on the virtual clock at any size.

The live cluster (raidlab.cluster) is real: namespaces, shaped veth links, nbdkit. It runs on
the host's few cores and has no propagation delay (no netem here), and sixteen nodes with
sixteen clients are more than one host serves faithfully. The twin keeps the same structure
and puts a model where the live cluster has a kernel object:

* **Nodes.** Node k holds disks k*D .. k*D+D-1 of the array (D disks per node, node order as
  in the live cluster) and runs client k. Every node has one processor (the paper's nodes
  were single Pentium PCs), which does the node's client-side driver work *and* serves the
  node's disks to the others.
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
  its data). Driver work costs processor time at both ends: `cdd_request_us` for each
  message a node sends or receives (so twice per request at each end: the request and its
  reply) plus the bytes at `cdd_mb_s` (copies through the protocol stack). The paper measured this
  overhead's consequence (§7: "each IDE disk can only deliver at most 4 MB/s due to network
  protocols and software overheads"); a scenario states how it sets the two parameters. A
  request to a disk on the client's own node goes straight to the disk: no network, no
  driver cost (the paper's local disk through its own driver).
* **Which client sends a request.** Each client task sets CLIENT (the engine's request
  origin, raidlab.engine.origin) to its node; trio hands a task's context to the tasks it
  starts, so every member request the engine issues for that client carries the client's
  node down to the member. RAID-x's images, written home later by its background writer,
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
from raidlab.disks.bus import Timeline
from raidlab.engine.origin import ORIGIN as CLIENT
from raidlab.errors import UsageError

HEADER_BYTES = 28  # an NBD request or simple reply header


@dataclass(frozen=True)
class NetworkParams:
    """The twin's network and driver parameters (module doc); every one is stated by the
    scenario that uses it."""

    nodes: int
    disks_per_node: int = 1
    link_mb_s: float = 12.5          # 100 Mbit/s, the paper's "12.5 MB/s per switch port" (§4.1)
    latency_us: float = 20.0         # one hop through NIC, cable and switch, beyond the frames' time
    frame_payload: int = 1448        # TCP segment in a 1500-byte Ethernet frame
    frame_wire: int = 1538           # the frame on the wire with preamble and inter-frame gap
    cdd_request_us: float = 0.0      # driver processor time per message sent or received
    cdd_mb_s: float = 0.0            # driver copy rate at each end (0: free)

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.disks_per_node < 1:
            raise UsageError(f"a twin needs at least one node and one disk per node, not {self.nodes} and "
                             f"{self.disks_per_node}")
        if not self.link_mb_s > 0:
            raise UsageError(f"link rate {self.link_mb_s} MB/s must be positive")
        if self.latency_us < 0 or self.cdd_request_us < 0 or self.cdd_mb_s < 0:
            raise UsageError("latency and driver costs cannot be negative")
        if not 0 < self.frame_payload <= self.frame_wire:
            raise UsageError(f"frame payload {self.frame_payload} must be positive and within the frame "
                             f"({self.frame_wire} bytes)")


# A program's processor time is booked in slices this long, so the kernel's driver work on the
# node waits at most this long for it (assumed: 1 ms, a tenth of Linux 2.2's 10 ms tick; the
# driver's work is done on interrupt and kernel-thread time, which preempts a user program at
# its next return to user mode).
PROGRAM_SLICE_S = 0.001


class Node:
    """One node's processor and the two sides of its cable, with what they did."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.send = Timeline()
        self.receive = Timeline()
        self.cpu = Timeline()
        self.counters = {"bytes_sent": 0, "bytes_received": 0, "messages_sent": 0, "messages_received": 0,
                         "send_busy_s": 0.0, "receive_busy_s": 0.0, "cpu_busy_s": 0.0,
                         "send_wait_s": 0.0, "receive_wait_s": 0.0, "cpu_wait_s": 0.0,
                         "requests_served": 0, "requests_sent": 0, "program_cpu_s": 0.0}

    def statistics(self) -> dict[str, Any]:
        return {"node": self.index, **self.counters}


class Network:
    """The nodes, their cables and the switch of one twin (module doc)."""

    def __init__(self, params: NetworkParams) -> None:
        self.params = params
        self.rate = params.link_mb_s * 1e6
        self.nodes = [Node(k) for k in range(params.nodes)]

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
        """Driver work for one message of `nbytes` on node's processor."""
        p = self.params
        duration = p.cdd_request_us * 1e-6 + (nbytes / (p.cdd_mb_s * 1e6) if p.cdd_mb_s else 0.0)
        if duration <= 0:
            return
        now = sched.current_time()
        cpu = self.nodes[node]
        start = cpu.cpu.reserve(now, now, duration)
        cpu.counters["cpu_busy_s"] += duration
        cpu.counters["cpu_wait_s"] += start - now
        await sched.sleep_until(start + duration)

    async def compute(self, node: int, seconds: float) -> None:
        """A program's own processor time on `node` (a putc loop, a compiler), on the same
        processor as the node's driver work, booked in slices of PROGRAM_SLICE_S: the driver
        runs in the kernel, which takes the processor from a user program at once, so driver
        work that arrives while a program computes waits at most one slice (one booking of the
        whole time would hold every request for the others' disks until the program ends)."""
        cpu = self.nodes[node]
        left = seconds
        while left > 1e-12:
            piece = min(PROGRAM_SLICE_S, left)
            now = sched.current_time()
            start = cpu.cpu.reserve(now, now, piece)
            cpu.counters["cpu_busy_s"] += piece
            cpu.counters["cpu_wait_s"] += start - now
            cpu.counters["program_cpu_s"] += piece
            await sched.sleep_until(start + piece)
            left -= piece

    def statistics(self) -> dict[str, Any]:
        return {"params": self.params.__dict__, "nodes": [n.statistics() for n in self.nodes]}


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


def twin_network(p: dict[str, Any], members: int, least_nodes: int) -> NetworkParams:
    """The twin's network for a workload's parameters (nodes, disks_per_node, link_mb_s,
    latency_us, cdd_request_us, cdd_mb_s): `p["nodes"]` nodes, or when 0 as many as the
    members' nodes or `least_nodes` (the workload's clients), whichever is more."""
    dpn = p["disks_per_node"]
    disk_nodes = -(-members // dpn)
    nodes = p["nodes"] or max(least_nodes, disk_nodes)
    if nodes < disk_nodes:
        raise UsageError(f"{members} members at {dpn} per node need {disk_nodes} nodes, not {nodes}")
    return NetworkParams(nodes=nodes, disks_per_node=dpn, link_mb_s=p["link_mb_s"], latency_us=p["latency_us"],
                         cdd_request_us=p["cdd_request_us"], cdd_mb_s=p["cdd_mb_s"])


def on_twin(p: dict[str, Any], least_nodes: int, holder: dict[str, Any]):
    """A `wrap_members` for raidlab.runners.virtual.build_virtual: member m on node
    m // disks_per_node of a new twin network, which is left in holder["network"]."""
    def wrap(drives: list) -> list:
        params = twin_network(p, len(drives), least_nodes)
        network = holder["network"] = Network(params)
        return [RemoteMember(d, i // params.disks_per_node, network) for i, d in enumerate(drives)]
    return wrap
