"""The reliability campaign's cell store: a stopped campaign goes on where it stopped, but
only with cells the same clean commit ran with the same parameters."""

from __future__ import annotations

from raidlab.campaigns.document import CellStore
from raidlab.campaigns.writehole import failed_rows, merge

PARAMS = {"points": 20, "seed": 1}


def test_a_cell_comes_back_for_the_same_commit_and_parameters(tmp_path):
    CellStore(tmp_path, revision="abc", dirty=False, params=PARAMS).save("crash-raid5-kill", {"passed": 20})
    assert CellStore(tmp_path, revision="abc", dirty=False, params=PARAMS).load("crash-raid5-kill") == {"passed": 20}
    assert CellStore(tmp_path, revision="abc", dirty=False, params=PARAMS).load("crash-raid5-power") is None


def test_another_commit_other_parameters_or_a_dirty_tree_run_the_cell_again(tmp_path):
    CellStore(tmp_path, revision="abc", dirty=False, params=PARAMS).save("fault-raid1", {"passed": 4})
    assert CellStore(tmp_path, revision="abd", dirty=False, params=PARAMS).load("fault-raid1") is None
    assert CellStore(tmp_path, revision="abc", dirty=False, params={**PARAMS, "seed": 2}).load("fault-raid1") is None
    assert CellStore(tmp_path, revision="abc", dirty=True, params=PARAMS).load("fault-raid1") is None
    dirty = CellStore(tmp_path, revision="abc", dirty=True, params=PARAMS)
    dirty.save("fault-raid1", {"passed": 3})   # stored, never taken: it names no commit
    assert CellStore(tmp_path, revision="abc", dirty=False, params=PARAMS).load("fault-raid1") is None
    (tmp_path / "fault-raid1.json").write_text("{not json")
    assert CellStore(tmp_path, revision="abc", dirty=False, params=PARAMS).load("fault-raid1") is None


def _row(case, trials=2, refused=2, wrong=0, **extra):
    return {"case": case, "trials": trials, "refused": refused, "stripes_wrong": wrong, "errors": 0, "leaks": 0,
            "writes_garbled": 0, **extra}


def test_write_hole_cases_merge_and_what_counts_as_failed():
    merged = merge([{"seed": 1, "trials": 2, "stripes": 16, "rows": [_row("raid5", wrong=5)], "results": [1, 2]},
                    {"seed": 1, "trials": 2, "stripes": 16, "rows": [_row("md-raid5-journal", refused=0)],
                     "results": [3, 4]}])
    assert [r["case"] for r in merged["rows"]] == ["raid5", "md-raid5-journal"] and merged["results"] == [1, 2, 3, 4]
    assert failed_rows(merged) == []   # a hole without a journal is what the campaign shows
    bad = merge([{"seed": 1, "trials": 2, "stripes": 16, "results": [],
                  "rows": [_row("raid5", refused=1), _row("raid5-journal", refused=0, wrong=1),
                           _row("md-raid5-journal", refused=2)]}])
    assert failed_rows(bad) == ["raid5", "raid5-journal", "md-raid5-journal"]
