"""The RAID 5 write hole on md in the lab VM, over the same emulated drives with volatile write
caches as the engine's raid5 (raidlab.campaigns.writehole): a degraded md-raid5 cut during partial-stripe
writes is refused by mdadm until forced, and forced returns wrong data for blocks nobody
wrote; with `--write-journal` md starts it at once, replays its journal, and nothing is wrong,
in write-through and in write-back mode alike.
"""

from __future__ import annotations

import shutil

import pytest

from raidlab.campaigns.writehole import run_trial

pytestmark = [pytest.mark.root, pytest.mark.vm, pytest.mark.md]


@pytest.fixture(autouse=True)
def _qemu():
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")


@pytest.mark.long
def test_md_refuses_a_dirty_degraded_raid5_and_forced_shows_the_write_hole(tmp_path):
    # 32 stripes: about a quarter of the written stripes come back wrong in a trial
    trial = run_trial("md-raid5", 7, 32, str(tmp_path / "home"))
    assert trial.error is None and trial.leaks == [], trial
    assert trial.writes_lost > 0 and trial.refused is True, trial   # mdadm: "consider --force"
    assert trial.stripes_wrong > 0 and trial.writes_garbled == 0, trial


@pytest.mark.parametrize("case", ["md-raid5-journal", "md-raid5-wb"])
def test_md_write_journal_closes_the_write_hole(tmp_path, case):
    # md-raid5-wb: md refuses write-back while the array is degraded (raid5-cache.c), so the
    # degraded start runs its journal write-through; it must still start and replay
    trial = run_trial(case, 7, 32, str(tmp_path / "home"))
    assert trial.error is None and trial.leaks == [], trial
    assert trial.writes_lost > 0 and trial.refused is False and trial.replayed > 0, trial
    assert trial.stripes_wrong == 0 and trial.writes_garbled == 0, trial
