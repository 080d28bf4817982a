"""The effect lifecycles the benchmarks drive through a ledger, and their drafts.

One place builds the drafts and runs the three shapes the node uses, so every
benchmark measures the same thing:

- ``three_step``: ``prepare`` -> ``claim`` -> ``confirm`` (three commits);
- ``fused``: ``prepare(owner=...)`` -> ``confirm`` (two commits; what the node
  does for a first-time call);
- ``batch``: ``prepare_many(owner=...)`` for the parallel calls of one
  AIMessage, then one ``confirm`` per call;
- ``batch_confirmed``: the same, the receipts recorded by one ``confirm_many``;
- ``replay``: ``prepare`` of an already confirmed operation (what a resumed
  node does before returning the recorded result).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph_effects.core.digest import canonical_json, payload_digest
from langgraph_effects.core.ids import idempotency_key, operation_id
from langgraph_effects.core.model import LeaseOwner, OperationDraft, OperationStatus
from langgraph_effects.ledger.base import Ledger

__all__ = [
    "TENANT",
    "batch",
    "batch_confirmed",
    "draft",
    "drafts",
    "fused",
    "replay",
    "three_step",
]

TENANT = "bench"
ACTION = "crm.create_ticket"


def draft(key: str) -> OperationDraft:
    """A realistic draft: digest, opaque id and idempotency key derived as the node does,
    which canonicalises the payload once and hands the text to the draft (``decide.call``)."""
    payload = {"title": f"ticket {key}", "priority": "high", "customer": "c-42"}
    canonical = canonical_json(payload)
    digest = payload_digest(ACTION, 1, "crm", payload, canonical=canonical)
    op_id = operation_id(
        tenant_id=TENANT,
        workflow_id=f"thread-{key}",
        tool_call_id=f"call-{key}",
        action=ACTION,
        payload_digest=digest,
    )
    return OperationDraft.with_payload_json(
        canonical.decode(),
        tenant_id=TENANT,
        operation_id=op_id,
        workflow_id=f"thread-{key}",
        action=ACTION,
        target="crm",
        payload_digest=digest,
        payload=payload,
        idempotency_key=idempotency_key(op_id),
        tool_call_id=f"call-{key}",
        provider="crm",
    )


def drafts(prefix: str, n: int) -> list[OperationDraft]:
    return [draft(f"{prefix}-{i}") for i in range(n)]


def _result(d: OperationDraft) -> dict[str, Any]:
    return {"ticket_id": d.operation_id[-8:], "status": "open"}


def three_step(ledger: Ledger, d: OperationDraft, owner: LeaseOwner) -> None:
    ledger.prepare(d)
    op = ledger.claim(d.tenant_id, d.operation_id, owner=owner)
    ledger.confirm(d.tenant_id, d.operation_id, token=op.fencing_token, result=_result(d))


def fused(ledger: Ledger, d: OperationDraft, owner: LeaseOwner) -> None:
    prepared = ledger.prepare(d, owner=owner)
    token = prepared.operation.fencing_token
    ledger.confirm(d.tenant_id, d.operation_id, token=token, result=_result(d))


def batch(ledger: Ledger, ds: Sequence[OperationDraft], owner: LeaseOwner) -> None:
    for prepared in ledger.prepare_many(ds, owner=owner):
        op = prepared.operation
        ledger.confirm(op.tenant_id, op.operation_id, token=op.fencing_token, result={"ok": 1})


def batch_confirmed(ledger: Ledger, ds: Sequence[OperationDraft], owner: LeaseOwner) -> None:
    """``prepare_many`` then one ``confirm_many`` for the whole batch (when the ledger has it)."""
    from langgraph_effects.ledger.base import Confirmation

    prepared = ledger.prepare_many(ds, owner=owner)
    receipts = [
        Confirmation(
            tenant_id=p.operation.tenant_id,
            operation_id=p.operation.operation_id,
            token=p.operation.fencing_token,
            result={"ok": 1},
        )
        for p in prepared
    ]
    outcomes = ledger.confirm_many(receipts)  # type: ignore[attr-defined]
    failed = [o for o in outcomes if isinstance(o, Exception)]
    if failed:
        raise AssertionError(f"confirm_many refused receipts: {failed!r}")


def replay(ledger: Ledger, d: OperationDraft, owner: LeaseOwner) -> None:
    prepared = ledger.prepare(d, owner=owner)
    if prepared.created or prepared.operation.status is not OperationStatus.CONFIRMED:
        raise AssertionError(f"expected a confirmed operation to replay, got {prepared!r}")
