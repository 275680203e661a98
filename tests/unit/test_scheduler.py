"""Queue disciplines pick the request the textbook says they pick (raidlab.disks.scheduler)."""

from __future__ import annotations

import dataclasses

import pytest

from raidlab.disks.scheduler import Fifo, Scan, Sstf, make_discipline
from raidlab.errors import UsageError


@dataclasses.dataclass
class Req:
    cylinder: int
    seq: int


def drain(discipline, cylinders, arm):
    for seq, cyl in enumerate(cylinders):
        discipline.push(Req(cyl, seq))
    order = []
    while len(discipline):
        req = discipline.pop(arm)
        order.append(req.cylinder)
        arm = req.cylinder
    return order


QUEUE = [98, 183, 37, 122, 14, 124, 65, 67]  # the classic textbook queue, arm at 53


def test_fifo_serves_in_arrival_order():
    assert drain(Fifo(), QUEUE, 53) == QUEUE


def test_sstf_serves_nearest_first():
    assert drain(Sstf(), QUEUE, 53) == [65, 67, 37, 14, 98, 122, 124, 183]


def test_scan_sweeps_then_reverses():
    scan = Scan()
    assert drain(scan, QUEUE, 53) == [65, 67, 98, 122, 124, 183, 37, 14]
    assert scan.direction == -1


def test_scan_starting_downwards():
    scan = Scan()
    scan.direction = -1
    assert drain(scan, QUEUE, 53) == [37, 14, 65, 67, 98, 122, 124, 183]


def test_ties_go_to_the_oldest_request():
    sstf = Sstf()
    for seq, cyl in enumerate([12, 8, 12, 8]):
        sstf.push(Req(cyl, seq))
    assert [sstf.pop(10).seq for _ in range(4)] == [0, 1, 2, 3]


def test_sstf_and_scan_move_the_arm_less_than_fifo():
    def travel(order, arm=53):
        total = 0
        for cyl in order:
            total += abs(cyl - arm)
            arm = cyl
        return total

    fifo = travel(drain(Fifo(), QUEUE, 53))
    assert travel(drain(Sstf(), QUEUE, 53)) < fifo
    assert travel(drain(Scan(), QUEUE, 53)) < fifo


def test_unknown_discipline_is_a_user_error():
    with pytest.raises(UsageError) as info:
        make_discipline("elevator")
    assert "fifo" in str(info.value)
