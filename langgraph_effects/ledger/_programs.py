"""The ledger's transitions as statement programs, written once for SQLite and PostgreSQL.

Each ledger operation is a ``Program`` of the statement engine (``ledger.engine``):
a generator that yields named ``Statement``s and is sent back their rows. It
holds every decision (which statement, which error); the backends contribute
the SQL under the names below (``sqlite/_sql.py``, ``postgres/_sql.py``) and a
driver. ``prepare`` is in ``_prepare``, an operator's or reconciler's ``resolve``
in ``_resolve``, the read-only programs in ``_queries``; the conditional write
every transition shares is ``transition`` here.

Every transition is one conditional write of the row plus its event. The
happy path never reads first: only when the write matched nothing is the row
read, to raise the precise error (``OperationNotFound``, ``StaleFencingToken``,
``LeaseHeld``, ``IllegalTransition``, ``PayloadMismatch``). If the row turns
out to satisfy the condition after all (it moved back between the two
statements), the write is tried again, a bounded number of times::

    writer A: UPDATE ... WHERE status = 'prepared'   -> no row (B held it)
    writer B:                   release: dispatching -> prepared
    writer A: SELECT                                 -> prepared: try again
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from langgraph_effects.core.actors import approval_ref
from langgraph_effects.core.model import (
    EventKind,
    Evidence,
    LeaseOwner,
    Operation,
    OperationEvent,
    OperationStatus,
    unvalidated,
)
from langgraph_effects.errors import (
    ConcurrentUpdate,
    EffectsError,
    IllegalTransition,
    InvalidInput,
    LeaseHeld,
    OperationNotFound,
    PayloadMismatch,
    StaleFencingToken,
)
from langgraph_effects.ledger._values import json_text, text, who, with_answer
from langgraph_effects.ledger.base import DEFAULT_LEASE, Confirmation
from langgraph_effects.ledger.engine import (
    Dialect,
    Program,
    Result,
    Row,
    Statement,
    Statements,
)

S = OperationStatus

# -- statement names (each dialect maps every one to its SQL) -----------------
PREPARE = "prepare"
GET = "get"
GET_MANY = "get_many"
APPROVE = "approve"
CLAIM = "claim"
RENEW = "renew"
CONFIRM = "confirm"
CONFIRM_MANY = "confirm_many"
REJECT = "reject"
RELEASE = "release"
MARK_UNKNOWN = "mark_unknown"
RESOLVE = "resolve"
RECORD_EVIDENCE = "record_evidence"
LIST = "list"
EVENTS = "events"
FEED = "feed"
FEED_PENDING = "feed_pending"
PAUSE = "pause"
STATS_COUNTS = "stats_counts"
STATS_EVIDENCE = "stats_evidence"
BIND_THREAD = "bind_thread"
ADOPT = "adopt"
OPEN_OPERATIONS = "open_operations"
OPEN_COUNT = "open_count"

FINAL_STATUSES = ", ".join(f"'{status.value}'" for status in OperationStatus if status.terminal)
"""The statuses no transition leaves, as an SQL list: evidence recorded on a record in
one of them is only logged (``RECORD_EVIDENCE`` leaves its ``evidence_checked_at``)."""

STATEMENT_NAMES = (
    OPEN_OPERATIONS,
    OPEN_COUNT,
    PREPARE,
    GET,
    GET_MANY,
    APPROVE,
    CLAIM,
    RENEW,
    CONFIRM,
    CONFIRM_MANY,
    REJECT,
    RELEASE,
    MARK_UNKNOWN,
    RESOLVE,
    RECORD_EVIDENCE,
    LIST,
    EVENTS,
    FEED,
    STATS_COUNTS,
    STATS_EVIDENCE,
    BIND_THREAD,
    ADOPT,
)
"""Every name a ledger dialect defines besides the engine's schema statements
(``FEED_PENDING`` and ``PAUSE`` are optional, for a backend whose event ids may
commit out of order: see ``_queries.feed``)."""

DURABLE = frozenset(
    {PREPARE, CLAIM, APPROVE, REJECT, RELEASE, MARK_UNKNOWN, RESOLVE, RECORD_EVIDENCE}
)
"""The decisions: the writes whose answer is acted on as it is given, so each must be
durable before the ledger gives it. The write-ahead record (``prepare``, ``claim``) comes
before the provider hears of a call; an approval, a rejection (a person's, an
``authorize`` hook's, a reconciler's), a release, an ``unknown``, a resolution or
evidence decides whether a call is sent, sent again, reviewed or replayed, and a
person is told so. Lost to a crash or a failover after that answer, a rejection given
before dispatch would leave the call ``prepared``, to be sent by the next run; an
``unknown`` would be ``dispatching`` again, and evidence or a resolution would be asked
for again. A backend whose commit may return before it is durable (PostgreSQL under
``synchronous_commit = off`` or ``local``) raises these, and only these, to a durable
commit (``postgres/_sql.py``, the ledgers' ``prepare_synchronous``). Not decisions:
receipts (``confirm``, ``confirm_many``) and a thread's binding, relaxed on purpose (a
lost receipt is reconciled, never resent: ``ledger.base``, "Durability of receipts");
a lease's renewal (lost, the lease looks shorter: the record is taken over and
reconciled) and ``adopt`` (lost, the origin is adopted again)."""

_RETRIES = 3
"""Conditional writes retried when the row moved back under them (see module doc)."""

_OPERATION_FIELDS = tuple(Operation.model_fields)
_operation_columns = operator.itemgetter(*_OPERATION_FIELDS)
_STATUSES = {status.value: status for status in OperationStatus}
_TIMESTAMP_FIELDS = (
    "lease_expires_at",
    "evidence_checked_at",
    "created_at",
    "updated_at",
    "status_changed_at",
    "first_dispatched_at",
    "last_dispatched_at",
    "resolved_at",
)


# -- values in and out ---------------------------------------------------------


def model_text(model: Evidence | None) -> str | None:
    """Evidence as the JSON text a row stores; None stays NULL."""
    return None if model is None else model.model_dump_json()


def load_operation(dialect: Dialect, row: Mapping[str, Any]) -> Operation:
    """The ``Operation`` a row of ``lge_operations`` holds, in the dialect's value formats.

    Not validated again (``core.model.unvalidated``): every column was checked
    when it was written and the schema constrains the rest (``status`` by a
    CHECK); what differs from the field types is converted here, as the
    validator would: timestamps and JSON from the dialect's formats, the
    status to its member, ``payload_stored`` to a bool, and a NULL
    ``status_changed_at`` (rows of older releases) to ``updated_at``.
    """
    values = dict(zip(_OPERATION_FIELDS, _operation_columns(row), strict=True))
    load_ts = dialect.load_ts
    # A transition stamps several columns with one instant (created_at, updated_at,
    # status_changed_at ...): each stored value is converted once.
    loaded: dict[Any, datetime | None] = {}
    for name in _TIMESTAMP_FIELDS:
        stamp = values[name]
        if stamp is not None:
            at = loaded.get(stamp)
            if at is None:
                at = loaded[stamp] = load_ts(stamp)
            values[name] = at
    values["status"] = _STATUSES[values["status"]]
    values["payload"] = dialect.load_json(values["payload"])
    values["result"] = dialect.load_json(values["result"])
    values["payload_stored"] = bool(values["payload_stored"])
    if values["status_changed_at"] is None:
        values["status_changed_at"] = values["updated_at"]
    return unvalidated(Operation, values)


def load_event(dialect: Dialect, row: Mapping[str, Any]) -> OperationEvent:
    """The ``OperationEvent`` a row of ``lge_operation_events`` holds."""
    evidence = dialect.load_json(row["evidence"])
    return OperationEvent(
        tenant_id=row["tenant_id"],
        operation_id=row["operation_id"],
        seq=row["seq"],
        kind=row["kind"],
        from_status=row["from_status"],
        to_status=row["to_status"],
        actor=row["actor"],
        fencing_token=row["fencing_token"],
        evidence=None if evidence is None else Evidence.model_validate(evidence),
        detail=dialect.load_json(row["detail"]),
        at=_required_ts(dialect, row["at"]),
        event_id=row["event_id"],
    )


def _required_ts(dialect: Dialect, value: Any) -> datetime:
    ts = dialect.load_ts(value)
    if ts is None:
        raise TypeError("a NOT NULL timestamp column was NULL")
    return ts


def now_of(clock: Callable[[], datetime]) -> datetime:
    """The ledger clock's time; a naive datetime is refused (``InvalidInput``)."""
    now = clock()
    if now.tzinfo is None:
        raise InvalidInput("the ledger's clock must return timezone-aware datetimes")
    return now


