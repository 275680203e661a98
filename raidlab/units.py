"""Values a user writes: sizes, durations, link rates and KEY=VALUE options.

Why one module: the command line, scenario files and architecture options all take sizes
("512K", "1.5G"), durations ("50ms", "15m"), link rates ("100mbit") and `-o KEY=VALUE` pairs. One parser for each
means one syntax everywhere and one wording of the error when a value cannot be read. The
parsers raise UsageError (one line and a hint, see raidlab.errors); a caller that knows more
context (a scenario file and its key, an option's name) turns it into its own error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal

from raidlab.errors import UsageError

# Every size names whole disk sectors (raidlab.blockdev.SECTOR): images, members, chunks
# and caches are all addressed in sectors.
_SECTOR = 512

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

# Longest suffix first, so that "ms" is not read as minutes.
_DURATION_UNITS = (("ms", 1e-3), ("s", 1.0), ("m", 60.0), ("h", 3600.0), ("d", 86400.0))


def parse_size(text: str, option: str | None = None) -> int:
    """'64M', '1G', '1.5GiB', '64KiB', '4096' -> bytes (binary units). Must be a sector multiple.
    `option` (e.g. "--disk-size") names where the text came from in the error."""
    where = f"{option}: " if option else ""
    match = _SIZE_RE.match(str(text))
    if not match:
        raise UsageError(f"{where}cannot read size {text!r}", hint="write it like 512M or 2G")
    value = float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()]
    if value != int(value) or int(value) <= 0 or int(value) % _SECTOR:
        raise UsageError(f"{where}size {text!r} is not a positive multiple of {_SECTOR} bytes",
                         hint="write it like 512M or 2G")
    return int(value)


def parse_duration(text: str | float) -> float:
    """Seconds from '0.05', '50ms', '90s', '15m', '2h', '3d' (a bare number is seconds)."""
    raw = str(text).strip().lower()
    factor = 1.0
    for suffix, scale in _DURATION_UNITS:
        if raw.endswith(suffix):
            raw, factor = raw.removesuffix(suffix), scale
            break
    try:
        value = float(raw) * factor
    except ValueError:
        raise UsageError(f"cannot read duration {text!r}",
                         hint="use e.g. 600, 600s, 15m, 2h, 3d, 0.05 or 50ms") from None
    if not value > 0:
        raise UsageError(f"duration must be positive, not {text!r}")
    return value


# Link rates are written as tc(8) writes them, in bits per second with decimal prefixes
# (1mbit = 10**6 bit/s). tc's byte-rate spellings ("mbps" is megaBYTES per second there) are
# refused rather than guessed at.
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)bit\s*$", re.IGNORECASE)
_RATE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_link_rate(text: str, option: str | None = None) -> int:
    """'100mbit', '20Mbit', '1gbit', '1.5mbit', '64000bit' -> bits per second (decimal prefixes,
    as tc writes them). `option` (e.g. "--link") names where the text came from in the error."""
    where = f"{option}: " if option else ""
    match = _RATE_RE.match(str(text))
    if not match:
        raise UsageError(f"{where}cannot read link rate {text!r}",
                         hint="write it in bits per second as tc does, like 100mbit, 20mbit or 1gbit")
    value = Decimal(match.group(1)) * _RATE_UNITS[match.group(2).lower()]
    if value != int(value) or int(value) <= 0:
        raise UsageError(f"{where}link rate {text!r} is not a positive whole number of bits per second",
                         hint="write it like 100mbit")
    return int(value)


def format_link_rate(bits_per_second: int) -> str:
    """The shortest tc spelling of a rate: 100000000 -> '100mbit', 1500000 -> '1500kbit'."""
    for prefix, scale in (("g", 10**9), ("m", 10**6), ("k", 10**3)):
        if bits_per_second % scale == 0:
            return f"{bits_per_second // scale}{prefix}bit"
    return f"{bits_per_second}bit"


def parse_key_values(pairs: Iterable[str], *, example: str = "key=value") -> dict[str, str]:
    """`-o KEY=VALUE` pairs -> {KEY: VALUE}; keys and values stripped, values kept as strings.

    The caller converts the values: what an option's value means (a number, a size, JSON)
    depends on the option. A later pair overrides an earlier one with the same key.
    `example` is the pair the error's hint shows (e.g. "cache=logical").
    """
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"-o {pair!r} is not KEY=VALUE", hint=f"e.g. -o {example}")
        out[key.strip()] = value.strip()
    return out


__all__ = ["format_link_rate", "parse_duration", "parse_key_values", "parse_link_rate", "parse_size"]
