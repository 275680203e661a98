"""A lab's saved records: a dataclass kept as one JSON file of the lab directory (an
array's array.json, a cluster's cluster.json), written whole and private
(raidlab.lab.private.write_private) and read back strictly.

Why strictly: cleanup and the daemons trust these files, so a file that is not the saved
form of its dataclass (not a JSON object, a field unknown, missing or of another type) is
refused with one line naming the file and what is wrong, never half-read.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, TypeVar

from raidlab.errors import UsageError
from raidlab.lab.private import write_private

T = TypeVar("T")

_SIMPLE_TYPES = {"str": str, "int": int, "bool": bool, "dict[str, Any]": dict, "str | None": (str, type(None)),
                 "int | None": (int, type(None)), "list[dict[str, Any]] | None": (list, type(None))}


def save(record: Any, path: Path) -> None:
    """Write dataclass `record` as the whole of `path` (0600)."""
    write_private(path, json.dumps(dataclasses.asdict(record), indent=2))


def load(cls: type[T], path: Path, *, missing: UsageError, damaged_hint: str) -> T:
    """The `cls` saved in `path`; `missing` is raised when there is no such file, and a
    damaged one is a UsageError naming the file and the problem, with `damaged_hint`."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise missing from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{path} is damaged: {exc}", hint=damaged_hint) from None
    problem = problem_of(cls, doc)
    if problem:
        raise UsageError(f"{path} is damaged: {problem}", hint=damaged_hint)
    return cls(**doc)


def problem_of(cls: type, doc: Any) -> str | None:
    """Why `doc` cannot be the saved form of dataclass `cls` (a JSON object with its fields,
    each of its annotated type), or None."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(doc) - set(fields))
    if unknown:
        return f"unknown field {unknown[0]!r}"
    for name, field in fields.items():
        if name not in doc:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                return f"field {name!r} is missing"
            continue
        wanted = _SIMPLE_TYPES.get(str(field.type))
        value = doc[name]
        if wanted is not None and (not isinstance(value, wanted) or (isinstance(value, bool) and wanted is int)):
            return f"field {name!r} is {value!r}, not of type {field.type}"
    return None
