"""raidlab's discrete-event kernel: the scheduler of virtual time (replays, scenario runs,
the disk bench, the engine's tests).

Why a kernel of its own: on the virtual clock a replay is a discrete-event simulation, and
its speed is the cost of one pass of the scheduler per distinct instant. trio's run loop
pays 15-35 µs a pass (its I/O manager's poll, deadlines kept per cancel scope, the batch
shuffle, instruments); this heap of coroutines pays 1-3 µs an instant through raidlab.sched
(results/bench/sim-kernel/NOTES.md). trio stays the scheduler of the real clock. The engine does not see the difference: it asks
raidlab.sched for time and synchronisation, and raidlab.sched answers from this kernel while
one runs and from trio otherwise, so the engine is one code path for both clocks.

What it implements is the subset of trio's semantics the engine uses, with trio's rules:
* tasks are coroutines that yield to the kernel only through raidlab.sched's awaitables;
  `_park(abort)` suspends a task until `reschedule(task, value)`; a cancelled task's `abort()`
  decides whether it can leave (True) and then gets Cancelled;
* nurseries own their tasks; a child's error cancels its siblings and the nursery raises
  the errors of its body and children in a BaseExceptionGroup when every child has ended,
  as trio's strict exception groups do (cancellations it caused are dropped);
* cancel scopes (with deadlines) cancel every task inside them at its next checkpoint, and
  a scope swallows the Cancelled it caused; a shielded checkpoint ignores cancellation;
* Event, Lock (FIFO, ownership handed to the first waiter), Condition and Semaphore with
  trio's fairness, and every acquire is a checkpoint, as in trio. (No CapacityLimiter: the
  engine uses one only to bound trio's worker threads, which a kernel run has none of.)

Each task runs in its own copy of its spawner's context variables, as under trio (the
cluster's twin finds a request's node that way).

Determinism: tasks run in the order they became runnable, timers fire in (deadline, order of
arming) order, and every timer due at an instant fires before any task runs at it. There is
no randomness, so a replay gives the same bytes in any process; the seed of a replay still
seeds its data and trace.

Time is a float of virtual seconds that starts at 0 and moves only to the next timer's
deadline when nothing is runnable. A run with nothing runnable and no timer is stuck (trio
would wait forever on a virtual clock): the kernel raises RuntimeError instead.
"""

from __future__ import annotations

import contextvars
import heapq
import math
import types
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any


class Cancelled(BaseException):
    """A task's cancel scope was cancelled; raised at the task's next checkpoint."""


_CHECKPOINT = object()  # yielded: run again later in this instant, Cancelled if cancelled
_SHIELDED = object()  # yielded: run again later in this instant, whatever the cancel state


@types.coroutine
def _yield(what: Any) -> Any:
    return (yield what)


class Task:
    __slots__ = ("coro", "context", "name", "nursery", "scopes", "send", "throw", "abort", "parked",
                 "timer", "done", "result", "error", "on_finish")

    def __init__(self, coro: Coroutine, context: contextvars.Context, name: str, nursery: Nursery | None,
                 scopes: list[CancelScope]):
        self.coro = coro
        self.context = context
        self.name = name
        self.nursery = nursery
        self.scopes = scopes  # outermost first
        self.send: Any = None
        self.throw: BaseException | None = None
        self.abort: Callable[[], bool] | None = None
        self.parked = False
        self.timer: list | None = None
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.on_finish: Callable[[Task], None] | None = None

    def cancelled(self) -> bool:
        for scope in reversed(self.scopes):
            if scope.cancel_called:
                return True
            if scope.shield:
                return False
        return False

    def __repr__(self) -> str:
        return f"<kernel task {self.name}>"