# -- writes ------------------------------------------------------------------------


def row_key(tenant_id: str, operation_id: str) -> dict[str, str]:
    """The statement parameters naming one operation."""
    return {"tenant_id": tenant_id, "operation_id": operation_id}


def get_row(tenant_id: str, operation_id: str) -> Statements[Row | None]:
    """Statements reading one operation's row, or None when there is none."""
    rows = yield Statement(GET, row_key(tenant_id, operation_id))
    return rows[0] if rows else None


def event_of(
    op: Operation,
    kind: EventKind,
    from_status: OperationStatus | None,
    *,
    seq: int | None = None,
    to_status: OperationStatus | None = None,
    fencing_token: int | None = None,
    actor: str,
    event_id: int | None,
    evidence: Evidence | None = None,
    detail: Any = None,
) -> OperationEvent:
    """The event row one transition of ``op`` appends (the next ``seq`` unless given).

    Not validated (``core.model.unvalidated``): it repeats what the same write
    stored, from a loaded record and the ledger's own arguments.
    """
    return unvalidated(
        OperationEvent,
        {
            "tenant_id": op.tenant_id,
            "operation_id": op.operation_id,
            "seq": op.record_version if seq is None else seq,
            "kind": kind,
            "from_status": from_status,
            "to_status": op.status if to_status is None else to_status,
            "actor": actor,
            "fencing_token": op.fencing_token if fencing_token is None else fencing_token,
            "evidence": evidence,
            "detail": detail,
            "at": op.updated_at,
            "event_id": event_id,
        },
    )


