"""``resolve``: an ``unknown`` operation decided on conclusive evidence or by an operator,
and an operator's out-of-band approval or rejection of a ``prepared`` one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from langgraph_effects.core.actors import approval_ref
from langgraph_effects.core.model import (
    Decision,
    EventKind,
    Evidence,
    EvidenceKind,
    Operation,
    OperationStatus,
    Resolution,
)
from langgraph_effects.core.plan import AWAITS_APPROVAL, operator_decisions
from langgraph_effects.core.transitions import check_transition
from langgraph_effects.errors import IllegalTransition, InvalidInput
from langgraph_effects.ledger._programs import (
    APPROVE,
    REJECT,
    RESOLVE,
    get_row,
    illegal,
    load_operation,
    not_found,
    transition,
)
from langgraph_effects.ledger._values import json_text, text, with_answer
from langgraph_effects.ledger.engine import Dialect, Program, Result, Statements

S = OperationStatus


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


def resolved_columns(
    resolution: Resolution, target: OperationStatus, evidence: Evidence
) -> dict[str, Any]:
    """The record's columns a resolution to ``target`` sets besides its status, as values:
    a confirmation's result (the resolution's, else its evidence's) and provider result id,
    a rejection's error (the reason, else the evidence's summary); a retry, none. Every
    ledger writes these (the SQL ledgers as stored text, ``resolve`` below)."""
    if target is S.CONFIRMED:
        return {
            "result": resolution.result if resolution.result is not None else evidence.result,
            "provider_result_id": resolution.provider_result_id or evidence.provider_result_id,
        }
    if target is S.REJECTED:
        return {"error": resolution.reason or evidence.summary}
    return {}


def resolve(
    dialect: Dialect,
    clock: Callable[[], datetime],
    /,
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
            return not_found(tenant_id, operation_id)
        if prepared_too and op.status is S.PREPARED:
            return _IsPrepared()
        if op.status is not S.UNKNOWN:
            why = "only an unknown operation is resolved"
            if op.status is S.PREPARED:
                why += " (an operator approves or rejects a prepared one)"
            return illegal(op, target, why)
        return refusal

    if refusal is not None:
        # Refused whatever the row says; read it only to name the precise error.
        def refuse() -> Statements[Result[Operation]]:
            current = yield from get_row(tenant_id, operation_id)
            verdict = diagnose(None if current is None else load_operation(dialect, current))
            raise verdict or refusal

        return Program(refuse(), writes=False)

    columns = resolved_columns(resolution, target, evidence)
    values: dict[str, Any] = {
        "to_status": target.value,
        "from_status": S.UNKNOWN.value,
        "result": json_text(columns.get("result"), what="result"),
        "provider_result_id": columns.get("provider_result_id"),
        "error": text(columns.get("error")),
    }
    move = transition(
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
            return not_found(tenant_id, operation_id)
        if op.status is S.PREPARED:
            return None
        return illegal(op, S.REJECTED, "it left prepared while the rejection was written")

    reject_prepared = transition(
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
    changes under an operation id). Only what ``core.plan.operator_decisions``
    allows is approved: a ``prepared`` operation never sent nor approved; any other
    is refused (dispatched, decided, rejected, approved or ordered to retry meanwhile).
    """
    if resolution.evidence is not None and resolution.evidence.source != "operator":
        raise InvalidInput("only an operator approves; evidence approves nothing")

    def diagnose(op: Operation | None) -> Exception | None:
        if op is None:
            return not_found(tenant_id, operation_id)
        if Decision.APPROVE not in operator_decisions(op):
            return illegal(op, S.PREPARED, AWAITS_APPROVAL)
        return None

    write = transition(
        dialect,
        clock,
        APPROVE,
        tenant_id,
        operation_id,
        {
            "payload_digest": None,
            "authorization_ref": approval_ref(resolution.by),
            "from_status": S.PREPARED.value,
        },
        kind=EventKind.APPROVE,
        actor=resolution.by,
        detail=with_answer(resolution.detail(), resolution.answer),
        diagnose=diagnose,
    )

    def steps() -> Statements[Result[Operation]]:
        # The precondition (core.plan.operator_decisions) is read first, in the write's
        # transaction; the write itself still requires the record prepared.
        current = yield from get_row(tenant_id, operation_id)
        refusal = diagnose(None if current is None else load_operation(dialect, current))
        if refusal is not None:
            raise refusal
        return (yield from write.statements)

    return replace(write, statements=steps(), atomic=True)
