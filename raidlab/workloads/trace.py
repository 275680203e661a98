"""The workload of virtual time: replaying a block trace (kind = "sim" scenarios).

A sim case replays a synthetic trace (`profile` and `duration`, raidlab.traces.synth) or a
trace file (`trace`, in a `format` of raidlab.traces.formats) on the architecture in virtual
time (raidlab.runners.sim). This module declares and checks the case parameters, so a
scenario is refused with one line before anything runs:

    profile      synthetic profile (hplajw, snake, cello, oltp)        | or trace + format
    duration     trace length: seconds or 90s/15m/2h/3d
    trace_seed   seed of the synthetic trace (default 1)
    seed         seed of the written data's content (compressibility; default 0)
    compact      divide inter-arrival times (default 1)
"""

from __future__ import annotations

from typing import Any

from raidlab.errors import UsageError
from raidlab.traces.formats import _parser_for
from raidlab.traces.synth import profile
from raidlab.units import parse_duration, parse_size

CASE_PARAMS = ("profile", "duration", "trace_seed", "seed", "compact", "trace", "format", "compressibility",
               "outstanding", "device_size")
WORKLOAD = "trace"


def validate_params(params: dict[str, Any]) -> None:
    """UsageError naming the first bad key (for a scenario loader)."""
    unknown = sorted(set(params) - set(CASE_PARAMS))
    if unknown:
        raise UsageError(f"unknown sim parameter {unknown[0]!r}", hint=f"known: {', '.join(CASE_PARAMS)}")
    if ("profile" in params) == ("trace" in params):
        raise UsageError("a sim case needs either profile (a synthetic trace) or trace (a file), not both",
                         hint="e.g. params = {profile = \"hplajw\", duration = \"1d\"}")
    if "profile" in params:
        profile(str(params["profile"]))
        if "duration" not in params:
            raise UsageError("a synthetic trace needs a duration", hint="e.g. duration = \"1d\"")
        duration_seconds(params["duration"])
    else:
        _parser_for(str(params.get("format", "raidlab")))
    if "device_size" in params:
        if "profile" not in params:
            raise UsageError("device_size is the address space of a synthetic trace", hint="use it with profile")
        parse_size(str(params["device_size"]))
    if "compact" in params and not float(params["compact"]) > 0:
        raise UsageError(f"compact must be positive, not {params['compact']}")
    if "outstanding" in params and not int(params["outstanding"]) >= 1:
        raise UsageError(f"outstanding must be at least 1, not {params['outstanding']}")
    if "compressibility" in params and not 0.0 <= float(params["compressibility"]) <= 1.0:
        raise UsageError(f"compressibility must be within 0..1, not {params['compressibility']}")


def duration_seconds(value: Any) -> float:
    """A duration in seconds: a positive number, or text such as 90s, 15m, 2h, 3d."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 \
        else parse_duration(str(value))