Diagnose = Callable[[Operation | None], Exception | Operation | None]
"""Why a conditional write matched nothing: an error to raise, the row to
return unchanged (an idempotent no-op), or None: the row fits now, try again."""


def transition(
    dialect: Dialect,
    clock: Callable[[], datetime],
    name: str,
    tenant_id: str,
    operation_id: str,
    values: Mapping[str, Any],
    *,
    kind: EventKind,
    actor: str,
    diagnose: Diagnose,
    evidence: Evidence | None = None,
    detail: Any = None,
    lease_for: timedelta | None = None,
    receipt: bool = False,
) -> Program[Operation]:
    """One conditional write plus its event; on a miss, read and diagnose.

    Binds ``now`` (and ``evidence_at``: ``now`` when evidence comes with the
    move, else NULL, which keeps ``evidence_checked_at``), and with
    ``lease_for`` the new ``lease_expires_at``: expiry is a timestamp computed
    from the ledger's clock.
    """
    params = {
        **row_key(tenant_id, operation_id),
        **values,
        "event_kind": kind.value,
        "actor": actor,
        "evidence": model_text(evidence),
        "detail": json_text(detail, what="detail"),
    }

    def steps() -> Statements[Result[Operation]]:
        for _ in range(_RETRIES):
            now = now_of(clock)
            timed = {
                **params,
                "now": dialect.dump_ts(now),
                "evidence_at": None if evidence is None else dialect.dump_ts(now),
            }
            if lease_for is not None:
                timed["lease_expires_at"] = dialect.dump_ts(now + lease_for)
            rows = yield Statement(name, timed)
            if rows:
                row = rows[0]
                op = load_operation(dialect, row)
                event = event_of(
                    op,
                    kind,
                    _STATUSES[row["from_status"]],
                    actor=actor,
                    event_id=row["event_id"],
                    evidence=evidence,
                    detail=detail,
                )
                return Result(op, ((op, event),))
            current = yield from get_row(tenant_id, operation_id)
            verdict = diagnose(None if current is None else load_operation(dialect, current))
            if isinstance(verdict, Exception):
                raise verdict
            if isinstance(verdict, Operation):
                return Result(verdict)
        raise ConcurrentUpdate(operation_id, expected=f"a row {name} can move", status="moving")

    return Program(steps(), writes=True, relaxed=receipt, tenant_id=tenant_id)


