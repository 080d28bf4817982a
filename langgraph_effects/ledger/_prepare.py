"""``prepare``: the write-ahead record of operations, one draft or a batch, all or nothing.

A recorded row's identity (its key and payload digest) never changes, so a
replay is answered by reads alone (``_recorded``) where the dialect prefers it,
before the program takes the write lock; otherwise ``INSERT ... ON CONFLICT DO
NOTHING`` is the arbiter between concurrent preparers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from langgraph_effects.core.model import (
    EventKind,
    LeaseOwner,
    Operation,
    OperationDraft,
    OperationEvent,
    OperationStatus,
    Prepared,
    unvalidated,
)
from langgraph_effects.errors import ConcurrentUpdate, PayloadMismatch
from langgraph_effects.ledger._programs import (
    GET,
    GET_MANY,
    PREPARE,
    event_of,
    load_operation,
    now_of,
    row_key,
)
from langgraph_effects.ledger.base import DEFAULT_LEASE
from langgraph_effects.ledger.engine import (
    WRITE_LOCK,
    Dialect,
    Program,
    Result,
    Statement,
    Statements,
)

S = OperationStatus


def _unique(drafts: Iterable[OperationDraft]) -> dict[tuple[str, str], OperationDraft]:
    """The drafts by key; the same operation twice with two payloads is a mismatch."""
    unique: dict[tuple[str, str], OperationDraft] = {}
    for draft in drafts:
        first = unique.setdefault((draft.tenant_id, draft.operation_id), draft)
        if first.payload_digest != draft.payload_digest:
            raise PayloadMismatch(
                draft.operation_id, expected=first.payload_digest, actual=draft.payload_digest
            )
    return unique


def _recorded(
    dialect: Dialect,
    unique: dict[tuple[str, str], OperationDraft],
    drafts: Sequence[OperationDraft],
) -> Statements[list[Prepared] | None]:
    """``prepare_many``'s answer when every draft is already recorded, by reads alone; else None.

    A replay then costs one plain read and no write lock. It is race-free
    because a recorded row's identity (its key and payload digest) never
    changes and ``prepare`` never moves an existing row: what the read returns
    is what the conditional insert would have returned at that instant. When
    any draft is missing, ``prepare_many`` goes on to its ``INSERT ... ON
    CONFLICT``, which stays the arbiter between concurrent preparers.
    """
    if len(unique) == 1:
        ((tenant_id, operation_id),) = unique
        rows = yield Statement(GET, row_key(tenant_id, operation_id))
    else:
        rows = yield Statement(GET_MANY, batch=[row_key(*k) for k in unique])
    if len(rows) < len(unique):
        return None
    found = {(r["tenant_id"], r["operation_id"]): r for r in rows}
    ops: dict[tuple[str, str], Operation] = {}
    for k, draft in unique.items():
        row = found[k]
        if row["payload_digest"] != draft.payload_digest:
            raise PayloadMismatch(
                draft.operation_id, expected=row["payload_digest"], actual=draft.payload_digest
            )
        ops[k] = load_operation(dialect, row)
    return [_prepared(ops[(d.tenant_id, d.operation_id)], created=False) for d in drafts]


def prepare(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    draft: OperationDraft,
    *,
    owner: LeaseOwner | None = None,
    lease_for: timedelta = DEFAULT_LEASE,
) -> Program[Prepared]:
    """The program of ``Ledger.prepare``: ``prepare_many`` of one draft."""
    many = prepare_many(dialect, clock, [draft], owner=owner, lease_for=lease_for)
    return Program(
        _first(many.statements),
        writes=many.writes,
        atomic=many.atomic,
        reads_first=many.reads_first,
    )


def _first(statements: Statements[Result[list[Prepared]]]) -> Statements[Result[Prepared]]:
    result = yield from statements
    return Result(result.value[0], result.logged)


def prepare_many(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    drafts: Sequence[OperationDraft],
    *,
    owner: LeaseOwner | None = None,
    lease_for: timedelta = DEFAULT_LEASE,
) -> Program[list[Prepared]]:
    """Insert the drafts not yet recorded (claimed at once with ``owner``), all or nothing."""
    drafts = list(drafts)
    unique = _unique(drafts)
    for draft in unique.values():
        # Canonical JSON refuses NaN, sets and objects, and payloads over 1 MiB:
        # checked now, whether a write or a read answers (``_recorded``).
        draft.payload_json()

    def steps() -> Statements[Result[list[Prepared]]]:
        if dialect.read_first:
            # Outside any write transaction: a replay takes no write lock.
            known = yield from _recorded(dialect, unique, drafts)
            if known is not None:
                return Result(known)
            yield Statement(WRITE_LOCK)
        items = [_draft_values(draft) for draft in unique.values()]
        actor = owner.encode() if owner is not None else None
        now = now_of(clock)
        claimed = owner is not None
        params = {
            "now": dialect.dump_ts(now),
            "status": (S.DISPATCHING if claimed else S.PREPARED).value,
            "attempts": int(claimed),
            "fencing_token": int(claimed),
            "record_version": 2 if claimed else 1,
            "lease_owner": actor,
            "lease_expires_at": dialect.dump_ts(now + lease_for) if claimed else None,
            "dispatched_at": dialect.dump_ts(now) if claimed else None,
            "actor": actor,
        }
        rows = (yield Statement(PREPARE, params, batch=items)) if items else []
        found = {(r["tenant_id"], r["operation_id"]): r for r in rows}
        missing = [k for k in unique if k not in found]
        if missing:
            # Rows that existed before, or (PostgreSQL) were committed by a
            # concurrent prepare after this statement's snapshot was taken:
            # ON CONFLICT skipped them but the statement could not see them.
            more = yield Statement(GET_MANY, batch=[row_key(*k) for k in missing])
            found.update({(r["tenant_id"], r["operation_id"]): r for r in more})
        out: list[Prepared] = []
        logged: list[tuple[Operation, OperationEvent]] = []
        for k, draft in unique.items():
            row = found.get(k)
            if row is None:
                raise ConcurrentUpdate(draft.operation_id, expected="a row", status="none")
            if row["payload_digest"] != draft.payload_digest:
                raise PayloadMismatch(
                    draft.operation_id, expected=row["payload_digest"], actual=draft.payload_digest
                )
        seen: set[tuple[str, str]] = set()
        for draft in drafts:
            k = (draft.tenant_id, draft.operation_id)
            row = found[k]
            op = load_operation(dialect, row)
            created = bool(row.get("created")) and k not in seen
            seen.add(k)
            if created:
                logged.append(
                    (
                        op,
                        event_of(
                            op,
                            EventKind.PREPARE,
                            None,
                            seq=1,
                            to_status=S.PREPARED,
                            fencing_token=0,
                            actor="ledger",
                            event_id=row["prepare_event_id"],
                        ),
                    )
                )
                if claimed:
                    logged.append(
                        (
                            op,
                            event_of(
                                op,
                                EventKind.CLAIM,
                                S.PREPARED,
                                actor=str(actor),
                                event_id=row["claim_event_id"],
                            ),
                        )
                    )
            out.append(_prepared(op, created=created))
        return Result(out, tuple(logged))

    return Program(steps(), writes=True, atomic=len(unique) > 1, reads_first=dialect.read_first)


def _prepared(operation: Operation, *, created: bool) -> Prepared:
    return unvalidated(Prepared, {"operation": operation, "created": created})


_DRAFT_FIELDS = tuple(name for name in OperationDraft.model_fields if name != "payload")


def _draft_values(draft: OperationDraft) -> dict[str, Any]:
    """The statement values of a (validated) draft: its fields, the payload as JSON text."""
    fields = draft.__dict__
    values = {name: fields[name] for name in _DRAFT_FIELDS}
    values["payload"] = draft.payload_json()
    return values
