"""Parallel clients on the live cluster: RAID-x §7's test run for real (`raidlab cluster
clients`), the live counterpart of the twin's `parallel` workload (raidlab.runners.parallel).

Client c runs on its own node with its own instance of the array: client 0 on the array's
own node, the others on the next nodes, each an instance joined for the run
(raidlab.cluster.join) and destroyed after it, whatever happens. Every client runs fio on
its instance's loop device at the same moment: `op` (write or read) of its own file of
`file` bytes, the files one after another from `base` (client c at base + c x file), in
requests of `block` with `depth` in flight, O_DIRECT (the paper's files were uncached and
its writes synced). The aggregate bandwidth is all clients' bytes over the time from the
moment they were started to the end of the last one, as the twin measures it; the report
adds each client's own rate and each node's cable counters over the run (the cables' tbf
counters, `raidlab cluster status`).

Reads need the bytes there: run `op = write` first, then `op = read` with the same sizes.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from raidlab.cluster import control as cluster_control
from raidlab.cluster.join import plan_join
from raidlab.errors import UsageError
from raidlab.lab import Lab
from raidlab.service import control
from raidlab.service.spec import SPEC_FILE, ArraySpec
from raidlab.tools import fio
from raidlab.tools.base import require


def _sent(status: dict[str, Any]) -> list[int]:
    return [node["links"]["sent"]["bytes"] if node.get("links", {}).get("sent") else 0 for node in status["nodes"]]


def run_clients(cluster: str, array: str, *, clients: int, op: str, file_bytes: int, block: int, depth: int,
                base: int = 0, home: str | None = None,
                status: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Run `clients` parallel clients of `array` over `cluster` (module doc); the report."""
    if op not in ("read", "write"):
        raise UsageError(f"--op {op}: read or write")
    if clients < 1 or file_bytes < block or file_bytes % block:
        raise UsageError("need at least one client and a file of whole blocks")
    require("fio")
    owner_lab = Lab(array, home=home)
    if not (owner_lab.path / SPEC_FILE).exists():
        raise UsageError(f"no array {array!r}", hint="see `raidlab list`")
    owner = ArraySpec.load(owner_lab.path)
    if owner.cluster != cluster or owner.joins is not None:
        raise UsageError(f"{array!r} is not an array of its own over cluster {cluster!r}")
    if cluster_control.is_listed(cluster, home=home):
        raise UsageError(f"cluster {cluster!r} is a node list: its clients run on its hosts, not here",
                         hint="run each client on its host (docs/cluster.md, \"Several real machines\")")
    cluster_status = cluster_control.status(cluster, home=home)
    nodes = [n["index"] for n in cluster_status["nodes"]]
    order = [owner.node] + [n for n in nodes if n != owner.node]
    if clients > len(order):
        raise UsageError(f"{clients} clients need {clients} nodes; cluster {cluster} has {len(order)}")
    owner_status = control.request(owner_lab, "status")
    capacity = owner_status["statistics"]["capacity"]
    if base + clients * file_bytes > capacity:
        raise UsageError(f"{clients} files of {file_bytes} bytes from {base} do not fit in {array}'s {capacity} bytes")
    devices = [owner_status["device"]]
    joined: list[Lab] = []
    try:
        for node in order[1:clients]:
            name = f"{array}-n{node}"
            spec = plan_join(name, None, array, cluster, node, home)
            lab = Lab(name, home=home, create=True)
            joined.append(lab)
            spec.save(lab.path)
            status(f"client on node {node}: joining {array}")
            ready = control.start_daemon(lab, "join", home=home, on_status=status)
            devices.append(ready["device"])
        jobs = [fio.FioJob(name=f"client{c}", filename=dev, rw=op, bs=str(block), size=str(file_bytes),
                           iodepth=depth, extra={"offset": str(base + c * file_bytes)})
                for c, dev in enumerate(devices)]
        before = _sent(cluster_control.status(cluster, home=home))
        status(f"{clients} client(s): {op} {file_bytes} bytes each, {block}-byte requests, {depth} in flight")
        results, seconds = _run_at_once(jobs)
        after = _sent(cluster_control.status(cluster, home=home))
    finally:
        for lab in reversed(joined):
            with contextlib.suppress(Exception):
                control.stop_daemon(lab)
            control.release_leftovers(lab)
            control.remove_lab(lab, keep_images=False)
    total = clients * file_bytes
    elapsed = max(seconds)
    return {
        "cluster": cluster, "array": array, "arch": owner.arch, "clients": clients, "op": op,
        "file_bytes": file_bytes, "block_bytes": block, "depth": depth,
        "nodes": order[:clients], "seconds": elapsed, "aggregate_mb_s": total / elapsed / 1e6,
        "client_mb_s": [file_bytes / s / 1e6 for s in seconds],
        "bytes_sent_per_node": [b - a for a, b in zip(before, after)],
        "fio": results,
    }


def _run_at_once(jobs: list[fio.FioJob]) -> tuple[list[dict[str, Any]], list[float]]:
    """Start one fio per job at the same moment; (each one's JSON report, each one's seconds
    from the common start to its end). Raises if one fails; kills the others then."""
    procs: list[subprocess.Popen] = []
    ends: list[float] = [0.0] * len(jobs)
    outs: list[str] = [""] * len(jobs)
    errs: list[str] = [""] * len(jobs)
    t0 = time.monotonic()
    try:
        for job in jobs:
            procs.append(subprocess.Popen(["fio", "--output-format=json", *job.args()], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))

        def wait(i: int) -> None:
            outs[i], errs[i] = procs[i].communicate()
            ends[i] = time.monotonic()

        threads = [threading.Thread(target=wait, args=(i,)) for i in range(len(procs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    reports = []
    for i, p in enumerate(procs):
        if p.returncode != 0:
            raise UsageError(f"fio of client {i} failed: {(errs[i].strip().splitlines() or ['?'])[-1]}")
        reports.append(json.loads(outs[i]))
    return reports, [end - t0 for end in ends]
