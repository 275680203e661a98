"""A cluster of nodes on this host, as the RAID-x paper's was across sixteen PCs.

RAID-x §4.1: sixteen Linux PCs, one IDE disk each, on switched Fast Ethernet in full duplex
(12.5 MB/s per port); every node reaches every disk through cooperative disk drivers (§5).
Here:

    paper                           raidlab cluster
    PC node                         a network namespace rlx-NAME-k (address: host k+1)
    its IDE disk(s)                 EmulatedDisks with a catalog timing model
    cooperative disk driver         NBD over TLS: nbdkit in the node's namespace serves its
                                    disks to holders of the cluster's key; any node reaches
                                    any disk as nbds://ADDRESS/dJ
    a ds-RAID over all the disks    an engine array over every disk, on one node
                                    (raidlab create --cluster; members: `members`)
    Fast Ethernet switch            a Linux bridge rlx-NAME in the root namespace
    a node's full-duplex port       a veth pair, shaped by tc tbf on both ends
    a failed node                   its cable cut at the switch (raidlab cluster cut)

No home-made network protocol: NBD and TCP/IP as the kernel, nbdkit and libnbd speak them.
Not built live: propagation delay (this kernel has no netem) and the consistency between
clients writing the same blocks (the CDD's locks, §5.3); clients in their own regions need
none. The virtual twin (`twin`)
models links, switch, latency and the drivers' cost on the virtual clock, where the
parallel clients of the paper's experiments run (raidlab.runners.parallel).

Modules, bottom to top: `plan` (names, addresses, link shapes, the spec; pure), `tlskey`
(the cluster's TLS pre-shared key), `network` (bridge, namespaces, cables, token buckets),
`serving` (disks, FUSE files, nbdkit per node), `daemon` (the process that holds it all),
`control` (up, status, cut, heal, down, key for the CLI), `members` (an array's members as
one node reaches them), `join` (another instance of an array on another node), `clients`
(the paper's parallel clients, live), `peaks` (Table 3 on a disk model), `hosts` (real
hosts: one serving its disks as a node, and a node list naming such hosts); `twin` (the
virtual-time model of nodes, cables and switch) stands apart and needs none of them.
The package sits above the lab, export and service layers (it reuses the service's daemon
start and control socket) and below the CLI. docs/cluster.md is the user's guide.
"""
