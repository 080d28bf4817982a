"""Lease renewal while a dispatch runs: one daemon thread for sync calls, a task for async.

A dispatch holds its lease for ``lease_for``; the lease is renewed every third
of it. A renewal that proves the lease gone (taken over) stops renewing: the
dispatch's own fenced write will find out. Any other failure (a dropped
connection) is retried sooner (``core.plan.renewal_delay``).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from langgraph_effects.core.plan import renewal_delay
from langgraph_effects.errors import IllegalTransition, OperationNotFound, StaleFencingToken

__all__ = ["Renewer", "renew_until_cancelled", "renewer"]

_LEASE_LOST = (StaleFencingToken, IllegalTransition, OperationNotFound)
"""Renewal errors that prove the lease gone; any other failure is retried (``renewal_delay``)."""


_EARLY = 0.1
"""A wake-up also renews the jobs due within this fraction of their delay: leases due
close together share one wake-up, each renewed at most a tenth of its delay early."""
_Job = tuple[float, Callable[[], object], int]
"""A held job: its delay, its renewal, its failed renewals in a row."""
_SLACK = 16
"""Dropped places the queue may hold beyond the live jobs' count before ``drop`` compacts it."""


class Renewer:
    """One daemon thread renewing the leases of in-flight sync dispatches.

    Cheaper than a thread per dispatch: most dispatches end long before their
    first renewal is due, and then cost one heap push and one removal. The thread
    sleeps until its wake-up time and wakes for nothing else: a job held with an
    earlier deadline wakes it (``hold``); a dropped job's heap entry is discarded
    when it comes first, never waited for, or once dropped entries outnumber the
    live ones (``drop``). Its wake-up time is the earliest live job's deadline; with
    no live job, one tick later (the shortest delay held since it last looked) if
    jobs came and went meanwhile, else none (a hold wakes it).
    So its wake-ups follow the live leases, plus one a tick while dispatches come
    and go, never one per dispatch that ended.

    Bound: a live job is renewed between 0.9 and 1.0 of its delay after it was
    held or last renewed (its delay: a third of the lease, shorter while retrying
    a failed renewal, ``core.plan.renewal_delay``), give or take the renewals
    made before it in the same wake-up (one thread makes them one after another).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._jobs: dict[int, _Job] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._wake_at = math.inf
        """When the sleeping thread wakes: never later than a live job's deadline."""
        self._tick: float | None = None
        """The shortest delay held since the thread last chose its wake-up time."""
        self.wakeups = 0
        """How many times the thread woke up (its wake-up time, or a hold due sooner)."""

    def hold(self, fn: Callable[[], object], interval: float) -> int:
        with self._cond:
            job = next(self._ids)
            self._jobs[job] = (interval, fn, 0)
            deadline = time.monotonic() + interval
            heapq.heappush(self._heap, (deadline, job))
            self._tick = interval if self._tick is None else min(self._tick, interval)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="langgraph-effects-lease-renewer", daemon=True
                )
                self._thread.start()
            elif deadline < self._wake_at:
                # Only a deadline before the thread's wake-up changes its wait;
                # waking it for every dispatch would cost a context switch each.
                self._cond.notify()
            return job

    def drop(self, job: int) -> None:
        """Forget ``job`` (its dispatch ended): its function is released at once, and
        its place in the queue once the queue holds more dropped places than live
        ones (``queued``), so dispatches that end before their first renewal never
        pile up behind a long one."""
        with self._cond:
            self._jobs.pop(job, None)
            if len(self._heap) > 2 * len(self._jobs) + _SLACK:
                self._heap = [entry for entry in self._heap if entry[1] in self._jobs]
                heapq.heapify(self._heap)

    @property
    def queued(self) -> int:
        """The places in the queue, live or dropped: at most twice the live jobs, plus
        a few (``drop``)."""
        return len(self._heap)

    def _loop(self) -> None:
        while True:
            self._renew(self._next())

    def _next(self) -> list[tuple[int, _Job]]:
        """Wait for the jobs due (``_due``)."""
        with self._cond:
            while not (due := self._due()):
                self._cond.wait(self._sleep())
                self.wakeups += 1
            return due

    def _renew(self, due: list[tuple[int, _Job]]) -> None:
        """Renew the jobs due, and queue each still held again. A method of its own, so
        that no job's function stays referenced by the sleeping thread after it returns
        (a dropped job's renewal closes over its ledger)."""
        for job, (interval, fn, failures) in due:
            try:
                fn()
            except _LEASE_LOST:
                # Taken over: the dispatch's own fenced write will find out. Stop.
                self.drop(job)
                continue
            except Exception:
                failures += 1  # a dropped connection: try again soon (core.plan)
            else:
                failures = 0
            with self._cond:
                if job in self._jobs:
                    self._jobs[job] = (interval, fn, failures)
                    due_at = time.monotonic() + renewal_delay(failures, interval)
                    heapq.heappush(self._heap, (due_at, job))

    def _due(self) -> list[tuple[int, _Job]]:
        """Take the live jobs due now (or within ``_EARLY`` of their delay) off the heap,
        discarding the dropped ones that come first. Under ``_cond``."""
        now = time.monotonic()
        due = []
        while self._heap:
            deadline, job = self._heap[0]
            entry = self._jobs.get(job)
            if entry is not None:
                interval, _, failures = entry
                if deadline > now + _EARLY * renewal_delay(failures, interval):
                    break
                due.append((job, entry))
            heapq.heappop(self._heap)
        return due

    def _sleep(self) -> float | None:
        """Choose the wake-up time (see the class); how long to sleep. Under ``_cond``,
        after ``_due``: the heap's first entry, if any, is a live job."""
        now = time.monotonic()
        if self._heap:
            self._wake_at = self._heap[0][0]
        elif self._tick is not None:
            self._wake_at = now + self._tick
        else:
            self._wake_at = math.inf
        self._tick = None
        return None if self._wake_at == math.inf else self._wake_at - now


renewer = Renewer()


async def renew_until_cancelled(renew: Callable[[], Awaitable[Any]], interval: float) -> None:
    """Renew every ``interval`` seconds until cancelled or the lease is proven gone."""
    failures = 0
    while True:
        await asyncio.sleep(renewal_delay(failures, interval))
        try:
            await renew()
        except _LEASE_LOST:
            return  # taken over: the dispatch's own fenced write will say so
        except Exception:
            failures += 1  # a dropped connection: try again soon (core.plan)
        else:
            failures = 0