def not_found(tenant_id: str, operation_id: str) -> OperationNotFound:
    """The error for an operation the tenant does not have."""
    return OperationNotFound(tenant_id, operation_id)


def illegal(op: Operation, target: OperationStatus, why: str) -> IllegalTransition:
    """The error for a move the state machine refuses (terminal states never move)."""
    if op.status.terminal:
        why = "terminal states never move"
    return IllegalTransition(op.operation_id, status=op.status, target=target, why=why)


def _fenced(
    tenant_id: str, operation_id: str, token: int, target: OperationStatus
) -> Callable[[Operation | None], Exception | None]:
    """Diagnose a fenced move out of ``dispatching``."""

    def diagnose(op: Operation | None) -> Exception | None:
        if op is None:
            return not_found(tenant_id, operation_id)
        if op.fencing_token != token:
            return StaleFencingToken(operation_id, token=token, current=op.fencing_token)
        if op.status is not S.DISPATCHING:
            return illegal(op, target, "only a dispatching operation moves by a fenced write")
        return None

    return diagnose


def approve(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    tenant_id: str,
    operation_id: str,
    *,
    payload_digest: str,
    by: str,
    reason: str = "",
    answer: str | None = None,
    claimed_by: str | None = None,
    verified_by: str | None = None,
) -> Program[Operation]:
    """The program of ``Ledger.approve`` (see its contract in ``ledger.base``)."""
    if not by.strip():
        raise InvalidInput("an approval needs the approver's identity (by)")

    def diagnose(op: Operation | None) -> Exception | Operation | None:
        if op is None:
            return not_found(tenant_id, operation_id)
        if op.payload_digest != payload_digest:
            return PayloadMismatch(operation_id, expected=op.payload_digest, actual=payload_digest)
        if op.status.terminal:
            return illegal(op, S.DISPATCHING, "")
        return op if op.status is not S.PREPARED else None  # already past approval

    return transition(
        dialect,
        clock,
        APPROVE,
        tenant_id,
        operation_id,
        {
            "payload_digest": payload_digest,
            "authorization_ref": approval_ref(by),
            "from_status": S.PREPARED.value,
        },
        kind=EventKind.APPROVE,
        actor=by,
        detail=with_answer({"reason": reason, **who(claimed_by, verified_by)}, answer),
        diagnose=diagnose,
    )


def claim(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    tenant_id: str,
    operation_id: str,
    *,
    owner: LeaseOwner,
    lease_for: timedelta = DEFAULT_LEASE,
    actor: str | None = None,
) -> Program[Operation]:
    """The program of ``Ledger.claim`` (see its contract in ``ledger.base``)."""

    def diagnose(op: Operation | None) -> Exception | None:
        if op is None:
            return not_found(tenant_id, operation_id)
        if op.status is S.DISPATCHING:
            return LeaseHeld(operation_id, owner=op.lease_owner, expires_at=op.lease_expires_at)
        if op.status.terminal:
            return illegal(op, S.DISPATCHING, "")
        return None

    return transition(
        dialect,
        clock,
        CLAIM,
        tenant_id,
        operation_id,
        {"lease_owner": owner.encode()},
        kind=EventKind.CLAIM,
        actor=actor or owner.encode(),
        diagnose=diagnose,
        lease_for=lease_for,
    )


def renew(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    tenant_id: str,
    operation_id: str,
    *,
    token: int,
    lease_for: timedelta = DEFAULT_LEASE,
) -> Program[Operation]:
    """Extend a live lease: one conditional write, no event."""
    diagnose = _fenced(tenant_id, operation_id, token, S.DISPATCHING)

    def steps() -> Statements[Result[Operation]]:
        for _ in range(_RETRIES):
            now = now_of(clock)
            rows = yield Statement(
                RENEW,
                {
                    **row_key(tenant_id, operation_id),
                    "token": token,
                    "lease_expires_at": dialect.dump_ts(now + lease_for),
                },
            )
            if rows:
                return Result(load_operation(dialect, rows[0]))
            current = yield from get_row(tenant_id, operation_id)
            verdict = diagnose(None if current is None else load_operation(dialect, current))
            if verdict is not None:
                raise verdict
        raise ConcurrentUpdate(operation_id, expected="dispatching", status="moving")

    return Program(steps(), writes=True, tenant_id=tenant_id)


