"""What a person sees and answers: ``interrupt()`` payloads and the answers to them.

Two requests, both plain JSON dicts carrying the ``operation_id`` they are about:

- a **review** (``kind: "effect_review"``) for an ``unknown`` operation nothing
  could resolve: its evidence, what a retry would risk, the decisions allowed
  (``confirm``, ``reject``, ``retry``);
- an **approval** (``kind: "effect_approval"``, status ``prepared``) before the
  first dispatch of an effect declared ``require_approval=True``;
- the **approvals** of one AIMessage in one request (``kind: "effect_approvals"``,
  ``approvals="batched"``, see ``decide.approvals``), with ``operation_ids``.

All three carry ``action_requests`` / ``review_configs`` in the shape of LangChain's
``HumanInTheLoopMiddleware``, so UIs built for it (Agent Chat UI) show and answer
them; a review maps its decisions onto that shape (see ``review_request``).

Answers name the operation they decide::

    {"operation_id": "op-...", "decision": "confirm", "by": "alice", "reason": "...",
     "result": {...}}                                       # review
    {"operation_id": "op-...", "decision": "approve", "by": "alice", "reason": "..."}
    {"decisions": [{"type": "approve" | "reject" | "edit", ...}]}   # HITL shape
    [{"type": "accept" | "edit" | "response" | "ignore", "args": ...}]  # the older HITL UI

Who decided: the server's authenticated user when there is one (LangGraph
Server puts it in ``config["configurable"]["langgraph_auth_user"]``), else the
answer's ``by``; an answer with neither is refused unless the node accepts
anonymous answers (``decide.answers.identify``). Every request also lists the
other unresolved operations on its tenant, action and target
(``open_operations``: the first ``OPEN_SHOWN``; ``open_operations_total``).

LangGraph matches resume values by position within a task, so position is
never identity: ``parse_answer`` keeps the named operation and the runner
applies an answer only to that operation. Every request also carries a
``request_id`` (one round: what the person decides, ``decide.answers.round_id``); an
answer may echo it (``"request_id": ...``, beside either shape). One that names an
earlier round is not applied: the current request is asked again with a ``notice``
saying why (``with_notice``); one that names no request of ours is refused. An invalid answer raises
``InvalidAnswer``, marked so LangGraph does not save it: the request is asked
again under the same interrupt id, saying why (``decide.drive``), and nothing is lost.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from langgraph_effects.core.model import Decision, Evidence, Operation, ProviderContract
from langgraph_effects.core.plan import ResendRisk, key_expires_at, resend_risk
from langgraph_effects.errors import InvalidAnswer

__all__ = [
    "APPROVALS_KIND",
    "APPROVAL_KIND",
    "OPEN_SHOWN",
    "REVIEW_KIND",
    "Answer",
    "InvalidAnswer",
    "OpenOnTarget",
    "approval_request",
    "approvals_request",
    "hitl_answer",
    "hitl_decisions",
    "hitl_misfit",
    "parse_answer",
    "review_request",
    "with_notice",
]

REVIEW_KIND = "effect_review"
APPROVAL_KIND = "effect_approval"
APPROVALS_KIND = "effect_approvals"
RequestKind = Literal["review", "approval"]

_REVIEW_DECISIONS = (Decision.CONFIRM, Decision.REJECT, Decision.RETRY)
_APPROVAL_DECISIONS = (Decision.APPROVE, Decision.REJECT)


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """A parsed answer. ``operation_id`` is None only when the answer named none."""

    operation_id: str | None
    decision: Decision
    by: str | None
    """Who decided: the name the answer gave (None: it gave none), until
    ``decide.answers.identify`` sets the actor the ledger records."""
    reason: str = ""
    result: Any = None
    edited_args: dict[str, Any] | None = None
    """An ``edit``: the reviewer's arguments, a new call and so a new operation."""
    claimed_by: str | None = None
    """The name the answer gave, when the recorded actor is another (the server's user)."""
    verified_by: str | None = None
    """The identity the server verified (``langgraph-auth:NAME``), if any."""


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


OPEN_SHOWN = 10
"""How many other unresolved operations on the same target a request lists."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenOnTarget:
    """The other unresolved operations on a request's action and target (not its own)."""

    operations: Sequence[Operation] = ()
    """The first ``OPEN_SHOWN``, the oldest status first."""
    total: int = 0
    """How many there are in all."""


