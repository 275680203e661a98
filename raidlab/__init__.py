"""raidlab: classic software-RAID research systems rebuilt over loop devices.

The public surface is small on purpose: the `raidlab` command (raidlab.cli), the error
hierarchy (raidlab.errors), emulated disks (raidlab.disks) and their export as block
devices (raidlab.export).
"""

__version__ = "0.1.0"

import os as _os

if _os.environ.get("RAIDLAB_PURE_PYTHON", "") not in ("", "0"):
    # run the compiled modules from their Python source (raidlab.compiled.ENV)
    from raidlab.compiled import install_source_finder as _install

    _install()
