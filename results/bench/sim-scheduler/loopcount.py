"""Where a virtual-time replay's wall time goes: trio loop iterations per request, and the
bare cost of one loop iteration on the same clock (run_virtual, MockClock autojump)."""
import itertools, sys, time, json
import trio
from raidlab.engine.virtual import run_virtual
import raidlab.runners.virtual as rv
from raidlab.runners.virtual import SimSpec, replay_requests
from raidlab.traces.synth import PROFILES, synth

class Count(trio.abc.Instrument):
    def __init__(self): self.iterations = 0; self.spawned = 0; self.scheduled = 0
    def before_io_wait(self, timeout): self.iterations += 1
    def task_spawned(self, task): self.spawned += 1
    def task_scheduled(self, task): self.scheduled += 1

counts = {}
orig = rv._replay
async def counted(*a, **k):
    c = Count(); counts["c"] = c
    trio.lowlevel.add_instrument(c)
    try:
        return await orig(*a, **k)
    finally:
        trio.lowlevel.remove_instrument(c)
rv._replay = counted

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
rows = []
for arch in sys.argv[2:] or ["disk", "raid5", "dcd", "vcraid"]:
    rate = PROFILES["cello"].rate_per_s
    stream = list(itertools.islice(synth("cello", N / rate * 1.5 + 60, 1), N))
    t = time.perf_counter()
    rep = replay_requests(SimSpec(arch, "hp-c2200a"), stream)
    wall = time.perf_counter() - t
    c = counts["c"]
    rows.append({"arch": arch, "requests": N, "wall_s": round(wall, 3), "req_per_s": round(N / wall),
                 "loop_iterations_per_request": round(c.iterations / N, 2),
                 "tasks_spawned_per_request": round(c.spawned / N, 2),
                 "task_wakeups_per_request": round(c.scheduled / N, 2),
                 "wall_us_per_iteration": round(wall / c.iterations * 1e6, 1)})
    print(json.dumps(rows[-1]), flush=True)

# The floor: one task that sleeps to a new virtual instant M times (one loop iteration each),
# and K tasks woken at once per instant (the cost of a wake-up).
async def bare(m):
    for i in range(m):
        await trio.sleep_until(i * 1e-3 + 1e-3)
M = 200000
t = time.perf_counter(); run_virtual(bare, M); floor = time.perf_counter() - t
print(json.dumps({"bare_sleep_until_iterations": M, "wall_us_per_iteration": round(floor / M * 1e6, 2)}))
async def bare_event(m):
    ev = trio.Event()
    async def waiter():
        nonlocal ev
        for i in range(m):
            await ev.wait()
    async with trio.open_nursery() as n:
        n.start_soon(waiter)
        for i in range(m):
            await trio.sleep_until(i * 1e-3 + 1e-3)
            old, ev = ev, trio.Event()
            old.set()
t = time.perf_counter(); run_virtual(bare_event, M); floor2 = time.perf_counter() - t
print(json.dumps({"sleep_plus_event_handoff_iterations": M, "wall_us_per_iteration": round(floor2 / M * 1e6, 2)}))

# What a discrete-event kernel without trio's run loop costs for the same M sleeps: a heap of
# (time, sequence, coroutine) and coroutines that yield the instant they sleep until. Not the
# engine (it cannot run trio code); the headroom a virtual-time kernel of raidlab's own would have.
import heapq
import types


@types.coroutine
def des_sleep_until(t):
    yield t


def des_run(coros):
    heap, seq, now = [], 0, 0.0
    for c in coros:
        heap.append((0.0, seq, c)); seq += 1
    heapq.heapify(heap)
    while heap:
        now, _, c = heapq.heappop(heap)
        try:
            t = c.send(None)
        except StopIteration:
            continue
        heapq.heappush(heap, (t, seq, c)); seq += 1
    return now


async def des_bare(m):
    for i in range(m):
        await des_sleep_until(i * 1e-3 + 1e-3)

t = time.perf_counter(); des_run([des_bare(M)]); kernel = time.perf_counter() - t
print(json.dumps({"minimal_des_kernel_sleeps": M, "wall_us_per_sleep": round(kernel / M * 1e6, 2)}))
