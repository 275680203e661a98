"""Runners: where an architecture's block layer and its workload actually execute.

* native: on this host's kernel (loop devices over the engine's FUSE files; mdadm when the
  kernel has md). Needs root.
* vm (raidlab.vm): inside a small QEMU VM booted from the distribution's kernel
  package, for hosts without md or without root; the member disks and the engine's volume
  reach it as virtio disks.
* cluster (RAID-x): nodes as network namespaces or hosts serving disks over NBD.

Every architecture of one comparison runs in the same runner, never mixed (DESIGN.md), so a
runner is chosen per comparison, not per architecture.
"""