def _open_json(others: OpenOnTarget) -> list[dict[str, Any]]:
    return [
        {
            "operation_id": o.operation_id,
            "status": o.status.value,
            "workflow_id": o.workflow_id,
            "since": o.status_changed_at.isoformat(),
            "summary": (
                f"{o.action} {o.target} is still {o.status.value} since "
                f"{o.status_changed_at:%Y-%m-%d %H:%M} UTC (operation {o.operation_id}, "
                f"thread {o.workflow_id})"
            ),
        }
        for o in others.operations
    ]


def _open_note(others: OpenOnTarget) -> str:
    """One line for a UI's description: what else is unresolved on this target."""
    if not others.total:
        return ""
    shown = "; ".join(item["summary"] for item in _open_json(others)[:3])
    more = others.total - min(3, len(others.operations))
    return (
        f" WARNING: {others.total} other unresolved operation(s) on this target: {shown}"
        + (f"; and {more} more" if more > 0 else "")
        + "."
    )


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
    open_on_target: OpenOnTarget | None = None,
) -> dict[str, Any]:
    """The interrupt value asking a person to resolve an ``unknown`` operation.

    ``open_on_target``: the other unresolved operations of the same tenant,
    action and target (``open_operations``, ``open_operations_total``).

    Also in the HITL shape (``action_requests`` / ``review_configs``), so a UI built
    for LangChain's ``HumanInTheLoopMiddleware`` shows and answers it: the action is
    the tool with arguments ``{"outcome": "unknown", "result": ""}``, the description
    gives the evidence and what a retry would risk, and the decisions map as
    ``edit`` (outcome ``"confirmed"``) = confirm, ``reject`` = reject, ``approve`` =
    retry, offered only when a retry cannot apply the effect twice.
    """
    others = open_on_target or OpenOnTarget()
    allowed = [d.value for d in _REVIEW_DECISIONS if allow_retry or d is not Decision.RETRY]
    risk = retry_risk(op, contract, now)
    safe_retry = allow_retry and not risk["duplicate_possible"]
    return {
        "kind": REVIEW_KIND,
        **_asked_about(op, tool_name),
        "idempotency_key": op.idempotency_key,
        "payload": op.payload if op.payload_stored else None,
        "payload_digest": op.payload_digest,
        "last_error": op.error,
        "first_dispatched_at": _iso(op.first_dispatched_at),
        "last_dispatched_at": _iso(op.last_dispatched_at),
        "evidence": [_evidence_json(e) for e in evidence],
        "retry_risk": risk,
        "open_operations": _open_json(others),
        "open_operations_total": others.total,
        "allowed_decisions": allowed,
        "answer_with": {
            "operation_id": op.operation_id,
            "decision": " | ".join(allowed),
            "by": "<who decides>",
            "reason": "<why>",
            "result": "<optional JSON: the provider's result, for confirm>",
        },
        "action_requests": [
            {
                "name": tool_name,
                "args": {"outcome": "unknown", "result": ""},
                "description": _review_description(op, evidence, risk, safe_retry=safe_retry),
            }
        ],
        "review_configs": [
            {
                "action_name": tool_name,
                "allowed_decisions": (["approve"] if safe_retry else []) + ["edit", "reject"],
            }
        ],
    }


def _asked_about(op: Operation, tool_name: str) -> dict[str, Any]:
    """What both requests say first of the operation they ask about, in this order."""
    return {
        "operation_id": op.operation_id,
        "tenant_id": op.tenant_id,
        "workflow_id": op.workflow_id,
        "tool_call_id": op.tool_call_id,
        "tool": tool_name,
        "action": op.action,
        "target": op.target,
        "status": op.status.value,
        "attempts": op.attempts,
    }


def _review_description(
    op: Operation, evidence: Sequence[Evidence], risk: Mapping[str, Any], *, safe_retry: bool
) -> str:
    seen = "; ".join(f"{e.kind.value}: {e.summary}" for e in evidence) or "none"
    retry = (
        "Approve: send it again under the same idempotency key."
        if safe_retry
        else "A retry is not offered here: it could apply the effect twice "
        "(an operator may still order one)."
    )
    return (
        f"The outcome of {op.action} on {op.target!r} is unknown (operation "
        f"{op.operation_id}, {op.attempts} attempt(s)"
        + (f"; last error: {op.error}" if op.error else "")
        + f").\nEvidence: {seen}.\nRetry risk: {risk['summary']}.\n"
        'Edit: set outcome to "confirmed" if it happened (optionally paste the '
        "provider's result). Reject: it did not happen (say why). " + retry
    )


