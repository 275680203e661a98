"""The `parallel` workload in virtual time: clients on the nodes of the cluster's twin.

What a run is (the workload's own module, raidlab.workloads.parallel, says why): the
architecture is built by the same builder as every replay (raidlab.runners.virtual), each
member wrapped so that it sits on its node of the twin (raidlab.cluster.twin: member m on
node m // disks_per_node); then every client, in a task whose context names its node,
issues its accesses at the same instant. The engine is the live one; only the clock, the
disks, the network and the nodes' processors (the scenario's [host]) are models.

The report: aggregate bandwidth, each client's time and bandwidth, each member's requests
(local and remote) and utilisation, each node's cable and processor (bytes, busy and
waiting seconds), and the architecture's own counters (RAID-x's pending images, ...). The
bandwidth ends when the last client is done, and so do the counters (each node's, each
member's); what the architecture then still has to do in the background (RAID-x's pending
images) is finished after it and reported apart (`background_seconds`,
`background_bytes_sent`, `network_with_background`, each member's
`background_bytes_written`).
Deterministic for a (spec, params) pair except `speed` (wall clock).
"""

from __future__ import annotations

import random
from typing import Any

from raidlab import sched
from raidlab.cluster.twin import CLIENT, Network, on_twin
from raidlab.errors import UsageError
from raidlab.runners.virtual import SimSpec, build_virtual, run_timed
from raidlab.workloads.parallel import resolve_sim as resolve

KiB = 1024




async def _run(spec: SimSpec, p: dict[str, Any]) -> dict[str, Any]:
    block = p["block_kb"] * KiB
    size = p["file_kb"] * KiB
    base = p["file_offset_kb"] * KiB
    clients = p["clients"]
    holder: dict[str, Any] = {}

    async with sched.open_nursery() as nursery:
        built = await build_virtual(spec, nursery, wrap_members=on_twin(p, p["clients"], holder, spec.host))
        network: Network = holder["network"]
        target = built.target
        if base + clients * size > target.size:
            raise UsageError(f"{clients} files of {p['file_kb']} KiB from {p['file_offset_kb']} KiB do not fit in "
                             f"{spec.arch}'s {target.size} bytes")
        members = built.members
        before = [m.statistics() for m in members]
        counted = [(m.local_requests, m.remote_requests) for m in members]
        payload = bytes(block)
        rng = random.Random(p["seed"])
        blocks_per_file = size // block
        ends: list[float] = [0.0] * clients
        moved = [0] * clients

        async def client(c: int, offsets: list[int]) -> None:
            CLIENT.set(c)
            depth = p["read_depth"] if p["op"] == "read" else p["write_depth"]
            limit = sched.Semaphore(depth)

            async def one(offset: int) -> None:
                try:
                    if p["op"] == "read":
                        await target.read(offset, block)
                    else:
                        await target.write(offset, payload)
                finally:
                    limit.release()
                moved[c] += block

            async with sched.open_nursery() as requests:
                for offset in offsets:
                    await limit.acquire()
                    requests.start_soon(one, offset)
            ends[c] = sched.current_time()

        t0 = sched.current_time()
        per_round: list[float] = []
        for _round in range(p["rounds"]):
            started = sched.current_time()
            plans = []
            for c in range(clients):
                start = base + c * size
                if p["access"] == "large":
                    plans.append([start + k * block for k in range(blocks_per_file)])
                else:
                    plans.append([start + rng.randrange(blocks_per_file) * block])
            async with sched.open_nursery() as everyone:  # the barrier: all start now, the round ends with the last
                for c in range(clients):
                    everyone.start_soon(client, c, plans[c])
            per_round.append(sched.current_time() - started)
        elapsed = sched.current_time() - t0
        after = [m.statistics() for m in members]
        counted_after = [(m.local_requests, m.remote_requests) for m in members]
        nodes = network.statistics()
        arch_stats = built.statistics()
        # What the architecture still does in the background once every client is done
        # (RAID-x's pending images): finished here, timed apart, not in the bandwidth.
        buffer = getattr(built.target, "image_buffer", None)
        if buffer is not None:
            await buffer.drain()
        background = sched.current_time() - t0 - elapsed
        drained = [m.statistics() for m in members]
        with_background = network.statistics()
        sent_later = sum(n["bytes_sent"] for n in with_background["nodes"]) - sum(
            n["bytes_sent"] for n in nodes["nodes"])
        nursery.cancel_scope.cancel()

    total = sum(moved)
    per_member = []
    for m, x, y, z, (l0, r0), (l1, r1) in zip(members, before, after, drained, counted, counted_after):
        busy = y["busy_time"] - x["busy_time"]
        per_member.append({
            "name": m.name, "node": m.home, "local_requests": l1 - l0, "remote_requests": r1 - r0,
            "reads": y["reads"] - x["reads"], "writes": y["writes"] - x["writes"],
            "bytes_read": y["bytes_read"] - x["bytes_read"], "bytes_written": y["bytes_written"] - x["bytes_written"],
            "busy_s": busy, "utilization": busy / elapsed if elapsed > 0 else 0.0,
            "background_bytes_written": z["bytes_written"] - y["bytes_written"]})
    for node in nodes["nodes"]:
        for key, servers in (("send", 1), ("receive", 1), ("cpu", node["processors"])):
            node[f"{key}_utilization"] = node[f"{key}_busy_s"] / (elapsed * servers) if elapsed > 0 else 0.0
    return {
        "params": p,
        "bytes": total,
        "seconds": elapsed,
        "aggregate_mb_s": total / elapsed / 1e6 if elapsed > 0 else 0.0,
        "round_seconds": per_round,
        "background_seconds": background,
        "background_bytes_sent": sent_later,
        "network_with_background": with_background,
        "clients": [{"client": c, "bytes": moved[c], "seconds": ends[c] - t0 if p["rounds"] == 1 else None}
                    for c in range(clients)],
        "members": per_member,
        "network": nodes,
        "volume_bytes": target.size,
        "architecture": arch_stats,
    }


def run_parallel(spec: SimSpec, params: dict[str, Any]) -> dict[str, Any]:
    """Run the parallel clients (module doc) on `spec`'s architecture in virtual time."""
    p = resolve(params)
    return run_timed(_run, spec, p)
