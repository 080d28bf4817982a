"""The journal tables' programs for the statement engine (``ledger.engine``); the SQL of
each backend is in ``ledger/sqlite/_journal.py`` and ``ledger/postgres/_journal.py``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from langgraph_effects.errors import InvalidInput, StaleVersion
from langgraph_effects.journal.machine import RunMachine
from langgraph_effects.journal.model import RunEvent, RunSnapshot
from langgraph_effects.ledger.engine import (
    Dialect,
    Program,
    Result,
    Statement,
    Statements,
    single,
)


def _dump(model: BaseModel) -> str:
    return model.model_dump_json()


def _replay(row: dict[str, Any], event: RunEvent, run_id: str) -> RunSnapshot:
    """A repeated append: the same content returns the first result; other content is refused."""
    if RunEvent.model_validate_json(row["event"]) != event:
        raise InvalidInput(
            f"run {run_id!r}: event id {event.event_id!r} was already appended with other content"
        )
    return RunSnapshot.model_validate_json(row["snapshot"])


def _write_event(dialect: Dialect, snap: RunSnapshot, event: RunEvent, now: datetime) -> Statement:
    return Statement(
        "insert_event",
        {
            "run_id": snap.run_id,
            "version": snap.version,
            "event_id": event.event_id,
            "type": event.type,
            "state": snap.state,
            "event": _dump(event),
            "snapshot": _dump(snap),
            "now": dialect.dump_ts(now),
        },
    )


def _start(
    dialect: Dialect,
    machine: RunMachine,
    run_id: str,
    start: RunEvent,
    snap: RunSnapshot,
    now: datetime,
) -> Program[RunSnapshot]:
    def statements() -> Statements[Result[RunSnapshot]]:
        rows = yield Statement(
            "insert_run",
            {
                "run_id": run_id,
                "machine": machine.name,
                "state": snap.state,
                "version": snap.version,
                "snapshot": _dump(snap),
                "now": dialect.dump_ts(now),
            },
        )
        if not rows:  # already started: the same start returns the run as it is now
            existing = yield Statement("get_event", {"run_id": run_id, "event_id": start.event_id})
            if not existing:
                raise InvalidInput(f"run {run_id!r} already exists (started by another event)")
            first = _start_args(
                RunEvent.model_validate_json(existing[0]["event"]),
                RunSnapshot.model_validate_json(existing[0]["snapshot"]),
            )
            if first != _start_args(start, snap):
                raise InvalidInput(
                    f"run {run_id!r} was already started with {first}; "
                    f"this start asks for {_start_args(start, snap)}"
                )
            current = yield Statement("get_run", {"run_id": run_id})
            return Result(RunSnapshot.model_validate_json(current[0]["snapshot"]))
        yield _write_event(dialect, snap, start, now)
        return Result(snap)

    return Program(statements(), writes=True, atomic=True)


def _start_args(start: RunEvent, snap: RunSnapshot) -> str:
    """What a start asked for, in words: equal for a repeated start, whenever it runs.

    The lease is compared as the duration asked for (expiry minus start time),
    not as the expiry, which moves with the clock of each call.
    """
    lease_for = None if start.lease_expires_at is None else start.lease_expires_at - snap.updated_at
    data = ", ".join(f"{k}={v!r}" for k, v in sorted(start.data.items()))
    return f"machine={snap.machine!r}, {data}, lease_for={lease_for}"


def _append(
    dialect: Dialect,
    machine: RunMachine,
    run_id: str,
    expected: int,
    event: RunEvent,
    now: datetime,
) -> Program[RunSnapshot]:
    def statements() -> Statements[Result[RunSnapshot]]:
        rows = yield Statement("get_event", {"run_id": run_id, "event_id": event.event_id})
        if rows:
            return Result(_replay(rows[0], event, run_id))
        rows = yield Statement("get_run", {"run_id": run_id})
        if not rows:
            raise InvalidInput(f"no run {run_id!r}: start it first")
        current = RunSnapshot.model_validate_json(rows[0]["snapshot"])
        if current.version != expected:
            raise StaleVersion(run_id, expected=expected, current=current.version)
        new = machine.apply(current, event, now)
        rows = yield Statement(
            "update_run",
            {
                "run_id": run_id,
                "expected": expected,
                "state": new.state,
                "version": new.version,
                "snapshot": _dump(new),
                "now": dialect.dump_ts(now),
            },
        )
        if not rows:
            # Lost a race after reading (PostgreSQL, READ COMMITTED): the same event
            # may be what won; otherwise this append is stale.
            again = yield Statement("get_event", {"run_id": run_id, "event_id": event.event_id})
            if again:
                return Result(_replay(again[0], event, run_id))
            raise StaleVersion(run_id, expected=expected, current=expected + 1)
        yield _write_event(dialect, new, event, now)
        return Result(new)

    return Program(statements(), writes=True, atomic=True)


def _count(run_id: str, name: str) -> Program[Any]:
    return single("bump_counter", {"run_id": run_id, "name": name})
