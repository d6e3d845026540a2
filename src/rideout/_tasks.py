"""Long-lived background tasks, supervised: a death is logged, counted and restarted.

Every long-running process (an app server, the control plane, the name server, the
canary) runs a few tasks beside the requests it serves: the hub that pushes a zone's
updates, the followers of the epoch and the revocation list, the control loop, the
lease's renewal, the dashboard's feed. A task that ends by an exception nobody expected
used to end for good, silently, while the process went on answering ``/health`` with
200 (issue #29: the hub died of an ``OverflowError`` and the zone never pushed another
update). Here every such task is a :class:`Supervised` of its process's
:class:`TaskSupervisor`:

- its death is **logged** with the exception and its traceback, and **counted**
  (``rideout_task_deaths_total{task}``; ``rideout_task_up{task}`` is 0 while it is down);
- it is **restarted** after a delay from :class:`RestartPolicy` (:mod:`rideout.backoff`'s
  ``NoJitter``, 0.1 s doubling to a 5 s cap, never overflowing however many deaths), the
  count of deaths in a row starting over once a run has lasted ``steady`` seconds;
- while a **critical** task is down (from its death until its restart)
  :meth:`TaskSupervisor.down` names it, and the process's ``/health`` answers 503. A task
  that is not critical (an observer, a feed only the dashboard reads) shows in
  :meth:`TaskSupervisor.status` without turning ``/health`` red.

A task that returns is done (a drain that finished); a long-lived one never returns.
A cancellation is a stop, never a death. :class:`Restarts` is the pure part: how long to
wait after a death, from how long the run lasted (tested without a clock).

Attempts are unbounded on purpose, like the hub's retries: a zone must outlive an outage
of any length. Each restart waits its (capped) delay, so a task that dies at once costs
one restart per 5 s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from rideout._validate import seconds
from rideout.backoff import DelayPolicy, NoJitter

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["RESTART", "RestartPolicy", "Restarts", "Supervised", "TaskSupervisor"]

log = logging.getLogger("rideout.tasks")

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

STOP_TIMEOUT: Final = 5.0
"""How long :meth:`Supervised.stop` waits for a cancelled task before moving on."""


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """How a supervised task is restarted: ``backoff.delay(n)`` seconds after its
    ``n + 1``-th death in a row; a run of ``steady`` seconds or more resets the count."""

    backoff: DelayPolicy = field(default_factory=lambda: NoJitter(base=0.1, cap=5.0))
    steady: float = 30.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "steady", seconds("steady", self.steady))


RESTART: Final = RestartPolicy()
"""The default: 0.1 s, 0.2 s, 0.4 s, ... 5 s between restarts; 30 s of running resets."""


@dataclass(slots=True)
class Restarts:
    """A task's deaths, and the delay before each restart (pure: no clock, no I/O)."""

    policy: RestartPolicy = RESTART
    in_a_row: int = 0
    total: int = 0

    def died(self, ran_for: float) -> float:
        """A death after a run of `ran_for` seconds: the seconds to wait before restarting."""
        self.in_a_row = 1 if ran_for >= self.policy.steady else self.in_a_row + 1
        self.total += 1
        return self.policy.backoff.delay(self.in_a_row - 1)


class _Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        # Imported here: the local supervisor imports realtime.zone, which must not load
        # the server stack (prometheus_client among it) for the supervisor.
        from prometheus_client import Counter, Gauge

        self.deaths = Counter(
            "rideout_task_deaths", "Background tasks that died (and were restarted), by task.",
            ["task"], registry=registry,
        )  # fmt: skip
        self.up = Gauge(
            "rideout_task_up", "1 while a background task runs, 0 from its death to its restart.",
            ["task"], registry=registry,
        )  # fmt: skip