def confirm(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    tenant_id: str,
    operation_id: str,
    *,
    token: int,
    result: Any = None,
    provider_result_id: str | None = None,
    provider_request_id: str | None = None,
    evidence: Evidence | None = None,
) -> Program[Operation]:
    """The program of ``Ledger.confirm`` (see its contract in ``ledger.base``)."""
    return transition(
        dialect,
        clock,
        CONFIRM,
        tenant_id,
        operation_id,
        {
            "token": token,
            "result": json_text(result, what="result"),
            "provider_result_id": provider_result_id,
            "provider_request_id": provider_request_id,
            "from_status": S.DISPATCHING.value,
        },
        kind=EventKind.CONFIRM,
        actor="receipt" if evidence is None else evidence.source,
        evidence=evidence,
        diagnose=_fenced(tenant_id, operation_id, token, S.CONFIRMED),
        receipt=True,
    )


def confirm_many(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    confirmations: Sequence[Confirmation],
) -> Program[list[Operation | EffectsError]]:
    """Several fenced ``dispatching -> confirmed`` moves in one statement (one per row on
    SQLite, inside one transaction); a receipt that no longer applies yields its error.

    The batch is not all or nothing: each receipt is its own conditional write,
    so a stale one (taken over while its provider call was in flight) leaves the
    others to commit. Misses are read back and diagnosed exactly as ``confirm``
    does; one that fits after all (the row moved back) is written again.
    """
    keys = [(c.tenant_id, c.operation_id) for c in confirmations]
    if len(set(keys)) != len(keys):
        raise InvalidInput("confirm_many names an operation twice")
    items: dict[tuple[str, str], dict[str, Any]] = {
        (c.tenant_id, c.operation_id): {
            **row_key(c.tenant_id, c.operation_id),
            "token": c.token,
            "result": json_text(c.result, what="result"),
            "provider_result_id": c.provider_result_id,
            "provider_request_id": c.provider_request_id,
            "evidence": model_text(c.evidence),
            "actor": "receipt" if c.evidence is None else c.evidence.source,
        }
        for c in confirmations
    }
    by_key = dict(zip(keys, confirmations, strict=True))

    def steps() -> Statements[Result[list[Operation | EffectsError]]]:
        done: dict[tuple[str, str], Operation | EffectsError] = {}
        logged: list[tuple[Operation, OperationEvent]] = []
        pending = list(keys)
        for _ in range(_RETRIES):
            if not pending:
                break
            now = dialect.dump_ts(now_of(clock))
            batch = [
                {**items[k], "evidence_at": None if items[k]["evidence"] is None else now}
                for k in pending
            ]
            params = {
                "now": now,
                "event_kind": EventKind.CONFIRM.value,
                "from_status": S.DISPATCHING.value,
                "detail": None,
            }
            rows = yield Statement(CONFIRM_MANY, params, batch=batch)
            for row in rows:
                k = (row["tenant_id"], row["operation_id"])
                op = load_operation(dialect, row)
                done[k] = op
                c = by_key[k]
                event = event_of(
                    op,
                    EventKind.CONFIRM,
                    S.DISPATCHING,
                    actor=items[k]["actor"],
                    event_id=row["event_id"],
                    evidence=c.evidence,
                )
                logged.append((op, event))
            missed = [k for k in pending if k not in done]
            pending = []
            if not missed:
                break
            found = yield Statement(GET_MANY, batch=[row_key(*k) for k in missed])
            current = {(r["tenant_id"], r["operation_id"]): r for r in found}
            for k in missed:
                now_row = current.get(k)
                c = by_key[k]
                verdict = _fenced(c.tenant_id, c.operation_id, c.token, S.CONFIRMED)(
                    None if now_row is None else load_operation(dialect, now_row)
                )
                if verdict is None:
                    pending.append(k)  # it fits now: write it again
                elif isinstance(verdict, EffectsError):
                    done[k] = verdict
                else:  # pragma: no cover - diagnoses are EffectsErrors
                    raise verdict
        for k in pending:
            done[k] = ConcurrentUpdate(k[1], expected="a row confirm can move", status="moving")
        outcomes = [done[k] for k in keys]
        refused = tuple(
            (k[0], outcome)
            for k, outcome in zip(keys, outcomes, strict=True)
            if isinstance(outcome, StaleFencingToken)
        )
        return Result(outcomes, tuple(logged), refused)

    # Each receipt is its own conditional write: statements that commit apart
    # lose nothing, so an autocommit connection needs no explicit transaction.
    return Program(steps(), writes=True, relaxed=True)


