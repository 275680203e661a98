"""What one drive's model costs without the scheduler: the same requests as `raidlab bench
sim --arch disk` (the synthetic cello trace, HP C2200A, seed 1), served by the same drive
model, with no coroutine, task or event per request.

On one drive with the replay's FIFO queue and no limit on requests in flight, a request
starts when it arrives or when the one before it ends, whichever is later, so the replay
is a loop: plan each request at max(its arrival, the previous end) and take its end. This
script runs that loop over a drive built exactly as the replay builds it, then replays the
same requests with `replay_requests` (raidlab's kernel, the engine's drive with its queue
and service task) and checks that both give the same mean read and write response times.
It prints one JSON line: requests per wall second of both, and the two means.

Usage: python results/bench/hotpath/fifo_loop.py REQUESTS
"""
import itertools
import json
import sys
import time

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.runners.virtual import SimSpec, build_virtual, replay_requests
from raidlab.traces.synth import PROFILES, synth


def requests(n: int) -> list:
    return list(itertools.islice(synth("cello", n / PROFILES["cello"].rate_per_s * 1.5 + 60, 1), n))


def fresh_mechanism(spec: SimSpec):
    """The drive of `spec`'s one-disk array as the replay builds it: its timing model."""
    async def main():
        async with sched.open_nursery() as nursery:
            built = await build_virtual(spec, nursery)
            [member] = built.members
            drive = getattr(getattr(member, "inner", member), "disk", getattr(member, "inner", member))
            nursery.cancel_scope.cancel()
            return drive.mechanism
    return sched.run_virtual(main)


def loop(mechanism, reqs: list) -> dict:
    """Each request planned at max(arrival, previous end), in arrival order (FIFO)."""
    plan_read, plan_write = mechanism.plan_read, mechanism.plan_write
    sums = {"read": [0.0, 0], "write": [0.0, 0]}
    first = reqs[0].time
    free = float("-inf")
    for r in reqs:
        offset = r.offset - r.offset % SECTOR
        end = r.offset + r.length
        end += -end % SECTOR
        arrival = r.time - first
        start = arrival if arrival > free else free
        plan = plan_read(start, offset, end - offset) if r.op == "read" else plan_write(start, offset, end - offset)
        free = plan.end
        s = sums[r.op]
        s[0] += plan.end - arrival
        s[1] += 1
    return {op: s[0] / s[1] * 1e3 for op, s in sums.items() if s[1]}


def main() -> None:
    n = int(sys.argv[1])
    spec = SimSpec("disk", "hp-c2200a")
    reqs = requests(n)
    mechanism = fresh_mechanism(spec)
    wall = time.perf_counter()
    means = loop(mechanism, reqs)
    loop_wall = time.perf_counter() - wall
    wall = time.perf_counter()
    report = replay_requests(spec, iter(reqs))
    replay_wall = time.perf_counter() - wall
    replayed = {op: report["response"][op]["mean_ms"] for op in ("read", "write")}
    print(json.dumps({"requests": n, "loop_requests_per_s": round(n / loop_wall),
                      "replay_requests_per_s": round(n / replay_wall),
                      "loop_mean_ms": means, "replay_mean_ms": replayed,
                      "same": all(abs(means[op] - replayed[op]) <= 1e-9 * max(1.0, replayed[op]) for op in means)}))


if __name__ == "__main__":
    main()
