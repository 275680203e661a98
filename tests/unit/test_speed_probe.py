"""The machine-speed probe a live run records before its workload (raidlab.runners.speed): the host's
Python loop, and the shell loop timed inside the runner's own shell from /proc/uptime,
here with the real host shell through a NativeSession."""

from __future__ import annotations

from raidlab.runners import speed
from raidlab.runners.session import NativeSession
from raidlab.tools.base import CommandResult


def test_the_host_loop_is_timed_in_microseconds_per_iteration():
    us = speed.host_us_per_loop(loops=20_000, repeats=2)
    assert 0 < us < 1_000  # one iteration of a few integer operations, far below a millisecond


def test_the_runner_loop_runs_in_the_session_s_shell_and_reads_its_clock(tmp_path):
    with NativeSession("/dev/null", scratch=tmp_path) as session:
        record = speed.probe(session)
    assert record["runner"] == "native" and record["runner_loops"] == speed.RUNNER_LOOPS["native"]
    assert record["runner_us_per_loop"] is not None and record["runner_us_per_loop"] > 0
    assert record["host_us_per_loop"] > 0 and record["host_loops"] == speed.HOST_LOOPS
    steal, total = record["host_cpu_ticks"]
    assert 0 <= steal <= total
    done = speed.finish(record)
    share = done["host_steal_share"]  # None when no clock tick passed between the two readings
    assert "host_cpu_ticks" not in done and (share is None or 0 <= share <= 1)


class _Answering:
    runner = "vm"

    def __init__(self, stdout: bytes, rc: int = 0):
        self.stdout, self.rc, self.argv = stdout, rc, None

    def exec(self, argv, *, timeout, stdin=None, check=True):
        self.argv = argv
        return CommandResult(argv, self.rc, self.stdout, b"", 0.1)


def test_the_best_of_the_runner_s_loops_is_kept():
    class Varying(_Answering):
        answers = iter([b"0.00 2.00\n", b"0.00 1.00\n", b"garbled\n"])

        def exec(self, argv, *, timeout, stdin=None, check=True):
            return CommandResult(argv, 0, next(self.answers), b"", 0.1)

    record = speed.probe(Varying(b""))
    assert record["runner_us_per_loop"] == round(1.0 / speed.RUNNER_LOOPS["vm"] * 1e6, 3)


def test_steal_is_the_share_of_the_host_s_ticks_between_the_two_readings(monkeypatch):
    readings = iter([(100, 1_000), (150, 1_500)])
    monkeypatch.setattr(speed, "host_cpu_ticks", lambda: next(readings))
    record = {"host_cpu_ticks": speed.host_cpu_ticks(), "runner": "vm"}
    assert speed.finish(record) == {"runner": "vm", "host_steal_share": 0.1}  # 50 of 500 ticks


def test_the_loop_time_is_the_difference_of_the_two_uptimes():
    session = _Answering(b"100.25 101.25\n")
    assert speed.runner_us_per_loop(session, 20_000) == 50.0  # 1 s over 20,000 iterations
    assert session.argv[:3] == ["sh", "-c", speed.RUNNER_SCRIPT] and session.argv[-1] == "20000"


def test_a_shell_that_does_not_answer_two_uptimes_gives_no_value():
    assert speed.runner_us_per_loop(_Answering(b"sh: not found\n", rc=127), 10) is None
    assert speed.runner_us_per_loop(_Answering(b"5.00 5.00\n"), 10) is None  # under one tick of the clock
    assert speed.runner_us_per_loop(_Answering(b"5.00 6.00\n", rc=1), 10) is None


def test_spread_is_slowest_fastest_and_their_ratio():
    assert speed.spread([2.0, None, 1.0, 1.5]) == (2.0, 1.0, 2.0)
    assert speed.spread([1.0, None]) is None
