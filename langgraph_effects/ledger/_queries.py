"""The ledger's read-only programs (and ``bind_thread``'s one upsert): get, list, events,
feed, stats. Statement names and row loading are ``_programs``'s.

Like every verb's program they take the dialect and the ledger's clock first (the
faces hand both to every verb, ``ledger._faces``); a read leaves the clock unused.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from langgraph_effects.core.model import EventKind, Operation, OperationEvent, OperationStatus
from langgraph_effects.errors import InvalidInput
from langgraph_effects.ledger._programs import (
    ADOPT,
    BIND_THREAD,
    EVENTS,
    FEED,
    FEED_PENDING,
    LIST,
    OPEN_COUNT,
    OPEN_OPERATIONS,
    PAUSE,
    STATS_COUNTS,
    STATS_EVIDENCE,
    get_row,
    load_event,
    load_operation,
    row_key,
)
from langgraph_effects.ledger.base import LedgerStats, OpenOperations
from langgraph_effects.ledger.engine import (
    Dialect,
    Program,
    Result,
    Rows,
    Statement,
    Statements,
)
from langgraph_effects.ledger.memory import coerce_status

S = OperationStatus


def bind_thread(
    dialect: Dialect, clock: Callable[[], datetime], /, workflow_id: str, tenant_id: str
) -> Program[str]:
    """Bind a thread to a tenant the first time; return the tenant it is bound to.

    One upsert that changes nothing when the thread is bound already, so two
    first runs racing under different tenants agree on one of them.
    """
    if not workflow_id or not tenant_id:
        raise InvalidInput("bind_thread needs a thread id and a tenant id")

    def steps() -> Statements[Result[str]]:
        rows = yield Statement(
            BIND_THREAD,
            {"workflow_id": workflow_id, "tenant_id": tenant_id, "at": dialect.dump_ts(clock())},
        )
        return Result(str(rows[0]["tenant_id"]))

    # Relaxed like a receipt: the binding is durable once the write-ahead record that
    # uses it (the next synchronous commit to the same log) is, before any provider call.
    return Program(steps(), writes=True, relaxed=True)


def adopt(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    tenant_id: str,
    operation_id: str,
    *,
    origin: str,
    expected: str | None,
) -> Program[Operation | None]:
    """The program of ``Ledger.adopt``: one conditional write of the ``origin`` column."""

    def steps() -> Statements[Result[Operation | None]]:
        rows = yield Statement(
            ADOPT,
            {**row_key(tenant_id, operation_id), "origin": origin, "expected": expected},
        )
        return Result(load_operation(dialect, rows[0]) if rows else None)

    return Program(steps(), writes=True)


def get(
    dialect: Dialect, clock: Callable[[], datetime], /, tenant_id: str, operation_id: str
) -> Program[Operation | None]:
    """The program of ``Ledger.get`` (see its contract in ``ledger.base``)."""

    def steps() -> Statements[Result[Operation | None]]:
        row = yield from get_row(tenant_id, operation_id)
        return Result(None if row is None else load_operation(dialect, row))

    return Program(steps(), writes=False)


def list_operations(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    *,
    tenant_id: str | None = None,
    status: OperationStatus | str | None = None,
    action: str | None = None,
    updated_before: datetime | None = None,
    limit: int = 100,
    id_prefix: str | None = None,
) -> Program[list[Operation]]:
    """The program of ``Ledger.list`` (see its contract in ``ledger.base``)."""
    wanted = coerce_status(status)
    if limit < 0:
        raise InvalidInput(f"limit must be >= 0, not {limit}")
    if updated_before is not None and updated_before.tzinfo is None:
        raise InvalidInput("updated_before must be timezone-aware")
    filters = {
        "tenant_id": tenant_id,
        "status": None if wanted is None else wanted.value,
        "action": action,
        "updated_before": dialect.dump_ts(updated_before),
        "id_prefix": id_prefix,
    }
    present = {k: v for k, v in filters.items() if v is not None}

    def steps() -> Statements[Result[list[Operation]]]:
        rows = yield Statement(LIST, {**present, "limit": limit}, where=tuple(present), adhoc=True)
        return Result([load_operation(dialect, r) for r in rows])

    return Program(steps(), writes=False)


def open_operations(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    tenant_id: str,
    *,
    action: str,
    target: str,
    limit: int = 10,
) -> Program[OpenOperations]:
    """The program of ``Ledger.open_operations`` (see its contract in ``ledger.base``)."""
    if limit < 0:
        raise InvalidInput(f"limit must be >= 0, not {limit}")
    where = {"tenant_id": tenant_id, "action": action, "target": target}

    def steps() -> Statements[Result[OpenOperations]]:
        rows = yield Statement(OPEN_OPERATIONS, {**where, "limit": limit})
        (counted,) = yield Statement(OPEN_COUNT, where)
        shown = [load_operation(dialect, r) for r in rows]
        # Two reads: a row may open or close between them; the count never says less
        # than what is shown.
        return Result(OpenOperations(operations=shown, total=max(int(counted["n"]), len(shown))))

    return Program(steps(), writes=False)


def events(
    dialect: Dialect, clock: Callable[[], datetime], /, tenant_id: str, operation_id: str
) -> Program[list[OperationEvent]]:
    """The program of ``Ledger.events`` (see its contract in ``ledger.base``)."""

    def steps() -> Statements[Result[list[OperationEvent]]]:
        rows = yield Statement(EVENTS, row_key(tenant_id, operation_id))
        return Result([load_event(dialect, r) for r in rows])

    return Program(steps(), writes=False)


_FEED_ROUNDS = 3
_FEED_WAITS = 20
"""``feed`` waits at most this many pauses (``PAUSE``: 10 ms) for writers in flight."""


def feed(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    *,
    after_id: int = 0,
    tenant_id: str | None = None,
    limit: int = 100,
) -> Program[list[OperationEvent]]:
    """Events with ``event_id > after_id`` in order, never skipping one that commits late.

    Where ids are handed out in commit order (SQLite's single writer, the
    memory ledger) the visible events are all there is. On PostgreSQL a writer
    draws its id from a sequence and commits later, so a smaller id can become
    visible after a larger one::

        writer A: nextval -> 5 ....................... COMMIT
        writer B:    nextval -> 6   COMMIT
        reader:                            sees 6, not 5 (a gap)

    A reader that moved its cursor to 6 would never see 5. So the feed returns
    events only below the first gap. A gap below the largest id a read saw can
    only be held by a transaction in progress at that read (it drew its id,
    after its xid, before the larger one committed), so once every transaction
    of that snapshot has ended, each such gap is final: committed (now visible)
    or rolled back (never will be). The feed waits briefly for that; if they
    are still running it returns what is safe (possibly nothing) and the next
    poll tries again: late, never skipped.
    """
    if limit < 0:
        raise InvalidInput(f"limit must be >= 0, not {limit}")
    present = {} if tenant_id is None else {"tenant_id": tenant_id}
    gaps = FEED_PENDING in dialect.statements

    def read(settled: int) -> Statements[Rows]:
        rows = yield Statement(
            FEED,
            {**present, "after_id": after_id, "settled": settled, "limit": limit},
            where=tuple(present),
            adhoc=True,
        )
        return rows

    def steps() -> Statements[Result[list[OperationEvent]]]:
        settled = after_id
        rows = yield from read(settled)
        if not gaps:
            return Result([load_event(dialect, r) for r in rows])
        for _ in range(_FEED_ROUNDS):
            page = [r for r in rows if r["event_id"] is not None]
            gap = rows[0]["first_gap"] if rows else None
            safe = [r for r in page if gap is None or r["event_id"] < gap]
            if gap is None or safe:
                return Result([load_event(dialect, r) for r in safe])
            # The first event is behind a gap: wait for the writers in flight at that read.
            for _ in range(_FEED_WAITS):
                (pending,) = yield Statement(FEED_PENDING, {"xids": rows[0]["in_progress"]})
                if not pending["n"]:
                    break
                yield Statement(PAUSE)
            else:
                return Result([])  # still in flight: late, never skipped
            settled = max(r["event_id"] for r in page)
            rows = yield from read(settled)
        return Result([])

    return Program(steps(), writes=False)


def stats(
    dialect: Dialect, *, tenant_id: str | None, stale_token_refusals: int
) -> Program[LedgerStats]:
    """The program of ``Ledger.stats``; ``stale_token_refusals`` is the face's own count."""
    present = {} if tenant_id is None else {"tenant_id": tenant_id}
    where = tuple(present)

    def steps() -> Statements[Result[LedgerStats]]:
        counted = yield Statement(STATS_COUNTS, present, where=where, adhoc=True)
        evidence = yield Statement(STATS_EVIDENCE, present, where=where, adhoc=True)
        counts = dict.fromkeys(OperationStatus, 0)
        oldest: dict[OperationStatus, datetime | None] = {}
        for row in counted:
            status = S(row["status"])
            counts[status] = int(row["n"])
            oldest[status] = dialect.load_ts(row["oldest"])
        reconciliation: dict[str, int] = {}
        operator_resolutions = 0
        for row in evidence:
            n = int(row["n"])
            if row["source"] not in ("operator", "receipt"):
                kind = str(row["evidence_kind"])
                reconciliation[kind] = reconciliation.get(kind, 0) + n
            if row["kind"] == EventKind.RESOLVE.value and row["source"] == "operator":
                operator_resolutions += n
        return Result(
            LedgerStats(
                counts=counts,
                oldest_unknown_at=oldest.get(S.UNKNOWN),
                oldest_dispatching_at=oldest.get(S.DISPATCHING),
                reconciliation=reconciliation,
                operator_resolutions=operator_resolutions,
                stale_token_refusals=stale_token_refusals,
            )
        )

    return Program(steps(), writes=False)
