"""Reading a block device's sysfs attributes through a shell, in one round trip: md's
(/sys/block/mdN/md/NAME) and bcache's (/sys/block/bcacheN/bcache/NAME) alike. Pure: the
script runs natively or in the lab VM, and the parser reads what either printed."""

from __future__ import annotations

import re
from collections.abc import Iterable

_CHOSEN = re.compile(r"\[([^\]]+)\]")


def read_script(base: str, names: Iterable[str]) -> str:
    """One shell line printing `NAME=VALUE` for each attribute of `base` that exists."""
    return "; ".join(f"[ -r {base}/{name} ] && echo {name}=$(cat {base}/{name})" for name in names) + "; true"


def parse(text: str, names: Iterable[str]) -> dict[str, str]:
    """The `NAME=VALUE` lines of `names` as a dict, empty values left out; of a list with one
    choice in brackets ("[write-through] write-back"), the bracketed word."""
    wanted = set(names)
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if not sep or name not in wanted or not value.strip():
            continue
        chosen = _CHOSEN.search(value)
        out[name] = chosen.group(1) if chosen else value.strip()
    return out
