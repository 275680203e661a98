"""`raidlab bench sim`: what it replays and how long it may take, not how fast (speed belongs
in the benchmark's own output)."""

from __future__ import annotations

import json
import time

from raidlab.cli import main
from raidlab.cli.bench import _within


def test_a_stream_under_a_wall_budget_stops_once_the_budget_is_spent():
    def slow():
        n = 0
        while True:
            n += 1
            time.sleep(0.0002)
            yield n

    start = time.monotonic()
    taken = list(_within(slow(), 0.2))
    assert 0 < len(taken) and time.monotonic() - start < 5  # ended by the budget, not the stream
    assert taken == list(range(1, len(taken) + 1))  # in order, nothing skipped
    assert list(_within(iter(range(10)), None)) == list(range(10))


def _bench(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["bench", "sim", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_a_fixed_count_replays_exactly_that_many_on_each_arch(capsys):
    rc, out, err = _bench(capsys, "--requests", "1000", "--arch", "disk", "--arch", "dcd", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert [(r["arch"], r["requests"]) for r in doc["runs"]] == [("disk", 1000), ("dcd", 1000)]
    assert doc["seconds_per_run"] is None and all(r["requests_per_wall_second"] > 0 for r in doc["runs"])
    assert all(r["virtual_seconds"] > 0 for r in doc["runs"])


def test_the_default_shares_its_seconds_among_the_four_architectures(capsys):
    rc, out, err = _bench(capsys, "--seconds", "4", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert [r["arch"] for r in doc["runs"]] == ["raid5", "disk", "dcd", "vcraid"]
    assert doc["seconds_per_run"] == 1.0
    assert all(0 < r["requests"] < 1_000_000 for r in doc["runs"])


def test_an_arch_that_cannot_replay_is_refused_in_one_line(capsys):
    rc, out, err = _bench(capsys, "--arch", "md-raid5", "--requests", "1000")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_against_python_replays_each_arch_both_ways_and_gives_the_ratio(capsys):
    rc, out, err = _bench(capsys, "--requests", "1000", "--arch", "disk", "--arch", "raid5", "--against-python", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert set(doc["compiled"].values()) == {"compiled"}
    assert [r["arch"] for r in doc["runs"]] == ["disk", "raid5"]
    for run in doc["runs"]:
        assert run["python"]["requests_per_wall_second"] > 0 and run["python"]["peak_rss_mib"] > 0
        assert run["compiled_over_python"] == run["requests_per_wall_second"] / run["python"]["requests_per_wall_second"]


def test_against_python_needs_a_request_count(capsys):
    rc, _out, err = _bench(capsys, "--arch", "disk", "--against-python")
    assert rc != 0 and "give --requests N" in err
