"""Parallel clients, each on its own node, reading or writing its own file: RAID-x §7-9.

RAID-x §7.1-7.4 (Hwang, Jin & Ho): "A large file access for either read or write is set at
20 MB. With a block size of 32 KB ... A small access is set at block level of 32 KB. Local
or remote disk accesses are generated with a uniform distribution." "All files are uncached
initially and each client accesses its private files from local or remote disks. All read
or write operations are performed simultaneously, using the MPI_Barrier() command. For write
operations, each client write the files to the buffer and issues the sync() call to stripe
the data blocks to all 16 disks, repeatedly." The figures give the aggregate bandwidth
against the number of clients (Fig. 8), the stripe unit (Fig. 9) and the number of disks
(Fig. 10); Table 4 the bandwidth of 1 and 16 clients.

In virtual time (raidlab.runners.parallel, over the cluster's twin raidlab.cluster.twin):

* client c runs on node c and owns the region [file_offset + c * region, ... + region) of
  the volume: its private file, laid out contiguously, as a fresh file system places files
  written one after another (assumed);
* a round starts every client at the same instant (the barrier); a large access is the
  whole file in `block_kb` requests, a small access one `block_kb` block at a uniformly
  random place of the client's region (seeded); `rounds` rounds, each after the previous
  one's barrier;
* reads: at most `read_depth` requests of a client in flight (the kernel's read-ahead
  window; the file is uncached, as the paper's were); writes: the blocks are in the
  client's buffer cache and its sync() hands them all to the driver, at most `write_depth`
  in flight (the kernel's request table), and the client is done when the last is written.
  Linux 2.2's sync() waited for the writes and sent no cache flush (there was none), so none
  is sent here;
* aggregate bandwidth = all clients' bytes / the virtual time from the first barrier to the
  last client's end (MB/s, 10^6 bytes per second).

The live counterpart is `raidlab cluster clients` (raidlab.cluster.clients: fio on engine
instances joined on the live cluster's nodes). The workload is declared here so that
scenarios are checked without importing the runners.
"""

from __future__ import annotations

from typing import Any

from raidlab.errors import UsageError
from raidlab.workloads.base import TWIN_NETWORK_PARAMS, Param, sim_resolver

SIM_PARAMS: dict[str, Param] = {
    "clients": Param(int, 1, "clients, one per node, all at once (the paper: 1 to 16)", minimum=1, maximum=1024),
    "op": Param(str, "read", "read or write", choices=("read", "write")),
    "access": Param(str, "large", "large: each client its whole file; small: one block per round",
                    choices=("large", "small")),
    "file_kb": Param(int, 20480, "each client's file, KiB (the paper: 20 MB)", minimum=1),
    "block_kb": Param(int, 32, "bytes per request, KiB (the paper: 32 KB)", minimum=1),
    "rounds": Param(int, 1, "barrier-separated rounds of every client's access", minimum=1),
    "read_depth": Param(int, 4, "a client's reads in flight (assumed: a 128 KiB read-ahead window of 32 KiB)",
                        minimum=1),
    "write_depth": Param(int, 64, "a client's writes in flight during sync (assumed: the kernel's request table)",
                         minimum=1),
    "file_offset_kb": Param(int, 4096, "where client 0's file starts in the volume, KiB", minimum=0),
    "nodes": Param(int, 0, "nodes of the cluster (0: as many as clients or disks, whichever is more)", minimum=0),
    **TWIN_NETWORK_PARAMS,
    "seed": Param(int, 0, "seed of the small accesses' places", minimum=0),
}


def _sim_combination(out: dict[str, Any]) -> None:
    if out["file_kb"] % out["block_kb"]:
        raise UsageError(f"file_kb {out['file_kb']} is not a whole number of {out['block_kb']} KiB blocks")
    if out["nodes"] and out["nodes"] < out["clients"]:
        raise UsageError(f"{out['clients']} clients need {out['clients']} nodes, not {out['nodes']}",
                         hint="each client runs on its own node")


resolve_sim = sim_resolver("parallel", SIM_PARAMS, _sim_combination)
