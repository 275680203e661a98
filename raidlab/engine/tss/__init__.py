"""TSS, Temperature Sensitive Storage (Pallipadi & Gopinath, ALS 2001): RAID1, RAID5 and
compressed RAID5 stripes under one map table, moved between them by temperature.

    geometry      §3.3 columns, stripe units, polarity, sub-stripes
    maptable      §3.3/§3.6 map table, compression table, bitmap, reserved stripe
    temperature   §3.9 temperature, access and uptodate fields; aging and degradation
    compression   §3.5 lz4 on whole stripes, and its time in virtual time
    device        §3.4-3.6 the integrated device: stripe I/O, promotion, victimization
"""

from raidlab.engine.tss.device import TSSDevice
from raidlab.engine.tss.geometry import TSSGeometry
from raidlab.engine.tss.maptable import CRAID5, INVALID, RAID1, RAID5, MapTable

__all__ = ["CRAID5", "INVALID", "MapTable", "RAID1", "RAID5", "TSSDevice", "TSSGeometry"]
