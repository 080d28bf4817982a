"""What a person sees and answers: ``interrupt()`` payloads and the answers to them.

Two requests, both plain JSON dicts carrying the ``operation_id`` they are about:

- a **review** (``kind: "effect_review"``) for an ``unknown`` operation nothing
  could resolve: its evidence, what a retry would risk, the decisions allowed
  (``confirm``, ``reject``, ``retry``);
- an **approval** (``kind: "effect_approval"``, status ``prepared``) before the
  first dispatch of an effect declared ``require_approval=True``. It also carries
  ``action_requests`` / ``review_configs`` in the shape of LangChain's
  ``HumanInTheLoopMiddleware`` so UIs built for it can show it.

Answers name the operation they decide::

    {"operation_id": "op-...", "decision": "confirm", "by": "alice", "reason": "...",
     "result": {...}}                                       # review
    {"operation_id": "op-...", "decision": "approve", "by": "alice", "reason": "..."}
    {"decisions": [{"type": "approve" | "reject" | "edit", ...}]}   # HITL shape

LangGraph matches resume values by position within a task, so position is
never identity: ``parse_answer`` keeps the named operation and the runner
applies an answer only to that operation. Every request also carries a
``request_id`` (the operation and its record version: one round); an answer
may echo it (``"request_id": ...``, beside either shape), and one that names an
earlier round decides nothing: the current request is asked instead. An invalid answer raises
``InvalidAnswer``, marked so LangGraph fails the run without saving it: the
interrupt can be answered again and nothing is lost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from langgraph_effects.core.model import Decision, Evidence, Operation, ProviderContract
from langgraph_effects.core.plan import ResendRisk, key_expires_at, resend_risk
from langgraph_effects.errors import InvalidAnswer

__all__ = [
    "APPROVAL_KIND",
    "REVIEW_KIND",
    "Answer",
    "InvalidAnswer",
    "approval_request",
    "parse_answer",
    "review_request",
]

REVIEW_KIND = "effect_review"
APPROVAL_KIND = "effect_approval"
RequestKind = Literal["review", "approval"]

_REVIEW_DECISIONS = (Decision.CONFIRM, Decision.REJECT, Decision.RETRY)
_APPROVAL_DECISIONS = (Decision.APPROVE, Decision.REJECT)


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """A parsed answer. ``operation_id`` is None only when the answer named none."""

    operation_id: str | None
    decision: Decision
    by: str
    reason: str = ""
    result: Any = None
    edited_args: dict[str, Any] | None = None
    """An ``edit``: the reviewer's arguments, a new call and so a new operation."""


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _evidence_json(evidence: Evidence) -> dict[str, Any]:
    return {
        "kind": evidence.kind.value,
        "summary": evidence.summary,
        "source": evidence.source,
        "provider_result_id": evidence.provider_result_id,
        "observed_at": evidence.observed_at.isoformat(),
    }


def retry_risk(op: Operation, contract: ProviderContract | None, now: datetime) -> dict[str, Any]:
    """What resending this operation would risk, for a person deciding on ``retry``.

    The rule is ``core.plan.resend_risk``: the key counts only if the record
    says the provider was given one; its expiry is the stricter of the
    record's and the live contract's (``core.plan.key_expires_at``).
    """
    risk = resend_risk(op, contract, now)
    expires = key_expires_at(op, contract)
    match risk:
        case ResendRisk.DEDUPLICATED:
            summary = (
                f"the provider deduplicates by idempotency key {op.idempotency_key!r} until "
                f"{_iso(expires)}: a retry cannot apply the effect twice"
            )
        case ResendRisk.WINDOW_CLOSED:
            summary = (
                f"the provider's key window closed at {_iso(expires)}: a retry may apply "
                "the effect a second time"
            )
        case ResendRisk.NOT_SENT:
            summary = "never sent: a first dispatch cannot apply the effect twice"
        case ResendRisk.NO_PROMISE | ResendRisk.NO_KEY:
            summary = "the provider honours no idempotency key: a retry may apply the effect twice"
    return {
        "provider_honours_key": risk in (ResendRisk.DEDUPLICATED, ResendRisk.WINDOW_CLOSED),
        "key_window_open": risk is ResendRisk.DEDUPLICATED,
        "key_expires_at": _iso(expires),
        "duplicate_possible": risk not in (ResendRisk.DEDUPLICATED, ResendRisk.NOT_SENT),
        "summary": summary,
    }


def review_request(
    op: Operation,
    *,
    tool_name: str,
    evidence: Sequence[Evidence],
    contract: ProviderContract | None,
    now: datetime,
    allow_retry: bool = True,
) -> dict[str, Any]:
    """The interrupt value asking a person to resolve an ``unknown`` operation."""
    allowed = [d.value for d in _REVIEW_DECISIONS if allow_retry or d is not Decision.RETRY]
    return {
        "kind": REVIEW_KIND,
        "operation_id": op.operation_id,
        "tenant_id": op.tenant_id,
        "workflow_id": op.workflow_id,
        "tool_call_id": op.tool_call_id,
        "tool": tool_name,
        "action": op.action,
        "target": op.target,
        "status": op.status.value,
        "attempts": op.attempts,
        "idempotency_key": op.idempotency_key,
        "payload": op.payload if op.payload_stored else None,
        "payload_digest": op.payload_digest,
        "last_error": op.error,
        "first_dispatched_at": _iso(op.first_dispatched_at),
        "last_dispatched_at": _iso(op.last_dispatched_at),
        "evidence": [_evidence_json(e) for e in evidence],
        "retry_risk": retry_risk(op, contract, now),
        "allowed_decisions": allowed,
        "answer_with": {
            "operation_id": op.operation_id,
            "decision": " | ".join(allowed),
            "by": "<who decides>",
            "reason": "<why>",
            "result": "<optional JSON: the provider's result, for confirm>",
        },
    }


