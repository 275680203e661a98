"""saz, the zone-aware statically adaptive layout (raidlab's design for SA-RAID §4): with flat
bandwidth curves it maps exactly as SA3; with curves that fall along the members it changes
the shares region by region as the members' next rows slow down; its probe measures each
member at several places under the virtual clock."""

from __future__ import annotations

from raidlab import sched
from raidlab.disks import EmulatedDisk
from raidlab.disks.backend import MemoryBackend
from raidlab.engine.layouts import create_layout
from raidlab.engine.layouts.zoneaware import ZoneAwareLayout, build_regions, curve_at
from raidlab.sched import run_virtual

GEOMETRY = dict(n_disks=4, disk_size=4096 * 1000, chunk_bytes=4096, data_offset=0)


def test_flat_curves_map_exactly_as_sa3():
    bandwidths = (15.0, 20.0, 20.0, 20.0)
    saz = create_layout("saz", bandwidth_curves=tuple((b, b, b) for b in bandwidths), **GEOMETRY)
    sa3 = create_layout("sa3", bandwidths=bandwidths, **GEOMETRY)
    assert {r.shares for r in saz.region_table} == {sa3.shares}
    for chunk in range(0, saz.capacity // 4096):
        assert saz._chunk_places(chunk) == sa3._chunk_places(chunk)
    assert saz.capacity <= sa3.capacity


def test_falling_curves_shift_the_shares_region_by_region():
    """Disk 0 is flat; disks 1-3 start fast and fall to half: the regions near the start give
    the fast disks more, the later regions less, and every region starts each disk where the
    one before ended."""
    curves = ((15.0,), (30.0, 15.0), (30.0, 15.0), (30.0, 15.0))
    saz = create_layout("saz", bandwidth_curves=curves, regions=8, **GEOMETRY)
    regions = saz.region_table
    assert len(regions) >= 4
    assert regions[0].shares[1] > regions[0].shares[0]
    assert regions[-1].shares[1] <= regions[-1].shares[0] + 1
    for before, after in zip(regions, regions[1:]):
        assert after.start == before.start + before.chunks
        assert all(after.base[d] == before.base[d] + before.cycles * before.shares[d] for d in range(4))
    assert all(r.base[d] + r.cycles * r.shares[d] <= saz.chunks_per_disk for r in regions for d in range(4))


def test_curve_reading():
    assert curve_at((10.0, 20.0), 0.0) == 10.0 and curve_at((10.0, 20.0), 1.0) == 20.0
    assert curve_at((10.0, 20.0), 0.5) == 15.0
    assert build_regions(((1.0,),), 99, 4) == ()      # a single disk takes all 100 entries: no cycle fits


def test_the_probe_measures_each_member_at_every_point_in_virtual_time():
    async def main():
        async with sched.open_nursery() as nursery:
            members = []
            for k in range(2):
                disk = EmulatedDisk(f"d{k}", "ibm-ultrastar-9lzx", MemoryBackend(512 << 20))
                disk.start(nursery)
                members.append(disk)
            params = dict(n_disks=2, disk_size=512 << 20, chunk_bytes=4096, data_offset=1 << 20)
            out, state = await ZoneAwareLayout.prepare(members, params, probe_bytes=8 << 20, probe_points=4)
            nursery.cancel_scope.cancel()
        return out, state

    out, state = run_virtual(main)
    curves = out["bandwidth_curves"]
    assert len(curves) == 2 and all(len(c) == 4 for c in curves)
    # a 512 MiB image spans the whole 9LZX (span full): its outer points are faster
    assert all(c[0] > c[-1] for c in curves)
    assert len(state["probe"]) == 8
