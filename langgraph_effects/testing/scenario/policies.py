"""Review policies: how the harness answers an approval or a review, as a person would."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langgraph_effects.core.model import Decision
from langgraph_effects.review import APPROVAL_KIND, REVIEW_KIND
from langgraph_effects.testing.scenario.tools import _ACTIONS, OPERATOR, Providers, ReviewPolicy

# --------------------------------------------------------------------------- review policies


def _approve(request: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "operation_id": request["operation_id"],
        "decision": "approve",
        "by": OPERATOR,
        "reason": "approved by the scenario",
    }


def confirm_if_seen(seen: Callable[[dict[str, Any]], bool], *, by: str = OPERATOR) -> ReviewPolicy:
    """A careful operator: confirm when the provider shows the effect, reject when it does not.

    ``seen(request)`` looks at the provider (``Providers.shows`` for the
    built-ins). Approval requests are approved.
    """

    def policy(request: dict[str, Any]) -> dict[str, Any] | None:
        if request.get("kind") == APPROVAL_KIND:
            return _approve(request)
        shown = seen(request)
        return {
            "operation_id": request["operation_id"],
            "decision": "confirm" if shown else "reject",
            "by": by,
            "reason": "seen at the provider" if shown else "not found at the provider",
        }

    return policy


def retry_when_safe(fallback: ReviewPolicy, *, by: str = OPERATOR) -> ReviewPolicy:
    """Order a retry when the request says the provider would deduplicate it; else ``fallback``."""

    def policy(request: dict[str, Any]) -> dict[str, Any] | None:
        risk = request.get("retry_risk") or {}
        if (
            request.get("kind") != APPROVAL_KIND
            and "retry" in request.get("allowed_decisions", ())
            and risk.get("key_window_open")
        ):
            return {
                "operation_id": request["operation_id"],
                "decision": "retry",
                "by": by,
                "reason": "the provider deduplicates by key",
            }
        return fallback(request)

    return policy


def defer(request: dict[str, Any]) -> dict[str, Any] | None:
    """Nobody answers: the operation stays ``unknown``, pending review."""
    return None


def target_of(call: Mapping[str, Any]) -> str | None:
    """The provider-side target of a built-in tool call (what its effects are counted by)."""
    args = call.get("args") or {}
    field_name = {"close_case": "case_id", "send_mail": "to", "create_ticket": "title"}.get(
        str(call.get("name"))
    )
    return None if field_name is None else args.get(field_name)


def edited_args(tool_name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """A reviewer's edit of a built-in call: another payload (a ticket also gets another title)."""
    if tool_name == "close_case":
        return {**args, "resolution": f"{args['resolution']} (edited)"}
    if tool_name == "send_mail":
        return {**args, "body": f"{args['body']} (edited)"}
    return {**args, "title": f"{args['title']} (edited)"}


def operator(
    providers: Providers,
    rng: random.Random,
    *,
    by: str = OPERATOR,
    collide: Sequence[Mapping[str, Any]] = (),
    one_task: bool = False,
) -> ReviewPolicy:
    """A truthful person deciding at random among the answers the provider's console allows.

    Approvals: approve, reject or edit, in the native or the HITL shape (with
    ``one_task``, the graph runs several effect calls in one task, and a HITL answer names
    its ``operation_id`` beside the decisions, as ``docs/server.md`` asks there). Reviews:
    when the provider shows the effect, ``confirm`` (sometimes with a result) or,
    inside an open key window, ``retry``; when it shows none and nothing is in
    flight there, ``reject`` or ``retry``; otherwise the review is left pending.
    It never gives an answer that could itself apply an effect twice, so every
    duplicate a schedule finds is the library's. With ``collide`` (tool calls) an approval
    is edited more often, and then, half the time, to the arguments of another of these
    calls of its tool: an edit that collides with a sibling or an earlier answered call.
    """

    def policy(request: dict[str, Any]) -> dict[str, Any] | None:
        answer = decide(request)
        if one_task and answer is not None and "decisions" in answer:
            answer = {**answer, "operation_id": request["operation_id"]}
        if answer is not None and "request_id" in request and rng.random() < 0.5:
            # A careful UI names the request it answers (half of them do): an answer to
            # a request that is no longer current (shown after a crash) is then asked
            # again, saying why; one to the current request applies, whatever was
            # reconciled since it was asked.
            answer = {**answer, "request_id": request["request_id"]}
        return answer

    def decide(request: dict[str, Any]) -> dict[str, Any] | None:
        op_id = request["operation_id"]
        if request.get("kind") == APPROVAL_KIND:
            choice = rng.choice(("approve", "approve", "hitl-approve", "reject", "hitl-reject"))
            choice = "edit" if rng.random() < 0.25 else choice
            name = str(request["tool"])
            others = [
                dict(tc["args"])
                for tc in collide
                if tc["name"] == name and dict(tc["args"]) != request["args"]
            ]
            if others and rng.random() < 0.5:
                edit = {"name": name, "args": rng.choice(others)}
                return {"decisions": [{"type": "edit", "edited_action": edit}], "by": by}
            if choice == "approve":
                return {**_approve(request), "by": by}
            if choice == "reject":
                return {"operation_id": op_id, "decision": "reject", "by": by, "reason": "no"}
            if choice == "hitl-approve":
                return {"decisions": [{"type": "approve"}], "by": by}
            if choice == "hitl-reject":
                return {"decisions": [{"type": "reject", "message": "not this one"}], "by": by}
            name = str(request["tool"])
            edit = {"name": name, "args": edited_args(name, request["args"])}
            return {"decisions": [{"type": "edit", "edited_action": edit}], "by": by}
        allowed = request.get("allowed_decisions", ())
        window_open = bool((request.get("retry_risk") or {}).get("key_window_open"))
        kind = _ACTIONS.get(str(request.get("action")))
        in_flight = 0 if kind is None else providers[kind].stats().in_flight
        if providers.shows(request):
            options = ["confirm", "confirm-with-result"]
            options += ["retry"] if window_open and "retry" in allowed else []
        elif in_flight == 0:
            options = ["reject"] + (["retry"] if "retry" in allowed else [])
        elif window_open and "retry" in allowed:
            options = ["retry"]
        else:
            return None
        choice = rng.choice(options)
        answer = {"operation_id": op_id, "decision": choice.split("-")[0], "by": by}
        if choice == "confirm-with-result":
            answer["result"] = {"seen_in_console_by": by}
        return answer | {"reason": f"{choice} after looking at the provider"}

    return policy


