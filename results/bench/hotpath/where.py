"""Where a kernel replay's time goes: cProfile of `raidlab sim`'s replay of the synthetic
cello trace on the HP C2200A, per architecture, own time grouped by package, and function
calls per request. (cProfile inflates call-heavy code; the shares are what it shows.)

Usage: python results/bench/hotpath/where.py REQUESTS ARCH...   (one JSON line per arch)
"""
import cProfile
import itertools
import json
import pstats
import sys

from raidlab.runners.virtual import SimSpec, replay_requests
from raidlab.traces.synth import PROFILES, synth

GROUPS = (("raidlab/sched/", "scheduler (raidlab.sched)"), ("raidlab/disks/", "disk model (raidlab.disks)"),
          ("raidlab/engine/", "engine (raidlab.engine)"), ("raidlab/runners/", "replay driver (raidlab.runners)"),
          ("raidlab/traces/", "trace generator (raidlab.traces)"))

n = int(sys.argv[1])
for arch in sys.argv[2:]:
    stream = itertools.islice(synth("cello", n / PROFILES["cello"].rate_per_s * 1.5 + 60, 1), n)
    profile = cProfile.Profile()
    profile.enable()
    report = replay_requests(SimSpec(arch, "hp-c2200a"), stream)
    profile.disable()
    stats = pstats.Stats(profile).stats
    own: dict[str, float] = {}
    calls = 0
    for (filename, _line, _name), (_cc, nc, tt, _ct, _callers) in stats.items():
        calls += nc
        group = next((label for key, label in GROUPS if key in filename), "other (stdlib, builtins, archs)")
        own[group] = own.get(group, 0.0) + tt
    total = sum(own.values())
    requests = report["trace"]["requests"]
    print(json.dumps({"arch": arch, "requests": requests, "calls_per_request": round(calls / requests),
                      "profiled_us_per_request": round(total / requests * 1e6, 1),
                      "share": {k: round(v / total, 3) for k, v in sorted(own.items(), key=lambda kv: -kv[1])}}),
          flush=True)
