"""TSS policies (Pallipadi & Gopinath §3.9): user-level programs that manage a TSS device's
stripes through its control interface only, and never inside the device.

    watermark     lower and upper watermarks per personality, migrations by temperature
    five_minute   transition intervals per pair of tiers (Gray's five-minute rule adapted)
A policy is written against the control interface of raidlab.engine.tss.control (TSSControl:
the device itself, in a virtual-time replay) and gets raidlab.service.tss_control's
SocketControl (the array's control socket) in a policy process: the same methods.

A policy is a class with `async run(control)`, looping until cancelled; `POLICIES` maps the
names `raidlab tss policy` and scenarios use to the classes.
"""

from raidlab.engine.tss.maptable import CRAID5, RAID1, RAID5
from raidlab.policies.five_minute import FiveMinutePolicy
from raidlab.policies.watermark import WatermarkPolicy

POLICIES = {"watermark": WatermarkPolicy, "five-minute": FiveMinutePolicy}


def make_policy(name: str, options: dict | None = None):
    """The policy `name` with `options` (strings or numbers, as a scenario or the CLI gives
    them): watermark raid1/raid5/craid5 as "LOWER:UPPER" percent, period, degrade_every,
    degrade_factor, max_moves; five-minute raid1_raid5, raid5_craid5 (seconds),
    degrade_factor, max_moves."""
    from raidlab.errors import UsageError

    options = dict(options or {})
    if name not in POLICIES:
        raise UsageError(f"unknown policy {name!r}", hint=f"use one of: {', '.join(POLICIES)}")

    def number(key: str, kind=float):
        value = options.pop(key)
        try:
            return kind(value)
        except (TypeError, ValueError):
            raise UsageError(f"policy option {key}={value!r} is not a number") from None

    kwargs = {}
    if name == "watermark":
        marks = {}
        for kind in (RAID1, RAID5, CRAID5):
            if kind in options:
                value = str(options.pop(kind))
                try:
                    lower, upper = (float(part) / 100 for part in value.split(":"))
                except ValueError:
                    raise UsageError(f"policy option {kind}={value!r} is not LOWER:UPPER percent") from None
                marks[kind] = (lower, upper)
        if marks:
            from raidlab.policies.watermark import DEFAULT_WATERMARKS

            kwargs["watermarks"] = {**DEFAULT_WATERMARKS, **marks}
        for key, kind in (("period", float), ("degrade_every", int), ("degrade_factor", float), ("max_moves", int)):
            if key in options:
                kwargs[key] = number(key, kind)
    else:
        for key, kind in (("raid1_raid5", float), ("raid5_craid5", float), ("degrade_factor", float),
                          ("max_moves", int)):
            if key in options:
                kwargs[key] = number(key, kind)
    if options:
        raise UsageError(f"policy {name} has no option {sorted(options)[0]!r}")
    return POLICIES[name](**kwargs)


__all__ = ["POLICIES", "FiveMinutePolicy", "WatermarkPolicy", "make_policy"]
