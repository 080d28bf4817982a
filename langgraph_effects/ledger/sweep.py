"""The stuck-operation sweep: ``dispatching`` operations nobody is going to settle.

An operation is ``dispatching`` while a worker holds its lease and calls the
provider. If that worker dies, the *next run of its thread* takes it over
(marks it ``unknown``, reconciles, asks a person). When no run comes — the
thread was abandoned, or the user asked again in a new thread — the operation
stays ``dispatching`` forever, and nothing shows that the provider may have
acted. The sweep lists them, for an operator (``langgraph-effects stuck``) or a
periodic job:

* **owner provably dead**: the lease owner ran on *this* host and its process
  is gone (or its pid now belongs to another process). Run the sweep on the
  workers' host to see these at once; from elsewhere they show when the lease
  expires.
* **lease expired**: no receipt before the lease's end (lease renewal stops
  when the worker stops). The owner may still be alive and slow: an expired
  lease says the outcome is unknown, never that the call failed.

The sweep only reads. Settling what it finds goes through the usual paths:
resume the thread, or mark it unknown and resolve it (the CLI's
``stuck --mark-unknown``, then ``resolve`` / ``retry``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from langgraph_effects._owners import holder_dead
from langgraph_effects.core.model import Operation, OperationStatus, utcnow
from langgraph_effects.ledger._defaults import DEFAULT_SCAN
from langgraph_effects.ledger.base import AsyncLedger, Ledger

__all__ = ["DEFAULT_SCAN", "StuckOperation", "Sweep", "afind_stuck", "find_stuck"]


@dataclass(frozen=True)
class StuckOperation:
    """One ``dispatching`` operation that its owner will not settle, and why."""

    operation: Operation
    owner_dead: bool | None
    """True: the owner's process is provably gone; False: it provably still runs (this
    host, same process: its lease expired, yet it may still settle the call); None:
    this host cannot tell (the owner ran on another host, or is unreadable)."""
    why: str
    """For a person: ``the lease owner's process is gone`` or ``the lease expired ...``."""


@dataclass(frozen=True)
class Sweep:
    """What one sweep found among the ``dispatching`` operations it examined."""

    stuck: list[StuckOperation]
    scanned: int
    """How many ``dispatching`` operations were examined (oldest first)."""
    complete: bool
    """False when there were more than ``scan``: sweep again with a larger ``scan``."""


def find_stuck(
    ledger: Ledger,
    *,
    tenant_id: str | None = None,
    now: datetime | None = None,
    scan: int = DEFAULT_SCAN,
) -> Sweep:
    """List the ``dispatching`` operations whose owner is provably dead or whose lease expired.

    Args:
        ledger: any sync ledger.
        tenant_id: only this tenant's operations (default: every tenant).
        now: the time leases are judged at (default: now).
        scan: examine at most this many ``dispatching`` operations, oldest first.
    """
    rows = ledger.list(tenant_id=tenant_id, status=OperationStatus.DISPATCHING, limit=scan + 1)
    return _judge(rows, now or utcnow(), scan)


async def afind_stuck(
    ledger: AsyncLedger,
    *,
    tenant_id: str | None = None,
    now: datetime | None = None,
    scan: int = DEFAULT_SCAN,
) -> Sweep:
    """The async twin of ``find_stuck`` (the owner checks read ``/proc`` in a worker thread)."""
    rows = await ledger.list(
        tenant_id=tenant_id, status=OperationStatus.DISPATCHING, limit=scan + 1
    )
    return await asyncio.to_thread(_judge, rows, now or utcnow(), scan)


def _judge(rows: Sequence[Operation], now: datetime, scan: int) -> Sweep:
    """Keep the rows no live owner holds; the first ``scan`` only (one more says: not all)."""
    stuck: list[StuckOperation] = []
    for op in rows[:scan]:
        if op.status is not OperationStatus.DISPATCHING:
            continue
        dead = holder_dead(op)
        if not op.lease_alive(now):
            end = op.lease_expires_at
            expired = end.isoformat(timespec="seconds") if end else "-"
            why = f"the lease expired at {expired} without a receipt"
            if dead:
                why += "; the lease owner's process is gone"
            stuck.append(StuckOperation(op, owner_dead=dead, why=why))
        elif dead:
            why = "the lease owner's process is gone"
            stuck.append(StuckOperation(op, owner_dead=True, why=why))
    return Sweep(stuck=stuck, scanned=min(len(rows), scan), complete=len(rows) <= scan)
