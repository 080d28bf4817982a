"""The ledger's transitions as statement programs, written once for SQLite and PostgreSQL.

Each ledger operation is a ``Program`` of the statement engine (``_statements``):
a generator that yields named ``Statement``s and is sent back their rows. It
holds every decision (which statement, which error); the backends contribute
the SQL under the names below (``sqlite/_sql.py``, ``postgres/_sql.py``) and a
driver. The read-only programs are in ``_queries``.

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

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from langgraph_effects.core.digest import canonical_json
from langgraph_effects.core.model import (
    Decision,
    EventKind,
    Evidence,
    EvidenceKind,
    LeaseOwner,
    Operation,
    OperationDraft,
    OperationEvent,
    OperationStatus,
    Prepared,
    Resolution,
)
from langgraph_effects.core.transitions import check_transition
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
from langgraph_effects.ledger._statements import (
    Dialect,
    Program,
    Result,
    Row,
    Statement,
    Statements,
)
from langgraph_effects.ledger._values import json_text, text, with_answer
from langgraph_effects.ledger.base import Confirmation

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

STATEMENT_NAMES = (
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
)
"""Every name a ledger dialect defines besides the engine's schema statements
(``FEED_PENDING`` and ``PAUSE`` are optional, for a backend whose event ids may
commit out of order: see ``_queries.feed``)."""

_RETRIES = 3
"""Conditional writes retried when the row moved back under them (see module doc)."""

_OPERATION_FIELDS = tuple(Operation.model_fields)
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


def _model_text(model: Evidence | None) -> str | None:
    return None if model is None else model.model_dump_json()


def load_operation(dialect: Dialect, row: Mapping[str, Any]) -> Operation:
    values = {name: row[name] for name in _OPERATION_FIELDS}
    for name in _TIMESTAMP_FIELDS:
        values[name] = dialect.load_ts(values[name])
    values["payload"] = dialect.load_json(values["payload"])
    values["result"] = dialect.load_json(values["result"])
    values["payload_stored"] = bool(values["payload_stored"])
    return Operation.model_validate(values)


def load_event(dialect: Dialect, row: Mapping[str, Any]) -> OperationEvent:
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


def _now(clock: Callable[[], datetime]) -> datetime:
    now = clock()
    if now.tzinfo is None:
        raise InvalidInput("the ledger's clock must return timezone-aware datetimes")
    return now


# -- writes ------------------------------------------------------------------------


def row_key(tenant_id: str, operation_id: str) -> dict[str, str]:
    return {"tenant_id": tenant_id, "operation_id": operation_id}


def get_row(tenant_id: str, operation_id: str) -> Statements[Row | None]:
    rows = yield Statement(GET, row_key(tenant_id, operation_id))
    return rows[0] if rows else None


def _event(
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
    return OperationEvent(
        tenant_id=op.tenant_id,
        operation_id=op.operation_id,
        seq=op.record_version if seq is None else seq,
        kind=kind,
        from_status=from_status,
        to_status=op.status if to_status is None else to_status,
        actor=actor,
        fencing_token=op.fencing_token if fencing_token is None else fencing_token,
        evidence=evidence,
        detail=detail,
        at=op.updated_at,
        event_id=event_id,
    )


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


def recorded(dialect: Dialect, drafts: Sequence[OperationDraft]) -> Program[list[Prepared] | None]:
    """``prepare_many``'s answer when every draft is already recorded, by reads alone; else None.

    A replay then costs one plain read and no write lock. It is race-free
    because a recorded row's identity (its key and payload digest) never
    changes and ``prepare`` never moves an existing row: what the read returns
    is what the conditional insert would have returned at that instant. When
    any draft is missing, the caller runs ``prepare_many``, whose
    ``INSERT ... ON CONFLICT`` stays the arbiter between concurrent preparers.
    """
    unique = _unique(drafts)

    def steps() -> Statements[Result[list[Prepared] | None]]:
        if len(unique) == 1:
            ((tenant_id, operation_id),) = unique
            rows = yield Statement(GET, row_key(tenant_id, operation_id))
        else:
            rows = yield Statement(GET_MANY, batch=[row_key(*k) for k in unique])
        if len(rows) < len(unique):
            return Result(None)
        found = {(r["tenant_id"], r["operation_id"]): r for r in rows}
        ops: dict[tuple[str, str], Operation] = {}
        for k, draft in unique.items():
            row = found[k]
            if row["payload_digest"] != draft.payload_digest:
                raise PayloadMismatch(
                    draft.operation_id, expected=row["payload_digest"], actual=draft.payload_digest
                )
            ops[k] = load_operation(dialect, row)
        return Result(
            [Prepared(operation=ops[(d.tenant_id, d.operation_id)], created=False) for d in drafts]
        )

    return Program(steps(), writes=False)


def prepare_many(
    dialect: Dialect,
    clock: Callable[[], datetime],
    drafts: Iterable[OperationDraft],
    *,
    owner: LeaseOwner | None,
    lease_for: timedelta,
) -> Program[list[Prepared]]:
    """Insert the drafts not yet recorded (claimed at once with ``owner``), all or nothing."""
    drafts = list(drafts)
    unique = _unique(drafts)
    items = [_draft_values(draft) for draft in unique.values()]
    actor = owner.encode() if owner is not None else None

    def steps() -> Statements[Result[list[Prepared]]]:
        now = _now(clock)
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
                        _event(
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
                            _event(
                                op,
                                EventKind.CLAIM,
                                S.PREPARED,
                                actor=str(actor),
                                event_id=row["claim_event_id"],
                            ),
                        )
                    )
            out.append(Prepared(operation=op, created=created))
        return Result(out, tuple(logged))

    return Program(steps(), writes=True, atomic=len(unique) > 1)


def _draft_values(draft: OperationDraft) -> dict[str, Any]:
    values = draft.model_dump(exclude={"payload"})
    # Canonical JSON also refuses NaN, sets and objects, and payloads over 1 MiB.
    values["payload"] = None if draft.payload is None else canonical_json(draft.payload).decode()
    return values


Diagnose = Callable[[Operation | None], Exception | Operation | None]
"""Why a conditional write matched nothing: an error to raise, the row to
return unchanged (an idempotent no-op), or None: the row fits now, try again."""


def _transition(
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
        "evidence": _model_text(evidence),
        "detail": json_text(detail, what="detail"),
    }

    def steps() -> Statements[Result[Operation]]:
        for _ in range(_RETRIES):
            now = _now(clock)
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
                event = _event(
                    op,
                    kind,
                    S(row["from_status"]),
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

    return Program(steps(), writes=True, receipt=receipt, tenant_id=tenant_id)


def _not_found(tenant_id: str, operation_id: str) -> OperationNotFound:
    return OperationNotFound(tenant_id, operation_id)


def _illegal(op: Operation, target: OperationStatus, why: str) -> IllegalTransition:
    if op.status.terminal:
        why = "terminal states never move"
    return IllegalTransition(op.operation_id, status=op.status, target=target, why=why)


def _fenced(
    tenant_id: str, operation_id: str, token: int, target: OperationStatus
) -> Callable[[Operation | None], Exception | None]:
    """Diagnose a fenced move out of ``dispatching``."""

    def diagnose(op: Operation | None) -> Exception | None:
        if op is None:
            return _not_found(tenant_id, operation_id)
        if op.fencing_token != token:
            return StaleFencingToken(operation_id, token=token, current=op.fencing_token)
        if op.status is not S.DISPATCHING:
            return _illegal(op, target, "only a dispatching operation moves by a fenced write")
        return None

    return diagnose


def approve(
    dialect: Dialect,
    clock: Callable[[], datetime],
    tenant_id: str,
    operation_id: str,
    *,
    payload_digest: str,
    by: str,
    reason: str,
    answer: str | None = None,
) -> Program[Operation]:
    if not by.strip():
        raise InvalidInput("an approval needs the approver's identity (by)")

    def diagnose(op: Operation | None) -> Exception | Operation | None:
        if op is None:
            return _not_found(tenant_id, operation_id)
        if op.payload_digest != payload_digest:
            return PayloadMismatch(operation_id, expected=op.payload_digest, actual=payload_digest)
        if op.status.terminal:
            return _illegal(op, S.DISPATCHING, "")
        return op if op.status is not S.PREPARED else None  # already past approval

    return _transition(
        dialect,
        clock,
        APPROVE,
        tenant_id,
        operation_id,
        {
            "payload_digest": payload_digest,
            "authorization_ref": f"approved-by:{by}",
            "from_status": S.PREPARED.value,
        },
        kind=EventKind.APPROVE,
        actor=by,
        detail=with_answer({"reason": reason}, answer),
        diagnose=diagnose,
    )


def claim(
    dialect: Dialect,
    clock: Callable[[], datetime],
    tenant_id: str,
    operation_id: str,
    *,
    owner: LeaseOwner,
    lease_for: timedelta,
    actor: str | None,
) -> Program[Operation]:
    def diagnose(op: Operation | None) -> Exception | None:
        if op is None:
            return _not_found(tenant_id, operation_id)
        if op.status is S.DISPATCHING:
            return LeaseHeld(operation_id, owner=op.lease_owner, expires_at=op.lease_expires_at)
        if op.status.terminal:
            return _illegal(op, S.DISPATCHING, "")
        return None

    return _transition(
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
    tenant_id: str,
    operation_id: str,
    *,
    token: int,
    lease_for: timedelta,
) -> Program[Operation]:
    """Extend a live lease: one conditional write, no event."""
    diagnose = _fenced(tenant_id, operation_id, token, S.DISPATCHING)

    def steps() -> Statements[Result[Operation]]:
        for _ in range(_RETRIES):
            now = _now(clock)
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
    tenant_id: str,
    operation_id: str,
    *,
    token: int,
    result: Any,
    provider_result_id: str | None,
    provider_request_id: str | None,
    evidence: Evidence | None,
) -> Program[Operation]:
    return _transition(
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
            "evidence": _model_text(c.evidence),
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
            now = dialect.dump_ts(_now(clock))
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
                event = _event(
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
        return Result([done[k] for k in keys], tuple(logged))

    # Each receipt is its own conditional write: statements that commit apart
    # lose nothing, so an autocommit connection needs no explicit transaction.
    return Program(steps(), writes=True, receipt=True)


def reject(
    dialect: Dialect,
    clock: Callable[[], datetime],
    tenant_id: str,
    operation_id: str,
    *,
    token: int | None,
    reason: str,
    evidence: Evidence | None,
    actor: str | None,
    answer: str | None = None,
) -> Program[Operation]:
    """Fenced ``dispatching -> rejected``, or with ``token=None`` ``prepared -> rejected``."""
    if token is not None:
        diagnose = _fenced(tenant_id, operation_id, token, S.REJECTED)
        from_status = S.DISPATCHING
    else:
        from_status = S.PREPARED

        def diagnose(op: Operation | None) -> Exception | None:
            if op is None:
                return _not_found(tenant_id, operation_id)
            if op.status.terminal:
                return _illegal(op, S.REJECTED, "")
            if op.status is not S.PREPARED:
                # Claimed since the caller looked: its view of the operation is stale.
                return StaleFencingToken(operation_id, token=0, current=op.fencing_token)
            return None

    return _transition(
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
        detail=with_answer(None, answer),
        diagnose=diagnose,
    )


def release(
    dialect: Dialect,
    clock: Callable[[], datetime],
    tenant_id: str,
    operation_id: str,
    *,
    token: int,
    reason: str,
) -> Program[Operation]:
    return _transition(
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
    tenant_id: str,
    operation_id: str,
    *,
    token: int,
    reason: str,
    evidence: Evidence | None,
    actor: str | None,
) -> Program[Operation]:
    return _transition(
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


_RESOLVE_TARGET = {
    Decision.CONFIRM: S.CONFIRMED,
    Decision.REJECT: S.REJECTED,
    Decision.RETRY: S.PREPARED,
}
_EVIDENCE_FOR = {
    S.CONFIRMED: EvidenceKind.CONFIRMED,
    S.REJECTED: EvidenceKind.REJECTED,
    S.PREPARED: EvidenceKind.INCONCLUSIVE,
}


def resolution_plan(resolution: Resolution) -> tuple[OperationStatus, Evidence, str | None]:
    """The target, the evidence to record and the operator (None: a reconciler) of a resolution.

    An operator is a person: a resolution without evidence, or with evidence
    whose source is ``"operator"``. A reconciler resolves by evidence alone.
    """
    target = _RESOLVE_TARGET.get(resolution.decision)
    if target is None:
        raise InvalidInput(f"resolve takes confirm, reject or retry, not {resolution.decision}")
    is_operator = resolution.evidence is None or resolution.evidence.source == "operator"
    evidence = resolution.evidence or Evidence(
        kind=_EVIDENCE_FOR[target],
        summary=resolution.reason,
        result=resolution.result,
        provider_result_id=resolution.provider_result_id,
        source="operator",
    )
    return target, evidence, resolution.by if is_operator else None


def resolve(
    dialect: Dialect,
    clock: Callable[[], datetime],
    tenant_id: str,
    operation_id: str,
    resolution: Resolution,
) -> Program[Operation]:
    """``unknown -> confirmed | rejected | prepared`` on conclusive evidence or an operator;
    an operator's ``approve`` or ``reject`` of a ``prepared`` operation (out of band).

    A ``reject`` tries ``unknown -> rejected`` first; only when that matched
    nothing and the row turns out to be ``prepared`` does it write
    ``prepared -> rejected`` (again one conditional write plus its event).
    """
    if resolution.decision is Decision.APPROVE:
        return _approve_prepared(dialect, clock, tenant_id, operation_id, resolution)
    target, evidence, operator = resolution_plan(resolution)
    try:
        kind = check_transition(
            operation_id, S.UNKNOWN, target, evidence=evidence, operator=operator
        )
        refusal: IllegalTransition | None = None
    except IllegalTransition as exc:
        kind, refusal = EventKind.RESOLVE, exc
    prepared_too = target is S.REJECTED and operator is not None

    def diagnose(op: Operation | None) -> Exception | None:
        if op is None:
            return _not_found(tenant_id, operation_id)
        if prepared_too and op.status is S.PREPARED:
            return _IsPrepared()
        if op.status is not S.UNKNOWN:
            why = "only an unknown operation is resolved"
            if op.status is S.PREPARED:
                why += " (an operator approves or rejects a prepared one)"
            return _illegal(op, target, why)
        return refusal

    if refusal is not None:
        # Refused whatever the row says; read it only to name the precise error.
        def refuse() -> Statements[Result[Operation]]:
            current = yield from get_row(tenant_id, operation_id)
            verdict = diagnose(None if current is None else load_operation(dialect, current))
            raise verdict or refusal

        return Program(refuse(), writes=False)

    values: dict[str, Any] = {
        "to_status": target.value,
        "from_status": S.UNKNOWN.value,
        "result": None,
        "provider_result_id": None,
        "error": None,
    }
    if target is S.CONFIRMED:
        result = resolution.result if resolution.result is not None else evidence.result
        values["result"] = json_text(result, what="result")
        values["provider_result_id"] = resolution.provider_result_id or evidence.provider_result_id
    elif target is S.REJECTED:
        values["error"] = text(resolution.reason or evidence.summary)
    move = _transition(
        dialect,
        clock,
        RESOLVE,
        tenant_id,
        operation_id,
        values,
        kind=kind,
        actor=resolution.by,
        evidence=evidence,
        detail=with_answer(resolution.detail(), resolution.answer),
        diagnose=diagnose,
    )
    if not prepared_too:
        return move

    def refuse_prepared(op: Operation | None) -> Exception | None:
        if op is None:
            return _not_found(tenant_id, operation_id)
        if op.status is S.PREPARED:
            return None
        return _illegal(op, S.REJECTED, "it left prepared while the rejection was written")

    reject_prepared = _transition(
        dialect,
        clock,
        REJECT,
        tenant_id,
        operation_id,
        {"token": None, "error": values["error"], "from_status": S.PREPARED.value},
        kind=EventKind.REJECT,
        actor=resolution.by,
        evidence=evidence,
        detail=with_answer(resolution.detail(), resolution.answer),
        diagnose=refuse_prepared,
    )

    def steps() -> Statements[Result[Operation]]:
        try:
            return (yield from move.statements)
        except _IsPrepared:
            return (yield from reject_prepared.statements)

    return Program(steps(), writes=True, tenant_id=tenant_id)


class _IsPrepared(Exception):
    """A rejection met a ``prepared`` row: write ``prepared -> rejected`` instead."""


def _approve_prepared(
    dialect: Dialect,
    clock: Callable[[], datetime],
    tenant_id: str,
    operation_id: str,
    resolution: Resolution,
) -> Program[Operation]:
    """An operator's out-of-band approval: the next run dispatches without asking.

    The approval binds to the record's pinned payload (``payload_digest`` never
    changes under an operation id). Approving an operation that is no longer
    ``prepared`` is refused: it was dispatched, decided or rejected meanwhile.
    """
    if resolution.evidence is not None and resolution.evidence.source != "operator":
        raise InvalidInput("only an operator approves; evidence approves nothing")

    def diagnose(op: Operation | None) -> Exception | None:
        if op is None:
            return _not_found(tenant_id, operation_id)
        if op.status is not S.PREPARED:
            return _illegal(op, S.PREPARED, "only a prepared operation is approved")
        return None

    return _transition(
        dialect,
        clock,
        APPROVE,
        tenant_id,
        operation_id,
        {
            "payload_digest": None,
            "authorization_ref": f"approved-by:{resolution.by}",
            "from_status": S.PREPARED.value,
        },
        kind=EventKind.APPROVE,
        actor=resolution.by,
        detail=with_answer(resolution.detail(), resolution.answer),
        diagnose=diagnose,
    )


def record_evidence(
    dialect: Dialect,
    clock: Callable[[], datetime],
    tenant_id: str,
    operation_id: str,
    evidence: Evidence,
    answer: str | None = None,
) -> Program[Operation]:
    def diagnose(op: Operation | None) -> Exception | None:
        return _not_found(tenant_id, operation_id) if op is None else None

    return _transition(
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