class Kernel:
    def __init__(self) -> None:
        self.now = 0.0
        self.runq: deque[Task] = deque()
        self.timers: list[list] = []  # [deadline, order, task or scope, alive]
        self.order = 0
        self.current: Task | None = None
        self.stop_requested: list[int] = []  # signals received; the root scope is cancelled
        self.root_scope: CancelScope | None = None
        self.live: dict[Task, None] = {}  # tasks not yet finished
        self.cancels = 0  # scopes cancelled so far: while 0, no task can be cancelled

    # -- scheduling ----------------------------------------------------------------

    def reschedule(self, task: Task, value: Any = None, error: BaseException | None = None) -> None:
        task.parked = False
        task.abort = None
        task.send = value
        task.throw = error
        self.runq.append(task)

    def arm(self, deadline: float, what: Any) -> list:
        self.order += 1
        entry = [deadline, self.order, what, True]
        heapq.heappush(self.timers, entry)
        return entry

    def spawn(self, coro: Coroutine, nursery: Nursery | None, name: str | None = None) -> Task:
        scopes = list(nursery.scopes) if nursery is not None else [self.root_scope]
        # as trio: a task starts with a copy of its spawner's context variables
        context = self.current.context.copy() if self.current is not None else contextvars.copy_context()
        task = Task(coro, context, name or getattr(coro, "__qualname__", "task"), nursery, scopes)
        for scope in scopes:
            scope.tasks[task] = None
        if nursery is not None:
            nursery.children[task] = None
        self.live[task] = None
        self.runq.append(task)
        return task

    def park(self, task: Task, trap: Callable[[], bool]) -> None:
        task.parked = True
        task.abort = trap
        if self.cancels and task.cancelled():
            self.try_abort(task)

    def try_abort(self, task: Task) -> None:
        if task.parked and task.abort is not None and task.abort():
            if task.timer is not None:
                task.timer[3] = False
                task.timer = None
            self.reschedule(task, error=Cancelled())

    def _step(self, task: Task) -> None:
        self.current = task
        try:
            if task.throw is not None:
                error, task.throw = task.throw, None
                trap = task.context.run(task.coro.throw, error)
            else:
                value, task.send = task.send, None
                trap = task.context.run(task.coro.send, value)
        except StopIteration as stop:
            self._finish(task, stop.value, None)
        except BaseException as error:  # noqa: BLE001 - it belongs to the task's nursery
            self._finish(task, None, error)
        else:
            if trap is _CHECKPOINT:
                if self.cancels and task.cancelled():
                    self.reschedule(task, error=Cancelled())
                else:
                    self.runq.append(task)
            elif trap is _SHIELDED:
                self.runq.append(task)
            else:
                self.park(task, trap)
        finally:
            self.current = None

    def _finish(self, task: Task, result: Any, error: BaseException | None) -> None:
        task.done = True
        task.result = result
        task.error = error
        task.coro = None  # type: ignore[assignment]  # frees the frame
        del self.live[task]
        for scope in task.scopes:
            scope.tasks.pop(task, None)
        if task.on_finish is not None:
            task.on_finish(task)
        elif task.nursery is not None:
            task.nursery._child_done(task)

    def run(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """fn(*args) to its end on this kernel, which is the running one (`running()`) in
        this context, and in every task's, until it returns."""
        if _RUNNING.get() is not None:
            raise RuntimeError("a raidlab kernel already runs in this context")
        token = _RUNNING.set(self)
        try:
            return self._run(fn, *args)
        finally:
            _RUNNING.reset(token)

    def _run(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        self.root_scope = CancelScope()
        root = self.spawn(fn(*args), None, name="root")
        try:
            self._loop(root)
        except BaseException:
            # the loop itself failed (not a task: their errors go to their nurseries): close
            # what is left, quietly, rather than leave coroutines for the garbage collector
            for task in list(self.live):
                try:
                    task.coro.close()
                except BaseException:  # noqa: BLE001 - a half-run task cannot unwind cleanly
                    pass
            self.live.clear()
            raise
        if root.error is not None:
            raise root.error
        return root.result

    def _loop(self, root: Task) -> None:
        runq, timers, step = self.runq, self.timers, self._step
        while True:
            while runq:
                step(runq.popleft())
            if root.done:
                break
            if self.stop_requested:
                self.root_scope.cancel()
                if runq:
                    continue
            while timers and not timers[0][3]:
                heapq.heappop(timers)
            if not timers:
                raise RuntimeError("virtual time is stuck: no task can run and none waits for a time")
            deadline = timers[0][0]
            if deadline > self.now:
                self.now = deadline
            while timers and timers[0][0] <= deadline:
                entry = heapq.heappop(timers)
                if not entry[3]:
                    continue
                what = entry[2]
                if isinstance(what, Task):
                    what.timer = None
                    self.reschedule(what)
                else:
                    what.cancel()


# ------------------------------------------------------------------------- the facade's types
# The kernel that runs the calling code is a context variable that Kernel.run sets in the
# context it runs in, which every task's context copies: the types below find it there, and
# raidlab.sched asks `running()` which scheduler to answer from.

_RUNNING: contextvars.ContextVar[Kernel | None] = contextvars.ContextVar("raidlab_kernel", default=None)
running = _RUNNING.get  # the Kernel running the calling code, or None
_kernel = _RUNNING.get  # the same, where a kernel is known to run


async def checkpoint() -> None:
    await _yield(_CHECKPOINT)


async def cancel_shielded_checkpoint() -> None:
    await _yield(_SHIELDED)


async def checkpoint_if_cancelled() -> None:
    kernel = _kernel()
    if _cancelled(kernel, kernel.current):
        await _yield(_CHECKPOINT)


def _never_abort() -> bool:
    return False


async def _wait_in(queue: dict[Task, Any], task: Task, value: Any = None, *, abortable: bool = True) -> None:
    """Park `task` at the end of `queue` (FIFO) until someone takes it out and reschedules
    it; cancelled while there, it leaves the queue (unless not abortable)."""
    queue[task] = value

    def abort() -> bool:
        if task in queue:
            del queue[task]
            return True
        return False

    await _yield(abort if abortable else _never_abort)


def _cancelled(kernel: Kernel, task: Task) -> bool:
    """Is `task` cancelled? (A plain call: acquires ask it on every lock, and nothing is
    cancelled until the end of most runs.)"""
    return bool(kernel.cancels) and task.cancelled()


def _abort_timer() -> bool:
    return True


async def sleep_until(deadline: float) -> None:
    kernel = _kernel()
    if deadline <= kernel.now:
        await _yield(_CHECKPOINT)
        return
    task = kernel.current
    task.timer = kernel.arm(deadline, task)
    await _yield(_abort_timer)


async def sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    await sleep_until(_kernel().now + seconds)


class CancelScope:
    __slots__ = ("cancel_called", "cancelled_caught", "shield", "tasks", "deadline", "_timer", "_task")

    def __init__(self, *, deadline: float = math.inf, shield: bool = False) -> None:
        self.cancel_called = False
        self.cancelled_caught = False  # this scope's exit swallowed the Cancelled it caused
        self.shield = shield
        self.tasks: dict[Task, None] = {}
        self.deadline = deadline
        self._timer: list | None = None
        self._task: Task | None = None

    def cancel(self) -> None:
        if self.cancel_called:
            return
        self.cancel_called = True
        if self._timer is not None:
            self._timer[3] = False
            self._timer = None
        kernel = _kernel()
        kernel.cancels += 1
        for task in list(self.tasks):
            kernel.try_abort(task)

    def _enter(self, task: Task) -> None:
        self._task = task
        task.scopes.append(self)
        self.tasks[task] = None
        if self.deadline != math.inf:
            kernel = _kernel()
            if self.deadline <= kernel.now:
                self.cancel_called = True
                kernel.cancels += 1
            else:
                self._timer = kernel.arm(self.deadline, self)

    def _exit(self, error: BaseException | None) -> bool:
        task = self._task
        if task.scopes and task.scopes[-1] is self:
            task.scopes.pop()
        else:
            task.scopes.remove(self)
        self.tasks.pop(task, None)
        if self._timer is not None:
            self._timer[3] = False
            self._timer = None
        self.cancelled_caught = isinstance(error, Cancelled) and self.cancel_called
        return self.cancelled_caught

    def __enter__(self) -> CancelScope:
        self._enter(_kernel().current)
        return self

    def __exit__(self, etype, error, tb) -> bool:
        return self._exit(error)


def move_on_after(seconds: float) -> CancelScope:
    return CancelScope(deadline=_kernel().now + seconds)


class _TaskStatus:
    __slots__ = ("value", "started_called", "waiter")

    def __init__(self) -> None:
        self.value: Any = None
        self.started_called = False
        self.waiter: Task | None = None

    def started(self, value: Any = None) -> None:
        if self.started_called:
            raise RuntimeError("called 'started' twice on the same task status")
        self.started_called = True
        self.value = value
        if self.waiter is not None:
            waiter, self.waiter = self.waiter, None
            _kernel().reschedule(waiter)


class Nursery:
    __slots__ = ("cancel_scope", "scopes", "children", "errors", "parent", "_waiting", "_closed")

    def __init__(self, parent: Task) -> None:
        self.cancel_scope = CancelScope()
        self.parent = parent
        self.children: dict[Task, None] = {}
        self.errors: list[BaseException] = []
        self._waiting = False
        self._closed = False
        self.scopes: list[CancelScope] = []

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: Any = None) -> None:
        if self._closed:
            raise RuntimeError("Nursery is closed to new arrivals")
        _kernel().spawn(fn(*args), self, name)

    async def start(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: Any = None) -> Any:
        if self._closed:
            raise RuntimeError("Nursery is closed to new arrivals")
        kernel = _kernel()
        status = _TaskStatus()
        task = kernel.spawn(fn(*args, task_status=status), self, name)
        early: list[BaseException | None] = []

        def finished(task: Task) -> None:  # until started: its end is the caller's, not the nursery's
            if status.started_called:
                self._child_done(task)
                return
            self.children.pop(task, None)
            early.append(task.error if task.error is not None
                         else RuntimeError(f"{task.name} returned without calling started()"))
            if status.waiter is not None:
                waiter, status.waiter = status.waiter, None
                kernel.reschedule(waiter)
            self._wake_parent()

        task.on_finish = finished
        if not status.started_called and not early:
            status.waiter = kernel.current
            await _yield(_never_abort)
        if early:
            raise early[0]
        return status.value

    def _child_done(self, task: Task) -> None:
        self.children.pop(task, None)
        if task.error is not None:
            self.errors.append(task.error)
            if not isinstance(task.error, Cancelled):
                self.cancel_scope.cancel()
        self._wake_parent()

    def _wake_parent(self) -> None:
        if self._waiting and not self.children:
            self._waiting = False
            _kernel().reschedule(self.parent)


class _NurseryManager:
    __slots__ = ("nursery",)

    async def __aenter__(self) -> Nursery:
        task = _kernel().current
        nursery = self.nursery = Nursery(task)
        nursery.cancel_scope._enter(task)
        nursery.scopes = list(task.scopes)
        return nursery

    async def __aexit__(self, etype, error, tb) -> bool:
        nursery = self.nursery
        if error is not None:
            nursery.errors.append(error)
            if not isinstance(error, Cancelled):
                nursery.cancel_scope.cancel()
        if nursery.children:
            nursery._waiting = True
            await _yield(_never_abort)
        nursery._closed = True
        nursery.cancel_scope._exit(None)
        caught = nursery.cancel_scope.cancel_called  # the Cancelled it caused ends here
        errors = [e for e in nursery.errors if not (caught and isinstance(e, Cancelled))]
        if not errors:
            return True
        real = [e for e in errors if not isinstance(e, Cancelled)]
        if not real:
            if error is errors[0]:
                return False
            raise errors[0]
        raise BaseExceptionGroup("exceptions from a raidlab kernel nursery", real)


def open_nursery() -> _NurseryManager:
    return _NurseryManager()


class Event:
    __slots__ = ("_flag", "_waiters")

    def __init__(self) -> None:
        self._flag = False
        self._waiters: dict[Task, None] = {}

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        if self._flag:
            return
        self._flag = True
        if self._waiters:
            kernel = _kernel()
            for task in self._waiters:
                kernel.reschedule(task)
            self._waiters.clear()

    async def wait(self) -> None:
        if self._flag:
            await _yield(_CHECKPOINT)
            return
        await _wait_in(self._waiters, _kernel().current)


class Lock:
    __slots__ = ("owner", "waiters")

    def __init__(self) -> None:
        self.owner: Task | None = None
        self.waiters: dict[Task, None] = {}

    def locked(self) -> bool:
        return self.owner is not None

    async def acquire(self) -> None:
        kernel = _kernel()
        task = kernel.current
        if _cancelled(kernel, task):
            await _yield(_CHECKPOINT)
        if self.owner is None and not self.waiters:
            self.owner = task
            await _yield(_SHIELDED)
            return
        if self.owner is task:
            raise RuntimeError("attempt to re-acquire an already held Lock")
        await _wait_in(self.waiters, task)


    async def _acquire_shielded(self, task: Task) -> None:
        if self.owner is None and not self.waiters:
            self.owner = task
            return
        await _wait_in(self.waiters, task, abortable=False)

    def acquire_nowait(self) -> None:
        task = _kernel().current
        if self.owner is not None or self.waiters:
            raise WouldBlock
        self.owner = task

    def release(self) -> None:
        kernel = _kernel()
        if self.owner is not kernel.current:
            raise RuntimeError("can't release a Lock you don't own")
        self._hand_over(kernel)

    def _hand_over(self, kernel: Kernel) -> None:
        if self.waiters:
            task = next(iter(self.waiters))
            del self.waiters[task]
            self.owner = task
            kernel.reschedule(task)
        else:
            self.owner = None

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: Any) -> None:
        self.release()


