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
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from langgraph_effects.core.plan import renewal_delay
from langgraph_effects.errors import IllegalTransition, OperationNotFound, StaleFencingToken

__all__ = ["Renewer", "renew_until_cancelled", "renewer"]

_LEASE_LOST = (StaleFencingToken, IllegalTransition, OperationNotFound)
"""Renewal errors that prove the lease gone; any other failure is retried (``renewal_delay``)."""


class Renewer:
    """One daemon thread renewing the leases of in-flight sync dispatches.

    Cheaper than a thread per dispatch: most dispatches end long before their
    first renewal is due, and then cost one heap push and one removal.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._jobs: dict[int, tuple[float, Callable[[], object], int]] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def hold(self, fn: Callable[[], object], interval: float) -> int:
        with self._cond:
            job = next(self._ids)
            self._jobs[job] = (interval, fn, 0)
            heapq.heappush(self._heap, (time.monotonic() + interval, job))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="langgraph-effects-lease-renewer", daemon=True
                )
                self._thread.start()
            elif self._heap[0][1] == job:
                # Only a new earliest deadline changes the sleeping thread's wait;
                # waking it for every dispatch would cost a context switch each.
                self._cond.notify()
            return job

    def drop(self, job: int) -> None:
        with self._cond:
            self._jobs.pop(job, None)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                _, job = heapq.heappop(self._heap)
                entry = self._jobs.get(job)
            if entry is None:
                continue
            interval, fn, failures = entry
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
                    due = time.monotonic() + renewal_delay(failures, interval)
                    heapq.heappush(self._heap, (due, job))


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