def approval_request(
    op: Operation,
    *,
    tool_name: str,
    args: Mapping[str, Any],
    open_on_target: OpenOnTarget | None = None,
) -> dict[str, Any]:
    """The interrupt value asking a person to approve a first dispatch.

    Carries ``action_requests`` / ``review_configs`` like LangChain's
    ``HumanInTheLoopMiddleware``, so its UIs can show and answer it.
    ``open_on_target``: the other unresolved operations of the same tenant,
    action and target (``open_operations``, ``open_operations_total``; the
    description a HITL UI shows warns of them too).
    """
    others = open_on_target or OpenOnTarget()
    return {
        "kind": APPROVAL_KIND,
        **_asked_about(op, tool_name),
        "args": dict(args),
        "payload_digest": op.payload_digest,
        "open_operations": _open_json(others),
        "open_operations_total": others.total,
        "allowed_decisions": [d.value for d in _APPROVAL_DECISIONS] + ["edit"],
        "action_requests": [_action_request(op, tool_name, args, others)],
        "review_configs": [
            {"action_name": tool_name, "allowed_decisions": list(_HITL_APPROVAL_DECISIONS)}
        ],
    }


def _action_request(
    op: Operation,
    tool_name: str,
    args: Mapping[str, Any],
    others: OpenOnTarget | None = None,
) -> dict[str, Any]:
    description = (
        f"Approve {op.action} on {op.target!r} (operation {op.operation_id}, "
        f"payload digest {op.payload_digest[:12]}…)?"
    ) + _open_note(others or OpenOnTarget())
    return {"name": tool_name, "args": dict(args), "description": description}


def approvals_request(
    items: Sequence[tuple[Operation, str, Mapping[str, Any]]],
    *,
    request_id: str,
    open_on_target: Sequence[OpenOnTarget] | None = None,
) -> dict[str, Any]:
    """One interrupt value asking a person to approve several first dispatches at once.

    Exactly the shape of LangChain's ``HumanInTheLoopMiddleware`` in batched mode
    (``action_requests`` / ``review_configs``, one each per call, in the order of
    the AIMessage's calls), answered with ``{"decisions": [...]}`` in that order.
    ``operation_ids`` and ``requests`` (each call's own approval request) say which
    operation each position decides; ``request_id`` names this round.

    Args:
        items: ``(record, tool name, arguments)`` of each call awaiting approval.
        request_id: the round (``decide.approvals``).
        open_on_target: per call, the other unresolved operations on its action and
            target (each call's request and its action request's description show them).
    """
    others = list(open_on_target) if open_on_target is not None else [None] * len(items)
    requests = [
        approval_request(op, tool_name=name, args=args, open_on_target=found)
        for (op, name, args), found in zip(items, others, strict=True)
    ]
    return {
        "kind": APPROVALS_KIND,
        "request_id": request_id,
        "operation_ids": [op.operation_id for op, _, _ in items],
        "requests": requests,
        "action_requests": [r["action_requests"][0] for r in requests],
        "review_configs": [r["review_configs"][0] for r in requests],
        "answer_with": {
            "decisions": "[one per action request, in order: {'type': 'approve'} | "
            "{'type': 'reject', 'message': '<why>'} | "
            "{'type': 'edit', 'edited_action': {'name': ..., 'args': {...}}}]",
            "by": "<who decides>",
            "request_id": request_id,
        },
    }


def with_notice(request: Mapping[str, Any], notice: str) -> dict[str, Any]:
    """``request`` asked again with why the person's last answer did not apply.

    The text goes into ``notice`` and, for UIs built for LangChain's
    ``HumanInTheLoopMiddleware`` (which show only the action requests), in
    front of every action request's description.
    """
    return {
        **request,
        "notice": notice,
        "action_requests": [
            {**a, "description": f"{notice}\n\n{a.get('description', '')}"}
            for a in request.get("action_requests", [])
        ],
    }


