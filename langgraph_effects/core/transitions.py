"""The state machine, as data, and the one function that enforces it (ARCHITECTURE.md).

::

    prepared ──claim──▶ dispatching ──confirm──▶ confirmed
        │                   │  ├──reject (definitive)──▶ rejected
        │                   │  └──release (transient, provably not applied)──▶ prepared
        │                   └──mark_unknown (timeout, lost response, dead lease)──▶ unknown
        └──reject (authorization revoked, approval refused)──▶ rejected
    unknown ──resolve (conclusive evidence or operator)──▶ confirmed | rejected
    unknown ──claim (safe retry under the provider's key window)──▶ dispatching
    unknown ──resolve (operator-authorized retry)──▶ prepared ──claim──▶ dispatching

``confirmed`` and ``rejected`` never move. Nothing turns ``unknown`` into
``rejected`` without conclusive evidence or an operator.
"""

from __future__ import annotations

from datetime import datetime
from types import MappingProxyType
from typing import Any

from langgraph_effects.core.model import (
    TERMINAL,
    EventKind,
    Evidence,
    EvidenceKind,
    Operation,
    OperationStatus,
    unvalidated,
)
from langgraph_effects.errors import IllegalTransition

__all__ = ["TRANSITIONS", "check_transition", "moved"]

S = OperationStatus

TRANSITIONS: MappingProxyType[tuple[OperationStatus, OperationStatus], EventKind] = (
    MappingProxyType(
        {
            (S.PREPARED, S.DISPATCHING): EventKind.CLAIM,
            (S.PREPARED, S.REJECTED): EventKind.REJECT,
            (S.DISPATCHING, S.CONFIRMED): EventKind.CONFIRM,
            (S.DISPATCHING, S.REJECTED): EventKind.REJECT,
            (S.DISPATCHING, S.PREPARED): EventKind.RELEASE,
            (S.DISPATCHING, S.UNKNOWN): EventKind.MARK_UNKNOWN,
            (S.UNKNOWN, S.CONFIRMED): EventKind.RESOLVE,
            (S.UNKNOWN, S.REJECTED): EventKind.RESOLVE,
            (S.UNKNOWN, S.DISPATCHING): EventKind.CLAIM,
            (S.UNKNOWN, S.PREPARED): EventKind.RESOLVE,
        }
    )
)


def check_transition(
    operation_id: str,
    current: OperationStatus,
    target: OperationStatus,
    *,
    evidence: Evidence | None = None,
    operator: str | None = None,
) -> EventKind:
    """Return the event kind of ``current -> target`` or raise ``IllegalTransition``.

    ``unknown -> rejected`` additionally needs conclusive rejecting evidence or
    an operator; ``unknown -> confirmed`` needs confirming evidence or an operator.
    """
    kind = TRANSITIONS.get((current, target))
    if kind is None:
        why = "terminal states never move" if current.terminal else "not in the transition table"
        raise IllegalTransition(operation_id, status=current, target=target, why=why)
    if kind is EventKind.RESOLVE and operator is None:
        if target is S.PREPARED:
            raise IllegalTransition(
                operation_id,
                status=current,
                target=target,
                why="only an operator may order a retry",
            )
        wanted = EvidenceKind.CONFIRMED if target is S.CONFIRMED else EvidenceKind.REJECTED
        if evidence is None or evidence.kind is not wanted:
            raise IllegalTransition(
                operation_id,
                status=current,
                target=target,
                why=f"resolving unknown needs {wanted.value} evidence or an operator",
            )
    return kind


def moved(
    row: Operation,
    target: OperationStatus,
    now: datetime,
    *,
    evidence: Evidence | None = None,
    operator: str | None = None,
    **changes: Any,
) -> tuple[EventKind, Operation]:
    """The event kind of ``row -> target`` at ``now``, and the record the move writes.

    The reference of what every transition does to a record (``InMemoryLedger``
    writes exactly this; the SQL programs write the same columns): a new version,
    the status timestamps, the lease released off ``dispatching``, ``resolved_at``
    on a terminal state, ``evidence_checked_at`` with evidence. ``changes`` are the
    transition's own columns (``result``, ``provider_result_id``, ...).

    Raises:
        IllegalTransition: as ``check_transition``.
    """
    values = row.__dict__
    kind = check_transition(
        values["operation_id"], values["status"], target, evidence=evidence, operator=operator
    )
    # ``row``'s values with the move's, then the transition's own: every key is one of
    # ``row``'s, so the declaration order stays, and nothing is validated, as
    # ``model_copy`` validates nothing (``unvalidated``).
    values = {
        **values,
        "status": target,
        "record_version": values["record_version"] + 1,
        "updated_at": now,
        "status_changed_at": now,
    }
    if target in TERMINAL:
        values["resolved_at"] = now
    if target is not S.DISPATCHING:
        values["lease_owner"] = values["lease_expires_at"] = None
    if evidence is not None:
        values["evidence_checked_at"] = now
    values.update(changes)
    return kind, unvalidated(Operation, values)
