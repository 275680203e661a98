"""A virtual-time replay's whole report per architecture, as one JSON line, to compare two
commits: the first REQUESTS requests of the synthetic cello trace (seed 1) on the HP C2200A
under raidlab's kernel.

Usage: PYTHONPATH=WORKTREE python replay_same.py REQUESTS ARCH... > side.json
"""
import itertools
import json
import sys

from raidlab.runners.virtual import SimSpec, replay_requests
from raidlab.traces.synth import PROFILES, synth

n = int(sys.argv[1])
out = {}
for arch in sys.argv[2:]:
    stream = itertools.islice(synth("cello", n / PROFILES["cello"].rate_per_s * 1.5 + 60, 1), n)
    out[arch] = replay_requests(SimSpec(arch, "hp-c2200a", scheduler="kernel"), stream)
print(json.dumps(out, sort_keys=True, default=str))