def approval_request(op: Operation, *, tool_name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The interrupt value asking a person to approve a first dispatch.

    Carries ``action_requests`` / ``review_configs`` like LangChain's
    ``HumanInTheLoopMiddleware``, so its UIs can show and answer it.
    """
    description = (
        f"Approve {op.action} on {op.target!r} (operation {op.operation_id}, "
        f"payload digest {op.payload_digest[:12]}…)?"
    )
    return {
        "kind": APPROVAL_KIND,
        "operation_id": op.operation_id,
        "tenant_id": op.tenant_id,
        "workflow_id": op.workflow_id,
        "tool_call_id": op.tool_call_id,
        "tool": tool_name,
        "action": op.action,
        "target": op.target,
        "status": op.status.value,
        "attempts": op.attempts,
        "args": dict(args),
        "payload_digest": op.payload_digest,
        "allowed_decisions": [d.value for d in _APPROVAL_DECISIONS] + ["edit"],
        "action_requests": [{"name": tool_name, "args": dict(args), "description": description}],
        "review_configs": [
            {"action_name": tool_name, "allowed_decisions": ["approve", "edit", "reject"]}
        ],
    }


def _hitl_decision(value: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The single HITL decision inside ``{"decisions": [...]}`` or a bare ``{"type": ...}``."""
    if "decisions" in value:
        decisions = value["decisions"]
        if not isinstance(decisions, list) or len(decisions) != 1:
            raise InvalidAnswer(
                "an effect approval decides one call: answer {'decisions': [one decision]}"
            )
        decision = decisions[0]
        if not isinstance(decision, Mapping):
            raise InvalidAnswer("a HITL decision must be a dict with a 'type'")
        return decision
    if "type" in value and "decision" not in value:
        return value
    return None


def parse_answer(value: Any, *, tool_name: str, kind: RequestKind | None = None) -> Answer:
    """Read a resume value as an answer to a review or an approval (``kind=None``: either).

    Which decisions fit is finally checked against the named operation's
    status by the runner (an answer may name a sibling operation).

    Raises:
        InvalidAnswer: not a dict, an unknown decision, a decision not allowed
            for this kind of request, or no ``by`` on a native answer.
    """
    if not isinstance(value, Mapping):
        raise InvalidAnswer(f"an answer must be a dict, got {type(value).__name__}")
    allowed: tuple[Decision, ...] = (
        _APPROVAL_DECISIONS
        if kind == "approval"
        else _REVIEW_DECISIONS
        if kind == "review"
        else (*_REVIEW_DECISIONS, Decision.APPROVE)
    )
    op_id = value.get("operation_id")
    if op_id is not None and not isinstance(op_id, str):
        raise InvalidAnswer("operation_id must be a string")
    hitl = _hitl_decision(value)
    if hitl is not None:
        if kind == "review":
            raise InvalidAnswer(
                "this is a review of an unknown operation: answer with "
                "{'operation_id', 'decision': 'confirm' | 'reject' | 'retry', 'by', 'reason'}",
                operation_id=op_id,
            )
        by = str(hitl.get("by") or value.get("by") or "human-in-the-loop")
        match hitl.get("type"):
            case "approve":
                return Answer(operation_id=op_id, decision=Decision.APPROVE, by=by)
            case "reject":
                reason = str(hitl.get("message") or "rejected by the reviewer")
                return Answer(operation_id=op_id, decision=Decision.REJECT, by=by, reason=reason)
            case "edit":
                action = hitl.get("edited_action")
                if not isinstance(action, Mapping) or not isinstance(action.get("args"), Mapping):
                    raise InvalidAnswer("an edit needs edited_action: {'name', 'args': {...}}")
                if action.get("name", tool_name) != tool_name:
                    raise InvalidAnswer(
                        f"an edit cannot switch tools ({tool_name!r} -> {action.get('name')!r})"
                    )
                return Answer(
                    operation_id=op_id,
                    decision=Decision.APPROVE,
                    by=by,
                    reason="edited by the reviewer",
                    edited_args=dict(action["args"]),
                )
            case other:
                raise InvalidAnswer(
                    f"decision type {other!r} is not allowed here; use approve, edit or reject"
                )
    raw = value.get("decision")
    try:
        decision = Decision(str(raw))
    except ValueError:
        raise InvalidAnswer(
            f"unknown decision {raw!r}; allowed: {', '.join(d.value for d in allowed)}",
            operation_id=op_id,
        ) from None
    if decision not in allowed:
        raise InvalidAnswer(
            f"decision {decision.value!r} does not answer this {kind}; "
            f"allowed: {', '.join(d.value for d in allowed)}",
            operation_id=op_id,
        )
    author = value.get("by")
    if not isinstance(author, str) or not author.strip():
        raise InvalidAnswer("an answer needs 'by': who decided", operation_id=op_id)
    why = value.get("reason") or ""
    if not isinstance(why, str):
        raise InvalidAnswer("'reason' must be a string", operation_id=op_id)
    return Answer(
        operation_id=op_id, decision=decision, by=author, reason=why, result=value.get("result")
    )
