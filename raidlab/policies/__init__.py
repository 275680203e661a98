"""TSS policies (Pallipadi & Gopinath §3.9): user-level programs that manage a TSS device's
stripes through its control interface only, and never inside the device.

    watermark     lower and upper watermarks per personality, migrations by temperature
    five_minute   transition intervals per pair of tiers (Gray's five-minute rule adapted)
    control       the interface a policy is written against: the array's control socket
                  (a live device), or the device itself in a virtual-time replay

A policy is a class with `async run(control)`, looping until cancelled; `POLICIES` maps the
names `raidlab tss policy` and scenarios use to the classes.
"""

from raidlab.policies.five_minute import FiveMinutePolicy
from raidlab.policies.watermark import WatermarkPolicy

POLICIES = {"watermark": WatermarkPolicy, "five-minute": FiveMinutePolicy}

__all__ = ["POLICIES", "FiveMinutePolicy", "WatermarkPolicy"]
