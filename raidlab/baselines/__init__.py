"""Baselines: the Linux kernel's own software RAID (md, created with mdadm) on the same
emulated member disks the engine uses, so every comparison has the real thing beside it.

    md.py             MdHost: the array daemon's family "md" (md-raid0/1/5/10), natively over
                      loop devices or inside the lab VM over virtio disks
    mdadm.py          mdadm command lines, /proc/mdstat and `mdadm --detail` parsing (pure)
    md_superblock.py  the md 1.2 superblock read from a member image (pure), so the engine
                      can assemble md's members read-only (md as the engine's oracle)
"""
