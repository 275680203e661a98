"""raidlab.units: durations and KEY=VALUE pairs (sizes: test_export_parsers.py)."""

from __future__ import annotations

import pytest

from raidlab.errors import UsageError
from raidlab.units import parse_duration, parse_key_values


@pytest.mark.parametrize("text,seconds", [
    ("0.05", 0.05), ("50ms", 0.05), ("0.05s", 0.05), ("90", 90), ("90s", 90), ("15m", 900),
    ("2h", 7200), ("3d", 259200), (" 50 MS ", 0.05), (0.05, 0.05), (2, 2),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text,message", [
    ("soon", "cannot read duration 'soon'"), ("", "cannot read duration ''"),
    ("0", "duration must be positive"), ("-5ms", "duration must be positive"),
])
def test_parse_duration_refuses(text, message):
    with pytest.raises(UsageError, match=message):
        parse_duration(text)


def test_key_values_stay_strings_and_are_stripped():
    assert parse_key_values(("a=1", " b = x ", "c=", "d=e=f", "a=2")) == {"a": "2", "b": "x", "c": "", "d": "e=f"}


@pytest.mark.parametrize("pair", ["cache", "=1", " =1"])
def test_key_values_refuse_a_pair_without_key_or_equals(pair):
    with pytest.raises(UsageError) as info:
        parse_key_values(["ok=1", pair], example="cache=logical")
    assert str(info.value) == f"-o {pair!r} is not KEY=VALUE; e.g. -o cache=logical"