def reject(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    tenant_id: str,
    operation_id: str,
    *,
    token: int | None,
    reason: str,
    evidence: Evidence | None = None,
    actor: str | None = None,
    answer: str | None = None,
    claimed_by: str | None = None,
    verified_by: str | None = None,
) -> Program[Operation]:
    """Fenced ``dispatching -> rejected``, or with ``token=None`` ``prepared -> rejected``."""
    if token is not None:
        diagnose = _fenced(tenant_id, operation_id, token, S.REJECTED)
        from_status = S.DISPATCHING
    else:
        from_status = S.PREPARED

        def diagnose(op: Operation | None) -> Exception | None:
            if op is None:
                return not_found(tenant_id, operation_id)
            if op.status.terminal:
                return illegal(op, S.REJECTED, "")
            if op.status is not S.PREPARED:
                # Claimed since the caller looked: its view of the operation is stale.
                return StaleFencingToken(operation_id, token=0, current=op.fencing_token)
            return None

    return transition(
        dialect,
        clock,
        REJECT,
        tenant_id,
        operation_id,
        {
            "token": token,
            "error": text(reason),
            "from_status": from_status.value,
        },
        kind=EventKind.REJECT,
        actor=actor or ("ledger" if token is None else "provider"),
        evidence=evidence,
        detail=with_answer(who(claimed_by, verified_by) or None, answer),
        diagnose=diagnose,
    )


def release(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    tenant_id: str,
    operation_id: str,
    *,
    token: int,
    reason: str,
) -> Program[Operation]:
    """The program of ``Ledger.release`` (see its contract in ``ledger.base``)."""
    return transition(
        dialect,
        clock,
        RELEASE,
        tenant_id,
        operation_id,
        {"token": token, "from_status": S.DISPATCHING.value},
        kind=EventKind.RELEASE,
        actor="provider",
        detail={"reason": reason},
        diagnose=_fenced(tenant_id, operation_id, token, S.PREPARED),
    )


def mark_unknown(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    tenant_id: str,
    operation_id: str,
    *,
    token: int,
    reason: str,
    evidence: Evidence | None = None,
    actor: str | None = None,
) -> Program[Operation]:
    """The program of ``Ledger.mark_unknown`` (see its contract in ``ledger.base``)."""
    return transition(
        dialect,
        clock,
        MARK_UNKNOWN,
        tenant_id,
        operation_id,
        {
            "token": token,
            "error": text(reason),
            "from_status": S.DISPATCHING.value,
        },
        kind=EventKind.MARK_UNKNOWN,
        actor=actor or "runner",
        evidence=evidence,
        detail={"reason": reason},
        diagnose=_fenced(tenant_id, operation_id, token, S.UNKNOWN),
    )


def record_evidence(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
    tenant_id: str,
    operation_id: str,
    evidence: Evidence,
    answer: str | None = None,
) -> Program[Operation]:
    """The program of ``Ledger.record_evidence`` (see its contract in ``ledger.base``)."""

    def diagnose(op: Operation | None) -> Exception | None:
        return not_found(tenant_id, operation_id) if op is None else None

    return transition(
        dialect,
        clock,
        RECORD_EVIDENCE,
        tenant_id,
        operation_id,
        {},
        kind=EventKind.EVIDENCE,
        actor=evidence.source,
        evidence=evidence,
        detail=with_answer(None, answer),
        diagnose=diagnose,
    )