class WouldBlock(Exception):
    pass


class Condition:
    __slots__ = ("_lock", "_waiters")

    def __init__(self, lock: Lock | None = None) -> None:
        self._lock = lock if lock is not None else Lock()
        self._waiters: dict[Task, None] = {}

    def locked(self) -> bool:
        return self._lock.locked()

    async def acquire(self) -> None:
        await self._lock.acquire()

    def release(self) -> None:
        self._lock.release()

    async def __aenter__(self) -> None:
        await self._lock.acquire()

    async def __aexit__(self, *exc: Any) -> None:
        self._lock.release()

    async def wait(self) -> None:
        kernel = _kernel()
        task = kernel.current
        lock = self._lock
        if lock.owner is not task:
            raise RuntimeError("must hold the lock to wait")
        lock._hand_over(kernel)
        try:
            await _wait_in(self._waiters, task)  # notify moves it to the lock's queue: it wakes owning the lock
        except Cancelled:
            await lock._acquire_shielded(task)
            raise

    def notify(self, n: int = 1) -> None:
        kernel = _kernel()
        if self._lock.owner is not kernel.current:
            raise RuntimeError("must hold the lock to notify")
        for _ in range(min(n, len(self._waiters))):
            task = next(iter(self._waiters))
            del self._waiters[task]
            self._lock.waiters[task] = None
            task.abort = _never_abort  # now waits for the lock, without leaving

    def notify_all(self) -> None:
        self.notify(len(self._waiters))


class Semaphore:
    __slots__ = ("_value", "_waiters")

    def __init__(self, initial_value: int) -> None:
        if initial_value < 0:
            raise ValueError("initial value must be >= 0")
        self._value = initial_value
        self._waiters: dict[Task, None] = {}

    @property
    def value(self) -> int:
        return self._value

    async def acquire(self) -> None:
        kernel = _kernel()
        task = kernel.current
        if _cancelled(kernel, task):
            await _yield(_CHECKPOINT)
        if self._value > 0:
            self._value -= 1
            await _yield(_SHIELDED)
            return
        await _wait_in(self._waiters, task)  # release hands its unit straight to the first waiter

    def release(self) -> None:
        if self._waiters:
            task = next(iter(self._waiters))
            del self._waiters[task]
            _kernel().reschedule(task)
            return
        self._value += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: Any) -> None:
        self.release()
