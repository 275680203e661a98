"""The `andrew` workload in virtual time: one private Andrew benchmark per client on the twin.

RAID-x §6.1 (Fig. 7): "Each client executes its private copy of Andrew benchmark"; "The
number of disk I/O nodes is fixed at 16"; the elapsed time against the number of clients.
Virtual time has no file system or compiler, so each phase of a client's copy is what the
live driver (raidlab.workloads.andrew) measured one client's phase to be, replayed on that
client's node of the cluster's twin (raidlab.cluster.twin):

* the phase's reads, one after another (the program waits for each: metadata and files
  not in the cache), each `read_kb / reads` KiB at a seeded random 1 KiB-aligned place of the
  client's own region of the volume (its file system);
* the phase's programs' processor time (`cpu_ms` x `cpu_scale`) on the node's processor
  (every node a machine of the scenario's [host], raidlab.disks.host), which also does the
  node's driver work: sending its own requests and serving its disk to every other client;
* the phase's writes handed to the kernel's write-behind at the phase's end (the phase does
  not wait for them; at most `write_depth` in flight), each `write_kb / writes` KiB, one after
  another from the start of the client's region (a fresh file system allocates from its
  start: assumed).

Clients start together and each runs its five phases back to back; a client's elapsed time
ends with its last phase's processor time (with `sync_at_end`, when its writes are done
too). The report gives each client's elapsed and phase times, their mean and maximum, and
every node's processor and cable use. Writes still behind when the last client is done (and
RAID-x's pending images) are finished afterwards, timed apart (`background_seconds`). Deterministic for a (spec, params) pair except `speed`.
"""

from __future__ import annotations

import random
from typing import Any

from raidlab import sched
from raidlab.cluster.twin import CLIENT, Network, on_twin
from raidlab.errors import UsageError
from raidlab.runners.virtual import SimSpec, build_virtual, run_timed
from raidlab.workloads.andrew import PHASES, resolve_sim as resolve

KiB = 1024




def _sizes(total_kb: int, count: int) -> list[int]:
    """`count` request sizes in bytes, whole KiB, summing to `total_kb` KiB."""
    if count == 0:
        return []
    base, extra = divmod(total_kb, count)
    return [(base + (1 if i < extra else 0)) * KiB for i in range(count)]


async def _run(spec: SimSpec, p: dict[str, Any]) -> dict[str, Any]:
    clients = p["clients"]
    region = p["region_kb"] * KiB
    base = p["file_offset_kb"] * KiB
    holder: dict[str, Any] = {}

    async with sched.open_nursery() as nursery:
        built = await build_virtual(spec, nursery, wrap_members=on_twin(p, p["clients"], holder, spec.host))
        network: Network = holder["network"]
        target = built.target
        if base + clients * region > target.size:
            raise UsageError(f"{clients} file systems of {p['region_kb']} KiB from {p['file_offset_kb']} KiB do "
                             f"not fit in {spec.arch}'s {target.size} bytes")
        members = built.members
        rng = random.Random(p["seed"])
        places = [[[rng.randrange(region // KiB - max(1, kb // max(n, 1))) * KiB for _ in range(n)]
                   for n, kb in zip(p["reads"], p["read_kb"])] for _ in range(clients)]
        results: list[dict[str, Any]] = [{} for _ in range(clients)]
        t0 = sched.current_time()

        async def client(c: int, behind: sched.Nursery) -> None:
            CLIENT.set(c)
            start = base + c * region
            slots = sched.Semaphore(p["write_depth"])
            writes_done = sched.Event()
            pending = [0]

            async def write_one(offset: int, size: int) -> None:
                try:
                    await target.write(offset, bytes(size))
                finally:
                    slots.release()
                    pending[0] -= 1
                    if pending[0] == 0:
                        writes_done.set()

            cursor = start
            phase_seconds = {}
            for i, phase in enumerate(PHASES):
                began = sched.current_time()
                for offset, size in zip(places[c][i], _sizes(p["read_kb"][i], p["reads"][i])):
                    await target.read(start + offset, size)
                await network.compute(c, p["cpu_ms"][i] * p["cpu_scale"] / 1e3)
                for size in _sizes(p["write_kb"][i], p["writes"][i]):
                    await slots.acquire()
                    pending[0] += 1
                    behind.start_soon(write_one, cursor, size)
                    cursor += size
                phase_seconds[phase] = sched.current_time() - began
            if p["sync_at_end"] and pending[0]:
                await writes_done.wait()
            results[c] = {"client": c, "elapsed": sched.current_time() - t0, "phases": phase_seconds}

        async with sched.open_nursery() as behind:
            async with sched.open_nursery() as everyone:
                for c in range(clients):
                    everyone.start_soon(client, c, behind)
            done = sched.current_time() - t0
            nodes = network.statistics()
        buffer = getattr(target, "image_buffer", None)  # RAID-x's images still pending
        if buffer is not None:
            await buffer.drain()
        background = sched.current_time() - t0 - done
        members_after = [m.statistics() for m in members]  # the writes behind included
        arch_stats = built.statistics()
        nursery.cancel_scope.cancel()

    for node in nodes["nodes"]:
        for key, servers in (("send", 1), ("receive", 1), ("cpu", node["processors"])):
            node[f"{key}_utilization"] = node[f"{key}_busy_s"] / (done * servers) if done > 0 else 0.0
    elapsed = [r["elapsed"] for r in results]
    return {
        "params": p,
        "clients": results,
        "elapsed_seconds": sum(elapsed) / clients,
        "max_elapsed_seconds": max(elapsed),
        "phase_seconds": {phase: sum(r["phases"][phase] for r in results) / clients for phase in PHASES},
        "seconds": done,
        "background_seconds": background,
        "network": nodes,
        "members": [{"name": m.name, "node": m.home, "reads": s["reads"], "writes": s["writes"],
                     "bytes_read": s["bytes_read"], "bytes_written": s["bytes_written"], "busy_s": s["busy_time"]}
                    for m, s in zip(members, members_after)],
        "volume_bytes": target.size,
        "architecture": arch_stats,
    }


def run_andrew(spec: SimSpec, params: dict[str, Any]) -> dict[str, Any]:
    """One Andrew benchmark per client on the twin (module doc) on `spec`'s architecture."""
    p = resolve(params)
    return run_timed(_run, spec, p)
