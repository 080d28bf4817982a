"""``InMemoryLedger``: the reference implementation, for tests and notebooks.

It keeps everything in a dict under one lock, so every transition is trivially
atomic. It is the executable specification the SQL backends are tested against
(the contract suite in ``langgraph_effects.testing``); it survives nothing.
"""

from __future__ import annotations

import builtins
import dataclasses
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from langgraph_effects.core.actors import approval_ref
from langgraph_effects.core.model import (
    Decision,
    EventKind,
    Evidence,
    LeaseOwner,
    Operation,
    OperationDraft,
    OperationEvent,
    OperationStatus,
    Prepared,
    Resolution,
    unvalidated,
    utcnow,
)
from langgraph_effects.core.plan import AWAITS_APPROVAL, operator_decisions
from langgraph_effects.core.transitions import check_transition, moved
from langgraph_effects.errors import (
    EffectsError,
    IllegalTransition,
    InvalidInput,
    LeaseHeld,
    LedgerNotSetUp,
    OperationNotFound,
    PayloadMismatch,
    StaleFencingToken,
)
from langgraph_effects.ledger._resolve import resolution_plan, resolved_columns
from langgraph_effects.ledger._values import json_text, who, with_answer
from langgraph_effects.ledger.base import (
    DEFAULT_LEASE,
    Confirmation,
    Ledger,
    LedgerStats,
    OpenOperations,
)
from langgraph_effects.observe import log_stale_token, log_transition

__all__ = ["InMemoryLedger"]

S = OperationStatus
_OPEN = frozenset({S.PREPARED, S.DISPATCHING, S.UNKNOWN})
_Key = tuple[str, str]

_ROW_DEFAULTS = {name: info.default for name, info in Operation.model_fields.items()}
"""Every field of a record, in declaration order, at its default (``_new_row`` fills it)."""


def _new_row(draft: OperationDraft, now: datetime) -> Operation:
    """The ``prepared`` record of ``draft`` at ``now``.

    Not validated again (``core.model.unvalidated``): the draft was, and the rest is
    the ledger's own; the payload is the draft's dumped copy, never shared with it.
    """
    values = dict(_ROW_DEFAULTS)  # the declaration order; update keeps it
    values.update(draft.model_dump())
    values.update(status=S.PREPARED, created_at=now, updated_at=now, status_changed_at=now)
    return unvalidated(Operation, values)


def coerce_status(status: OperationStatus | str | None) -> OperationStatus | None:
    """Turn a status string into the enum, with an error that lists the valid ones."""
    if status is None or isinstance(status, OperationStatus):
        return status
    try:
        return OperationStatus(status)
    except ValueError:
        valid = ", ".join(s.value for s in OperationStatus)
        raise InvalidInput(f"unknown status {status!r}; expected one of: {valid}") from None