def hitl_misfit(value: Any, request: Mapping[str, Any]) -> str | None:
    """What keeps ``value`` from answering ``request``, a batched request of LangChain's
    ``HumanInTheLoopMiddleware`` (``{"action_requests", "review_configs"}``), in words a
    person reads; None: nothing found (the middleware may still refuse it).

    HITL checks its answer only after ``interrupt()`` saved it, and raises on it; its
    checks are said here first: one decision per action request, in order, each of a
    type its review config allows, an edit with its ``edited_action``.
    """
    actions = list(request.get("action_requests") or [])
    configs = list(request.get("review_configs") or [])
    decisions = value.get("decisions") if isinstance(value, Mapping) else None
    if not isinstance(decisions, list) or not all(isinstance(d, Mapping) for d in decisions):
        return (
            f"answer {{'decisions': [one per action request, in order]}} "
            f"({len(actions)} action request(s)), each a dict with a 'type'"
        )
    if len(decisions) != len(actions):
        return (
            f"{len(decisions)} decision(s) for {len(actions)} action request(s): answer "
            "each action request, in order"
        )
    for index, (decision, action) in enumerate(zip(decisions, actions, strict=True), 1):
        config = configs[index - 1] if index <= len(configs) else {}
        allowed = list(config.get("allowed_decisions") or [])
        kind = decision.get("type")
        if kind not in allowed:
            return (
                f"decision {index} ({kind!r:.40}) is not offered for {action.get('name')!r}: "
                f"one of {allowed}"
            )
        edited = decision.get("edited_action")
        if kind == "edit" and not (
            isinstance(edited, Mapping)
            and isinstance(edited.get("name"), str)
            and isinstance(edited.get("args"), Mapping)
        ):
            return (
                f"decision {index} is an edit without its 'edited_action': "
                "{'name': <tool>, 'args': {...}}"
            )
    return None


# -- answers --------------------------------------------------------------------------

_HITL_APPROVAL_DECISIONS = ("approve", "edit", "reject")
_OLD_HITL = {"accept", "edit", "response", "ignore"}
"""Decision types of the older HITL interrupt (``langgraph.prebuilt.interrupt``)."""


def hitl_decisions(value: Any) -> list[Mapping[str, Any]] | None:
    """The decisions of an answer in a HITL shape, in order; None: not a HITL shape.

    Understood: ``{"decisions": [...]}`` (LangChain's ``HumanInTheLoopMiddleware``,
    Agent Chat UI), a bare decision ``{"type": ...}``, and the older UI's list
    ``[{"type": "accept" | "edit" | "response" | "ignore", "args": ...}]``, mapped to
    approve, edit, reject with the response as its message, and reject.

    Raises:
        InvalidAnswer: ``decisions`` is not a list of dicts.
    """
    if isinstance(value, list) and value:
        if not all(isinstance(d, Mapping) and d.get("type") in _OLD_HITL for d in value):
            return None
        return [_from_old_hitl(d) for d in value]
    if not isinstance(value, Mapping):
        return None
    if "decisions" in value:
        decisions = value["decisions"]
        if not isinstance(decisions, list) or not all(isinstance(d, Mapping) for d in decisions):
            raise InvalidAnswer("'decisions' must be a list of dicts, each with a 'type'")
        return list(decisions)
    if "type" in value and "decision" not in value:
        return [value]
    return None


def _from_old_hitl(decision: Mapping[str, Any]) -> Mapping[str, Any]:
    args = decision.get("args")
    match decision["type"]:
        case "accept":
            return {"type": "approve"}
        case "ignore":
            return {"type": "reject"}
        case "response":
            return {"type": "reject", "message": str(args or "")}
        case _:  # edit: args = {"action": name, "args": {...}}
            if not isinstance(args, Mapping):
                raise InvalidAnswer("an edit needs args: {'action': name, 'args': {...}}")
            return {
                "type": "edit",
                "edited_action": {"name": args.get("action"), "args": args.get("args")},
            }


