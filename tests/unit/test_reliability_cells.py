"""The reliability campaign's cell store: a stopped campaign goes on where it stopped, but
only with cells the same clean code ran with the same parameters; the code is named by its
trees, so a commit of results or docs keeps the cells and a change to the code does not."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from raidlab import run as run_module
from raidlab.campaigns.document import CellStore
from raidlab.campaigns.writehole import failed_rows, merge

PARAMS = {"points": 20, "seed": 1}


def test_a_cell_comes_back_for_the_same_code_and_parameters(tmp_path):
    CellStore(tmp_path, revision="abc", dirty=False, params=PARAMS).save("crash-raid5-kill", {"passed": 20})
    assert CellStore(tmp_path, revision="abc", dirty=False, params=PARAMS).load("crash-raid5-kill") == {"passed": 20}
    assert CellStore(tmp_path, revision="abc", dirty=False, params=PARAMS).load("crash-raid5-power") is None


def test_other_code_other_parameters_or_a_dirty_tree_run_the_cell_again(tmp_path):
    CellStore(tmp_path, revision="abc", dirty=False, params=PARAMS).save("fault-raid1", {"passed": 4})
    assert CellStore(tmp_path, revision="abd", dirty=False, params=PARAMS).load("fault-raid1") is None
    assert CellStore(tmp_path, revision="abc", dirty=False, params={**PARAMS, "seed": 2}).load("fault-raid1") is None
    assert CellStore(tmp_path, revision="abc", dirty=True, params=PARAMS).load("fault-raid1") is None
    dirty = CellStore(tmp_path, revision="abc", dirty=True, params=PARAMS)
    dirty.save("fault-raid1", {"passed": 3})   # stored, never taken: it names no code
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


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_code_revision_follows_the_code_not_the_commit(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "raidlab").mkdir(parents=True)
    (repo / "scripts").mkdir()
    (repo / "docs").mkdir()
    for name, text in [("raidlab/run.py", "x = 1\n"), ("scripts/setup.sh", "true\n"), ("pyproject.toml", "[p]\n"),
                       ("docs/reliability.md", "a\n")]:
        (repo / name).write_text(text)

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                       capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "one")
    monkeypatch.setattr(run_module, "__file__", str(repo / "raidlab" / "run.py"))
    first = run_module.code_revision()
    assert first["code"] and not first["dirty"]
    (repo / "docs/reliability.md").write_text("b\n")
    git("commit", "-qam", "docs only")
    assert run_module.code_revision() == first
    (repo / "raidlab/run.py").write_text("x = 2\n")
    assert run_module.code_revision()["dirty"]
    git("commit", "-qam", "code")
    second = run_module.code_revision()
    assert second["code"] != first["code"] and not second["dirty"]