class InMemoryLedger(Ledger):
    """A ledger in process memory. Same contract as ``SQLiteLedger``, no durability."""

    def __init__(self, *, clock: Callable[[], datetime] = utcnow) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        self._rows: dict[_Key, Operation] = {}
        self._events: dict[_Key, list[OperationEvent]] = {}
        self._ready = False
        self._stale_refusals = 0
        self._feed: list[OperationEvent] = []
        self._threads: dict[str, str] = {}

    def close(self) -> None:
        """Nothing to release (the operations live as long as this object): the same
        call as the SQL ledgers' ``close()``, so code may close whichever it holds."""

    def setup(self) -> None:
        self._ready = True

    # -- helpers -------------------------------------------------------------

    def _require_setup(self) -> None:
        if not self._ready:
            raise LedgerNotSetUp("InMemoryLedger")

    def _row(self, tenant_id: str, operation_id: str) -> Operation:
        row = self._rows.get((tenant_id, operation_id))
        if row is None:
            raise OperationNotFound(tenant_id, operation_id)
        return row

    def _fence(self, row: Operation, token: int) -> None:
        if token != row.fencing_token:
            raise self._refuse_stale(row, token)

    def _refuse_stale(self, row: Operation, token: int) -> StaleFencingToken:
        """Count and report a stale-token refusal; the caller raises what this returns."""
        self._stale_refusals += 1
        log_stale_token(
            row.tenant_id,
            row.operation_id,
            token=token,
            current=row.fencing_token,
            action=row.action,
        )
        return StaleFencingToken(row.operation_id, token=token, current=row.fencing_token)

    @staticmethod
    def _require_dispatching(row: Operation, target: OperationStatus) -> None:
        """Fenced writes (and renew) act on a dispatching operation only."""
        if row.status is not S.DISPATCHING:
            why = (
                "terminal states never move"
                if row.status.terminal
                else "only a dispatching operation moves by a fenced write"
            )
            raise IllegalTransition(row.operation_id, status=row.status, target=target, why=why)

    def _commit(
        self,
        old: Operation | None,
        new: Operation,
        kind: EventKind,
        *,
        actor: str,
        evidence: Evidence | None = None,
        detail: Any = None,
    ) -> Operation:
        key = (new.tenant_id, new.operation_id)
        log = self._events.setdefault(key, [])
        # Not validated (``core.model.unvalidated``): the record's values and the
        # transition's own arguments, each already of its field's type.
        event = unvalidated(
            OperationEvent,
            {
                "tenant_id": new.tenant_id,
                "operation_id": new.operation_id,
                "seq": new.record_version,
                "kind": kind,
                "from_status": None if old is None else old.status,
                "to_status": new.status,
                "actor": actor,
                "fencing_token": new.fencing_token,
                "evidence": evidence,
                "detail": detail,
                "at": new.updated_at,
                "event_id": len(self._feed) + 1,
            },
        )
        log.append(event)
        self._feed.append(event)
        self._rows[key] = new
        log_transition(new, event)
        return new

    def _move(
        self,
        row: Operation,
        target: OperationStatus,
        *,
        actor: str,
        evidence: Evidence | None = None,
        operator: str | None = None,
        detail: Any = None,
        **changes: Any,
    ) -> Operation:
        kind, new = moved(
            row, target, self._clock(), evidence=evidence, operator=operator, **changes
        )
        return self._commit(row, new, kind, actor=actor, evidence=evidence, detail=detail)

    # -- writes --------------------------------------------------------------

    def prepare(
        self,
        draft: OperationDraft,
        *,
        owner: LeaseOwner | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
    ) -> Prepared:
        return self.prepare_many([draft], owner=owner, lease_for=lease_for)[0]

    def prepare_many(
        self,
        drafts: Sequence[OperationDraft],
        *,
        owner: LeaseOwner | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
    ) -> list[Prepared]:
        with self._lock:
            self._require_setup()
            # Check every draft before writing any: all or nothing.
            first: dict[_Key, OperationDraft] = {}
            for draft in drafts:
                draft.payload_json()  # plain JSON, at most 1 MiB
                key = (draft.tenant_id, draft.operation_id)
                existing = self._rows.get(key)
                digest = (existing or first.setdefault(key, draft)).payload_digest
                if digest != draft.payload_digest:
                    raise PayloadMismatch(
                        draft.operation_id,
                        expected=digest,
                        actual=draft.payload_digest,
                    )
            out: list[Prepared] = []
            for draft in drafts:
                key = (draft.tenant_id, draft.operation_id)
                existing = self._rows.get(key)
                if existing is not None:
                    out.append(unvalidated(Prepared, {"operation": existing, "created": False}))
                    continue
                row = _new_row(draft, self._clock())
                self._commit(None, row, EventKind.PREPARE, actor="ledger")
                if owner is not None:
                    holder = owner.encode()
                    row = self._claimed(row, holder, lease_for, actor=holder)
                out.append(unvalidated(Prepared, {"operation": row, "created": True}))
            return out

    def approve(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        payload_digest: str,
        by: str,
        reason: str = "",
        answer: str | None = None,
        claimed_by: str | None = None,
        verified_by: str | None = None,
    ) -> Operation:
        if not by.strip():
            raise InvalidInput("an approval needs the approver's identity (by)")
        with self._lock:
            self._require_setup()
            row = self._row(tenant_id, operation_id)
            if row.payload_digest != payload_digest:
                raise PayloadMismatch(
                    operation_id, expected=row.payload_digest, actual=payload_digest
                )
            if row.status is not S.PREPARED:
                if row.status.terminal:
                    check_transition(operation_id, row.status, S.DISPATCHING)  # raises
                return row  # already past approval: idempotent
            detail = with_answer({"reason": reason, **who(claimed_by, verified_by)}, answer)
            return self._approved(row, by, detail)

    def _approved(self, row: Operation, by: str, detail: Any) -> Operation:
        """``row`` approved by ``by`` (its ``authorization_ref``), with its ``approve`` event:
        a person's answer (``approve``) and an operator's out-of-band approval alike."""
        new = row.model_copy(
            update={
                "authorization_ref": approval_ref(by),
                "record_version": row.record_version + 1,
                "updated_at": self._clock(),
            }
        )
        return self._commit(row, new, EventKind.APPROVE, actor=by, detail=detail)

    def _claimed(
        self, row: Operation, holder: str, lease_for: timedelta, *, actor: str
    ) -> Operation:
        """``row`` claimed by ``holder`` (an encoded ``LeaseOwner``) for ``lease_for``."""
        now = self._clock()
        return self._move(
            row,
            S.DISPATCHING,
            actor=actor,
            lease_owner=holder,
            lease_expires_at=now + lease_for,
            fencing_token=row.fencing_token + 1,
            attempts=row.attempts + 1,
            first_dispatched_at=row.first_dispatched_at or now,
            last_dispatched_at=now,
        )

    def claim(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        owner: LeaseOwner,
        lease_for: timedelta = DEFAULT_LEASE,
        actor: str | None = None,
    ) -> Operation:
        with self._lock:
            self._require_setup()
            row = self._row(tenant_id, operation_id)
            if row.status is S.DISPATCHING:
                raise LeaseHeld(
                    operation_id, owner=row.lease_owner, expires_at=row.lease_expires_at
                )
            holder = owner.encode()
            return self._claimed(row, holder, lease_for, actor=actor or holder)

    def renew(
        self, tenant_id: str, operation_id: str, *, token: int, lease_for: timedelta = DEFAULT_LEASE
    ) -> Operation:
        with self._lock:
            self._require_setup()
            row = self._row(tenant_id, operation_id)
            self._fence(row, token)
            self._require_dispatching(row, S.DISPATCHING)
            new = row.model_copy(update={"lease_expires_at": self._clock() + lease_for})
            self._rows[(tenant_id, operation_id)] = new
            return new

    def _fenced_move(
        self, tenant_id: str, operation_id: str, token: int, target: OperationStatus, **kw: Any
    ) -> Operation:
        with self._lock:
            self._require_setup()
            row = self._row(tenant_id, operation_id)
            self._fence(row, token)
            self._require_dispatching(row, target)
            return self._move(row, target, **kw)

    def confirm(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        token: int,
        result: Any = None,
        provider_result_id: str | None = None,
        provider_request_id: str | None = None,
        evidence: Evidence | None = None,
    ) -> Operation:
        json_text(result, what="result")
        return self._fenced_move(
            tenant_id,
            operation_id,
            token,
            S.CONFIRMED,
            actor="receipt" if evidence is None else evidence.source,
            evidence=evidence,
            result=result,
            provider_result_id=provider_result_id,
            provider_request_id=provider_request_id,
        )

    def confirm_many(
        self, confirmations: Sequence[Confirmation]
    ) -> builtins.list[Operation | EffectsError]:
        keys = [(c.tenant_id, c.operation_id) for c in confirmations]
        if len(set(keys)) != len(keys):
            raise InvalidInput("confirm_many names an operation twice")
        for c in confirmations:
            json_text(c.result, what="result")
        out: builtins.list[Operation | EffectsError] = []
        with self._lock:  # one "transaction"; each receipt stands or falls alone
            for c in confirmations:
                try:
                    receipt = {f.name: getattr(c, f.name) for f in dataclasses.fields(c)}
                    out.append(self.confirm(**receipt))
                except (StaleFencingToken, IllegalTransition, OperationNotFound) as exc:
                    out.append(exc)
        return out

    def reject(
        self,
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
    ) -> Operation:
        if token is None:
            with self._lock:
                self._require_setup()
                row = self._row(tenant_id, operation_id)
                if row.status.terminal:
                    check_transition(operation_id, row.status, S.REJECTED)  # raises
                if row.status is not S.PREPARED:
                    # Claimed since the caller looked: its view is stale.
                    raise self._refuse_stale(row, 0)
                return self._move(
                    row,
                    S.REJECTED,
                    actor=actor or "ledger",
                    evidence=evidence,
                    error=reason,
                    detail=with_answer(who(claimed_by, verified_by) or None, answer),
                )
        return self._fenced_move(
            tenant_id,
            operation_id,
            token,
            S.REJECTED,
            actor=actor or "provider",
            evidence=evidence,
            error=reason,
            detail=with_answer(who(claimed_by, verified_by) or None, answer),
        )

    def release(self, tenant_id: str, operation_id: str, *, token: int, reason: str) -> Operation:
        return self._fenced_move(
            tenant_id, operation_id, token, S.PREPARED, actor="provider", detail={"reason": reason}
        )

    def mark_unknown(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        token: int,
        reason: str,
        evidence: Evidence | None = None,
        actor: str | None = None,
    ) -> Operation:
        return self._fenced_move(
            tenant_id,
            operation_id,
            token,
            S.UNKNOWN,
            actor=actor or "runner",
            evidence=evidence,
            detail={"reason": reason},
            error=reason,
            fencing_token=token + 1,
        )

    def resolve(self, tenant_id: str, operation_id: str, resolution: Resolution) -> Operation:
        if resolution.decision is Decision.APPROVE:
            return self._approve_prepared(tenant_id, operation_id, resolution)
        target, evidence, operator = resolution_plan(resolution)
        if target is S.CONFIRMED:
            json_text(resolution.result, what="result")
        changes = resolved_columns(resolution, target, evidence)
        with self._lock:
            self._require_setup()
            row = self._row(tenant_id, operation_id)
            # An operator may also reject a prepared operation (out of band).
            prepared_too = target is S.REJECTED and operator is not None
            if row.status is not S.UNKNOWN and not (prepared_too and row.status is S.PREPARED):
                why = (
                    "terminal states never move"
                    if row.status.terminal
                    else "only an unknown operation is resolved"
                    " (a prepared one is approved or rejected)"
                )
                raise IllegalTransition(operation_id, status=row.status, target=target, why=why)
            return self._move(
                row,
                target,
                actor=resolution.by,
                evidence=evidence,
                operator=operator,
                detail=with_answer(resolution.detail(), resolution.answer),
                **changes,
            )

    def _approve_prepared(
        self, tenant_id: str, operation_id: str, resolution: Resolution
    ) -> Operation:
        """An operator's out-of-band approval: the next run dispatches without asking."""
        if resolution.evidence is not None and resolution.evidence.source != "operator":
            raise InvalidInput("only an operator approves; evidence approves nothing")
        with self._lock:
            self._require_setup()
            row = self._row(tenant_id, operation_id)
            if Decision.APPROVE not in operator_decisions(row):
                why = "terminal states never move" if row.status.terminal else AWAITS_APPROVAL
                raise IllegalTransition(operation_id, status=row.status, target=S.PREPARED, why=why)
            detail = with_answer(resolution.detail(), resolution.answer)
            return self._approved(row, resolution.by, detail)

    def record_evidence(
        self, tenant_id: str, operation_id: str, evidence: Evidence, answer: str | None = None
    ) -> Operation:
        with self._lock:
            self._require_setup()
            row = self._row(tenant_id, operation_id)
            now = self._clock()
            new = row.model_copy(
                update={
                    # A final record's evidence is only logged (``FINAL_STATUSES``).
                    "evidence_checked_at": row.evidence_checked_at if row.status.terminal else now,
                    "record_version": row.record_version + 1,
                    "updated_at": now,
                }
            )
            return self._commit(
                row,
                new,
                EventKind.EVIDENCE,
                actor=evidence.source,
                evidence=evidence,
                detail=with_answer(None, answer),
            )

    # -- queries -------------------------------------------------------------

    def bind_thread(self, workflow_id: str, tenant_id: str) -> str:
        if not workflow_id or not tenant_id:
            raise InvalidInput("bind_thread needs a thread id and a tenant id")
        with self._lock:
            self._require_setup()
            return self._threads.setdefault(workflow_id, tenant_id)

    def adopt(
        self, tenant_id: str, operation_id: str, *, origin: str, expected: str | None
    ) -> Operation | None:
        with self._lock:
            self._require_setup()
            key = (tenant_id, operation_id)
            op = self._rows.get(key)
            if op is None or op.origin != expected:
                return None
            op = self._rows[key] = op.model_copy(update={"origin": origin})
            return op

    def get(self, tenant_id: str, operation_id: str) -> Operation | None:
        with self._lock:
            self._require_setup()
            return self._rows.get((tenant_id, operation_id))

    def list(
        self,
        *,
        tenant_id: str | None = None,
        status: OperationStatus | str | None = None,
        action: str | None = None,
        updated_before: datetime | None = None,
        limit: int = 100,
        id_prefix: str | None = None,
    ) -> builtins.list[Operation]:
        wanted = coerce_status(status)
        with self._lock:
            self._require_setup()
            rows = [
                r
                for r in self._rows.values()
                if (tenant_id is None or r.tenant_id == tenant_id)
                and (wanted is None or r.status is wanted)
                and (action is None or r.action == action)
                and (updated_before is None or r.status_changed_at < updated_before)
                and (id_prefix is None or r.operation_id.startswith(id_prefix))
            ]
        rows.sort(key=lambda r: (r.status_changed_at, r.operation_id))
        return rows[:limit]

    def open_operations(
        self, tenant_id: str, *, action: str, target: str, limit: int = 10
    ) -> OpenOperations:
        if limit < 0:
            raise InvalidInput(f"limit must be >= 0, not {limit}")
        with self._lock:
            self._require_setup()
            rows = [
                r
                for r in self._rows.values()
                if r.tenant_id == tenant_id
                and r.action == action
                and r.target == target
                and r.status in _OPEN
            ]
        rows.sort(key=lambda r: (r.status_changed_at, r.operation_id))
        return OpenOperations(operations=rows[:limit], total=len(rows))

    def events(self, tenant_id: str, operation_id: str) -> builtins.list[OperationEvent]:
        with self._lock:
            self._require_setup()
            return list(self._events.get((tenant_id, operation_id), []))

    def feed(
        self, *, after_id: int = 0, tenant_id: str | None = None, limit: int = 100
    ) -> builtins.list[OperationEvent]:
        with self._lock:
            self._require_setup()
            return [e for e in self._feed[after_id:] if tenant_id in (None, e.tenant_id)][:limit]

    def stats(self, *, tenant_id: str | None = None) -> LedgerStats:
        with self._lock:
            self._require_setup()
            rows = [r for r in self._rows.values() if tenant_id in (None, r.tenant_id)]
            events = [
                e for (t, _), log in self._events.items() if tenant_id in (None, t) for e in log
            ]
        counts = dict.fromkeys(OperationStatus, 0)
        for r in rows:
            counts[r.status] += 1

        def oldest(status: OperationStatus) -> datetime | None:
            return min((r.status_changed_at for r in rows if r.status is status), default=None)

        reconciliation: dict[str, int] = {}
        for e in events:
            if e.evidence is not None and e.evidence.source not in ("operator", "receipt"):
                reconciliation[e.evidence.kind.value] = (
                    reconciliation.get(e.evidence.kind.value, 0) + 1
                )
        return LedgerStats(
            counts=counts,
            oldest_unknown_at=oldest(S.UNKNOWN),
            oldest_dispatching_at=oldest(S.DISPATCHING),
            reconciliation=reconciliation,
            operator_resolutions=sum(
                1
                for e in events
                if e.kind is EventKind.RESOLVE and e.evidence and e.evidence.source == "operator"
            ),
            stale_token_refusals=self._stale_refusals,
        )