class Supervised:
    """One named task of a :class:`TaskSupervisor`: ``run()`` awaited in a task of its
    own, again after each death, until it returns or :meth:`stop` is called.

    ``run()`` is awaited inside :attr:`task` itself, so cancelling that task cancels
    the run, and the task ends when a run returns.
    """

    __slots__ = ("_owner", "_run", "critical", "last_error", "name", "restarts", "task", "up")

    def __init__(
        self,
        owner: TaskSupervisor,
        name: str,
        run: Callable[[], Coroutine[Any, Any, object]],
        *,
        critical: bool,
        policy: RestartPolicy,
    ) -> None:
        self._owner = owner
        self._run = run
        self.name = name
        self.critical = critical
        self.restarts = Restarts(policy)
        self.up = True
        self.last_error: str | None = None
        self.task: asyncio.Task[None] = asyncio.create_task(self._keep(), name=f"rideout-{name}")
        # Returned, stopped or cancelled: no longer the supervisor's.
        self.task.add_done_callback(lambda _: owner._forget(self))

    @property
    def down(self) -> bool:
        """Dead and waiting for its restart."""
        return not self.up

    def done(self) -> bool:
        """The run returned, or the task was stopped."""
        return self.task.done()

    def cancel(self) -> None:
        """Cancel the task (and the run under way) without waiting."""
        self.task.cancel()

    async def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Cancel the task and wait for it, at most `timeout` seconds."""
        self.task.cancel()
        finished, _ = await asyncio.wait({self.task}, timeout=timeout)
        if not finished:
            log.error("task %s did not stop within %g s of being cancelled", self.name, timeout)
        self._owner._forget(self)

    async def _keep(self) -> None:
        owner = self._owner
        while True:  # bounded in time per round by the policy's capped delay
            started = owner.clock()
            try:
                await self._run()
            except Exception as exc:
                delay = self.restarts.died(owner.clock() - started)
                self.up = False
                self.last_error = f"{type(exc).__name__}: {exc}"
                owner._died(self, delay, exc)
                await owner.sleep(delay)
                self.up = True
                owner._restarted(self)
                continue
            return

    def status(self) -> dict[str, Any]:
        """Whether it runs, whether it counts for ``/health``, its deaths, its last error."""
        return {
            "up": self.up,
            "critical": self.critical,
            "deaths": self.restarts.total,
            "last_error": self.last_error,
        }


class TaskSupervisor:
    """A process's supervised tasks, by name (see the module's doc).

    `registry` receives the two metrics, in the process's own registry (None: no
    metrics). `clock` and `sleep` are injectable: a test drives deaths and restarts
    without waiting.
    """

    def __init__(
        self,
        *,
        policy: RestartPolicy = RESTART,
        registry: CollectorRegistry | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.policy = policy
        self.clock = clock
        self.sleep = sleep
        self._tasks: dict[str, Supervised] = {}
        self._metrics = _Metrics(registry) if registry is not None else None

    def spawn(
        self,
        name: str,
        run: Callable[[], Coroutine[Any, Any, object]],
        *,
        critical: bool = True,
        policy: RestartPolicy | None = None,
    ) -> Supervised:
        """Start ``run()`` under supervision as `name` (one live task per name: a task of
        that name still running, and not being cancelled, is a ValueError). Must be
        called from a running loop."""
        current = self._tasks.get(name)
        if current is not None and not current.done() and not current.task.cancelling():
            raise ValueError(f"a task named {name!r} is already running")
        task = Supervised(self, name, run, critical=critical, policy=policy or self.policy)
        self._tasks[name] = task
        if self._metrics is not None:
            self._metrics.up.labels(name).set(1)
        return task

    def down(self) -> tuple[str, ...]:
        """The critical tasks that are down now (what turns ``/health`` red), by name."""
        return tuple(sorted(n for n, t in self._tasks.items() if t.critical and t.down))

    def status(self) -> dict[str, dict[str, Any]]:
        """Every task's :meth:`Supervised.status`, by name."""
        return {name: task.status() for name, task in sorted(self._tasks.items())}

    async def stop(self) -> None:
        """Stop every task (the last started first)."""
        for task in reversed(list(self._tasks.values())):
            await task.stop()

    def _forget(self, task: Supervised) -> None:
        if self._tasks.get(task.name) is task:
            del self._tasks[task.name]

    def _died(self, task: Supervised, delay: float, exc: BaseException) -> None:
        log.error(
            "background task %s died (death %d, %d in a row); restarting in %g s%s",
            task.name, task.restarts.total, task.restarts.in_a_row, delay,
            "; /health is red until then" if task.critical else "",
            exc_info=exc,
        )  # fmt: skip
        if self._metrics is not None:
            self._metrics.deaths.labels(task.name).inc()
            self._metrics.up.labels(task.name).set(0)

    def _restarted(self, task: Supervised) -> None:
        log.info("background task %s restarted", task.name)
        if self._metrics is not None:
            self._metrics.up.labels(task.name).set(1)
