"""RAID-x Table 3 with numbers (raidlab.cluster.peaks): the paper's formulas, and B, R, W
measured on the disk model agree with the model's own closed forms."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from raidlab.cli import cli
from raidlab.cluster.peaks import disk_figures, table3
from raidlab.disks import catalog
from raidlab.disks.bench import default_size
from raidlab.disks.geometry import zone_sequential_rate
from raidlab.disks.mechanisms import expected_random_read_s
from raidlab.errors import UsageError


def test_the_papers_formulas():
    t = table3(n=4, m=12, B=10.0, R=2.0, W=3.0)
    assert [t[a]["large_write"] for a in ("raid10", "raid5", "chained", "raidx")] == [40, 30, 40, 40]
    assert t["raid5"]["small_write"] == 15
    assert {t[a]["large_read_time"] for a in t} == {6.0}              # mR/n for all four
    assert t["raid10"]["large_write_time"] == t["chained"]["large_write_time"] == 18.0   # 2mW/n
    assert t["raid5"]["large_write_time"] == 12.0                                       # mW/(n-1)
    assert t["raidx"]["large_write_time"] == pytest.approx(9.0 + 3.0)                   # mW/n + mW/(n(n-1))
    assert [t[a]["small_write_time"] for a in ("raid10", "raid5", "chained", "raidx")] == [6.0, 5.0, 6.0, 3.0]
    with pytest.raises(UsageError, match="at least 3 disks"):
        table3(n=2, m=1, B=1, R=1, W=1)


def test_b_r_w_come_from_the_disk_model():
    model, block = "maxtor-91020d6", 32 * 1024
    spec = catalog.get(model)
    got = disk_figures(model, block, samples=300)
    assert got["B"] == pytest.approx(zone_sequential_rate(spec, 0), rel=0.05)           # the outer zone
    closed = expected_random_read_s(spec, default_size(spec), block)["total"]
    assert got["R"] == pytest.approx(closed, rel=0.1)
    assert got["W"] == pytest.approx(got["R"], rel=0.2)        # write cache off: a write is a positioned access
    with pytest.raises(UsageError, match="mechanics"):
        disk_figures("ssd", block)


def test_cli_prints_the_table_and_json():
    result = CliRunner().invoke(cli, ["cluster", "peaks", "--disks", "8", "--blocks", "64"], catch_exceptions=False)
    assert result.exit_code == 0 and "RAID-10" in result.output and "chained" in result.output
    result = CliRunner().invoke(cli, ["cluster", "peaks", "--disks", "8", "--blocks", "64", "--json"],
                                catch_exceptions=False)
    doc = json.loads(result.output)
    assert result.exit_code == 0 and doc["disks"] == 8 and doc["file_blocks"] == 64
    assert doc["table"]["raidx"] == table3(8, 64, doc["B"], doc["R"], doc["W"])["raidx"]
