"""raidlab: classic software-RAID research systems rebuilt over loop devices.

The public surface is small on purpose: the `raidlab` command (raidlab.cli), the error
hierarchy (raidlab.errors), emulated disks (raidlab.disks) and their export as block
devices (raidlab.export).
"""

__version__ = "0.1.0"