def _author(value: Any, op_id: str | None) -> str | None:
    """The answer's ``by``: None when absent, else a non-empty string."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidAnswer("'by' must name who decided (a non-empty string)", operation_id=op_id)
    return value


def parse_answer(
    value: Any,
    *,
    tool_name: str,
    kind: RequestKind | None = None,
    offered: Sequence[str] | None = None,
) -> Answer:
    """Read a resume value as an answer to a review or an approval (``kind=None``: either).

    A HITL-shaped answer decides one request; its decision means, for an approval,
    approve / reject / edit (a new call); for a review (``kind="review"``), approve
    = retry, reject = reject, edit with ``outcome: "confirmed"`` = confirm (the
    edited ``result``, JSON text or a value, is the provider's result). ``offered``:
    the HITL decision types the request offered (its ``review_configs``); another
    one is refused. Which decisions fit is finally checked against the named
    operation's status by the runner (an answer may name a sibling operation).

    Raises:
        InvalidAnswer: not a dict, an unknown decision, a decision not allowed
            for this kind of request, or a ``by`` that is not a non-empty string
            (who decided is settled by ``decide.answers.identify``).
    """
    decisions = hitl_decisions(value)
    if decisions is not None:
        if len(decisions) != 1:
            raise InvalidAnswer(
                "this request decides one call: answer {'decisions': [one decision]}"
            )
        top = value if isinstance(value, Mapping) else {}
        op_id = top.get("operation_id")
        if op_id is not None and not isinstance(op_id, str):
            raise InvalidAnswer("operation_id must be a string")
        by = _author(decisions[0].get("by") or top.get("by"), op_id)
        return hitl_answer(
            decisions[0], tool_name=tool_name, kind=kind, offered=offered, by=by, op_id=op_id
        )
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
    author = _author(value.get("by"), op_id)
    why = value.get("reason") or ""
    if not isinstance(why, str):
        raise InvalidAnswer("'reason' must be a string", operation_id=op_id)
    return Answer(
        operation_id=op_id, decision=decision, by=author, reason=why, result=value.get("result")
    )


def hitl_answer(
    decision: Mapping[str, Any],
    *,
    tool_name: str,
    kind: RequestKind | None,
    offered: Sequence[str] | None,
    by: str | None,
    op_id: str | None,
) -> Answer:
    """One HITL decision as an ``Answer`` (see ``parse_answer`` for the mapping)."""
    kind_of = decision.get("type")
    if offered is not None and kind_of not in offered:
        raise InvalidAnswer(
            f"decision type {kind_of!r} is not offered here; use {', '.join(offered)}",
            operation_id=op_id,
        )
    edited: Mapping[str, Any] | None = None
    if kind_of == "edit":
        action = decision.get("edited_action")
        if not isinstance(action, Mapping) or not isinstance(action.get("args"), Mapping):
            raise InvalidAnswer("an edit needs edited_action: {'name', 'args': {...}}")
        if action.get("name", tool_name) != tool_name:
            raise InvalidAnswer(
                f"an edit cannot switch tools ({tool_name!r} -> {action.get('name')!r})"
            )
        edited = action["args"]
    message = decision.get("message")
    if message is not None and not isinstance(message, str):
        raise InvalidAnswer("a reject's 'message' must be a string", operation_id=op_id)
    if kind == "review":
        match kind_of:
            case "approve":
                return Answer(
                    operation_id=op_id,
                    decision=Decision.RETRY,
                    by=by,
                    reason="retry approved by the reviewer",
                )
            case "reject":
                reason = message or "the reviewer says it did not happen"
                return Answer(operation_id=op_id, decision=Decision.REJECT, by=by, reason=reason)
            case "edit":
                assert edited is not None
                if str(edited.get("outcome", "")).strip().lower() != "confirmed":
                    raise InvalidAnswer(
                        'to confirm, edit the outcome to "confirmed"; to say it did not '
                        "happen, reject",
                        operation_id=op_id,
                    )
                return Answer(
                    operation_id=op_id,
                    decision=Decision.CONFIRM,
                    by=by,
                    reason=message or "confirmed by the reviewer",
                    result=_edited_result(edited.get("result")),
                )
    else:
        match kind_of:
            case "approve":
                return Answer(operation_id=op_id, decision=Decision.APPROVE, by=by)
            case "reject":
                reason = message or "rejected by the reviewer"
                return Answer(operation_id=op_id, decision=Decision.REJECT, by=by, reason=reason)
            case "edit":
                assert edited is not None
                return Answer(
                    operation_id=op_id,
                    decision=Decision.APPROVE,
                    by=by,
                    reason="edited by the reviewer",
                    edited_args=dict(edited),
                )
    raise InvalidAnswer(
        f"decision type {kind_of!r} is not allowed here; use approve, edit or reject",
        operation_id=op_id,
    )


def _edited_result(value: Any) -> Any:
    """The provider's result a reviewer typed: UIs send edited fields as text (JSON or not)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text
