"""TSS, Temperature Sensitive Storage (Pallipadi & Gopinath, ALS 2001): RAID1, RAID5 and
compressed RAID5 stripes under one map table, moved between them by temperature.

    geometry      §3.3 columns, stripe units, polarity, sub-stripes
    maptable      §3.3/§3.6 map table, compression table, bitmap, reserved stripe
    temperature   §3.9 temperature, access and uptodate fields; aging and degradation
    compression   §3.5 lz4 on whole stripes, and its time in virtual time
    persist       §3.2 the map table's private area
    datalog       §3.8 the data log's records, scan and replay order
    device        §3.4-3.9 the integrated device, composed of one component per mechanism:
      columns       §3.7 member I/O, failed columns, durability
      physical      §3.3-3.4 RAID1 copies and parity stripes, degraded reads and writes
      space         §3.6 map changes in the paper's order, the reserved stripe
      compressed    §3.5 cRAID5 stripes in shared sub-stripes
      personalities §3.4-3.6 a logical stripe's request by its personality, allocation
      migration     §3.6 promotion and victimization, §3.9 what policies ask
      logwrites     §3.8 writes through the data log, §4 asynchronous writes
      repair        §3.7 rebuild and scrub, §3.8 shared-stripe resync after a crash
    build         create and assemble a device over its drives
    control       §3.9 the driver's ioctls as one control interface
"""

from raidlab.engine.tss.device import TSSDevice
from raidlab.engine.tss.geometry import TSSGeometry
from raidlab.engine.tss.maptable import CRAID5, INVALID, RAID1, RAID5, MapTable

__all__ = ["CRAID5", "INVALID", "MapTable", "RAID1", "RAID5", "TSSDevice", "TSSGeometry"]