CONSOLE = "console-operator"
"""Who decides at the console (``console``): not the person answering in the UI."""


def console(
    providers: Providers, rng: random.Random, *, chance: float = 0.5
) -> Callable[[dict[str, Any]], Decision | None]:
    """An operator deciding a pending question at the console, truthfully, with ``chance``:
    an approval approved or rejected; a review confirmed when the provider shows the
    effect, rejected when it shows none and nothing is in flight there (else left)."""

    def decide(request: dict[str, Any]) -> Decision | None:
        if rng.random() >= chance:
            return None
        if request.get("kind") == APPROVAL_KIND:
            return rng.choice((Decision.APPROVE, Decision.APPROVE, Decision.REJECT))
        if request.get("kind") != REVIEW_KIND:
            return None
        if providers.shows(request):
            return Decision.CONFIRM
        kind = _ACTIONS.get(str(request.get("action")))
        in_flight = 0 if kind is None else providers[kind].stats().in_flight
        return Decision.REJECT if in_flight == 0 else None

    return decide


def decision_of(answer: Any) -> str | None:
    """The decision a UI answer gives (native or HITL shape): approve, reject, edit,
    confirm or retry; None for anything else."""
    if not isinstance(answer, Mapping):
        return None
    decisions = answer.get("decisions")
    if isinstance(decisions, list) and len(decisions) == 1 and isinstance(decisions[0], Mapping):
        return str(decisions[0].get("type"))
    decision = answer.get("decision")
    return None if decision is None else str(decision)


_NAN = float("nan")


def bad_answer(request: Mapping[str, Any], rng: random.Random) -> Any:
    """An answer that must be refused (and leave the request answerable): wrong id, shape, value."""
    op_id = request["operation_id"]
    if request.get("kind") == APPROVAL_KIND:
        name = str(request.get("tool"))
        options: list[Any] = [
            {"operation_id": "op-not-this-one", "decision": "approve", "by": OPERATOR},
            {"operation_id": op_id, "decision": "confirm", "by": OPERATOR},
            {"operation_id": op_id, "decision": "approve"},
            {"decisions": [{"type": "edit", "edited_action": {"name": "rm_rf", "args": {}}}]},
            {"decisions": [{"type": "maybe"}]},
            {"decisions": [{"type": "approve"}, {"type": "approve"}]},
            {
                "decisions": [
                    {
                        "type": "edit",
                        "edited_action": {"name": name, "args": {**request["args"], "x": _NAN}},
                    }
                ]
            },
        ]
    else:
        options = [
            {"operation_id": "op-not-this-one", "decision": "confirm", "by": OPERATOR},
            {"operation_id": op_id, "decision": "approve", "by": OPERATOR},
            {"operation_id": op_id, "decision": "confirm"},
            {"operation_id": op_id, "decision": "confirm", "by": OPERATOR, "result": _NAN},
            {"decisions": [{"type": "approve"}]},
            "confirm",
        ]
    bad = rng.choice(options)
    if isinstance(bad, dict) and "request_id" in request:
        bad = {**bad, "request_id": request["request_id"]}  # as the UI would send it
    return bad
