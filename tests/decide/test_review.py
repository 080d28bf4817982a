"""Review and approval payloads, and the answers to them (pure)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from langgraph_effects.core.model import (
    Decision,
    Evidence,
    Operation,
    OperationStatus,
    ProviderContract,
)
from langgraph_effects.review import (
    Answer,
    InvalidAnswer,
    approval_request,
    hitl_decisions,
    parse_answer,
    review_request,
)

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def op(status: OperationStatus) -> Operation:
    return Operation(
        tenant_id="t",
        operation_id="op-1",
        action="crm.close",
        target="A",
        payload_digest="0" * 64,
        payload={"case_id": "A"},
        status=status,
        attempts=1,
        idempotency_key="lge-op-1",
        first_dispatched_at=NOW - timedelta(hours=1),
        created_at=NOW,
        updated_at=NOW,
    )


def test_review_request_is_json_with_risk() -> None:
    """A review carries id, status, attempts, evidence, retry risk and allowed decisions."""
    contract = ProviderContract(idempotency_window=timedelta(hours=24))
    req = review_request(
        op(OperationStatus.UNKNOWN),
        tool_name="close",
        evidence=[Evidence.inconclusive("nothing yet")],
        contract=contract,
        now=NOW,
    )
    json.dumps(req)
    assert req["operation_id"] == "op-1"
    assert req["status"] == "unknown"
    assert req["attempts"] == 1
    assert req["evidence"][0]["kind"] == "inconclusive"
    assert req["retry_risk"]["key_window_open"] is True
    assert req["retry_risk"]["key_expires_at"].startswith("2025-01-01T22:55")
    assert req["allowed_decisions"] == ["confirm", "reject", "retry"]


def test_approval_request_has_hitl_shape() -> None:
    """An approval carries action_requests / review_configs like HumanInTheLoopMiddleware."""
    req = approval_request(op(OperationStatus.PREPARED), tool_name="close", args={"case_id": "A"})
    json.dumps(req)
    assert req["status"] == "prepared"
    assert req["action_requests"][0] == {
        "name": "close",
        "args": {"case_id": "A"},
        "description": req["action_requests"][0]["description"],
    }
    assert req["review_configs"][0]["allowed_decisions"] == ["approve", "edit", "reject"]


def test_native_answer() -> None:
    """A native answer keeps its operation id, decision, author, reason and result."""
    ans = parse_answer(
        {"operation_id": "op-1", "decision": "confirm", "by": "al", "result": {"x": 1}},
        tool_name="close",
    )
    assert ans.operation_id == "op-1"
    assert ans.decision is Decision.CONFIRM
    assert ans.by == "al"
    assert ans.result == {"x": 1}


def test_hitl_answers() -> None:
    """HITL-shaped approve / reject / edit answers are understood; an edit carries new args."""
    assert parse_answer({"decisions": [{"type": "approve"}]}, tool_name="close").decision is (
        Decision.APPROVE
    )
    rej = parse_answer({"decisions": [{"type": "reject", "message": "no"}]}, tool_name="close")
    assert rej.decision is Decision.REJECT
    assert rej.reason == "no"
    edit = parse_answer(
        {"decisions": [{"type": "edit", "edited_action": {"name": "close", "args": {"a": 1}}}]},
        tool_name="close",
    )
    assert edit.edited_args == {"a": 1}


@pytest.mark.parametrize(
    "value",
    [
        "yes",
        {"decision": "maybe", "by": "al"},
        {"decision": "confirm", "by": " "},  # a by that names nobody (none at all: identify)
        {"decisions": [{"type": "respond", "message": "x"}]},
        {"decisions": [{"type": "edit", "edited_action": {"name": "other", "args": {}}}]},
        {"decisions": [{"type": "approve"}, {"type": "approve"}]},
    ],
)
def test_invalid_answers_are_refused(value: object) -> None:
    """Malformed answers raise InvalidAnswer, marked so LangGraph lets them be re-answered."""
    with pytest.raises(InvalidAnswer) as info:
        parse_answer(value, tool_name="close")
    from langgraph.errors import is_invalid_resume

    assert is_invalid_resume(info.value)


def test_kind_restricts_decisions() -> None:
    """A review answer cannot approve; an approval answer cannot confirm."""
    with pytest.raises(InvalidAnswer):
        parse_answer({"decision": "approve", "by": "a"}, tool_name="c", kind="review")
    with pytest.raises(InvalidAnswer):
        parse_answer({"decision": "confirm", "by": "a"}, tool_name="c", kind="approval")


def test_review_request_has_hitl_shape_and_maps_decisions() -> None:
    """A review shows in HITL UIs: the tool with ``outcome: unknown``, the evidence and the
    retry risk in the description; edit to "confirmed" = confirm (a result typed as JSON
    text is read as JSON), reject = reject, approve = retry only when it cannot duplicate."""
    safe = review_request(
        op(OperationStatus.UNKNOWN),
        tool_name="close",
        evidence=[Evidence.inconclusive("no trace at the CRM")],
        contract=ProviderContract(idempotency_window=timedelta(hours=24)),
        now=NOW,
    )
    [action] = safe["action_requests"]
    assert action["name"] == "close"
    assert action["args"] == {"outcome": "unknown", "result": ""}
    assert "no trace at the CRM" in action["description"]
    assert "Retry risk" in action["description"]
    assert safe["review_configs"] == [
        {"action_name": "close", "allowed_decisions": ["approve", "edit", "reject"]}
    ]
    offered = safe["review_configs"][0]["allowed_decisions"]

    def read(decision: dict[str, object]) -> Answer:
        return parse_answer(
            {"decisions": [decision]}, tool_name="close", kind="review", offered=offered
        )

    retry = read({"type": "approve"})
    assert retry.decision is Decision.RETRY
    rejected = read({"type": "reject", "message": "never arrived"})
    assert rejected.decision is Decision.REJECT
    assert rejected.reason == "never arrived"
    edited = {"name": "close", "args": {"outcome": "confirmed", "result": '{"v": 2}'}}
    confirmed = read({"type": "edit", "edited_action": edited})
    assert confirmed.decision is Decision.CONFIRM
    assert confirmed.result == {"v": 2}
    with pytest.raises(InvalidAnswer):
        read({"type": "edit", "edited_action": {"name": "close", "args": {"outcome": "unknown"}}})

    risky = review_request(
        op(OperationStatus.UNKNOWN), tool_name="close", evidence=[], contract=None, now=NOW
    )
    assert risky["review_configs"][0]["allowed_decisions"] == ["edit", "reject"]
    assert "not offered" in risky["action_requests"][0]["description"]
    with pytest.raises(InvalidAnswer):
        parse_answer(
            {"decisions": [{"type": "approve"}]},
            tool_name="close",
            kind="review",
            offered=risky["review_configs"][0]["allowed_decisions"],
        )


def test_the_older_hitl_answer_is_read() -> None:
    """The older UI's list answer maps onto today's decisions."""
    assert hitl_decisions([{"type": "accept", "args": None}]) == [{"type": "approve"}]
    assert hitl_decisions([{"type": "ignore", "args": None}]) == [{"type": "reject"}]
    assert hitl_decisions([{"type": "response", "args": "by hand"}]) == [
        {"type": "reject", "message": "by hand"}
    ]
    edit = [{"type": "edit", "args": {"action": "close", "args": {"case_id": "B"}}}]
    assert hitl_decisions(edit) == [
        {"type": "edit", "edited_action": {"name": "close", "args": {"case_id": "B"}}}
    ]
    assert parse_answer(edit, tool_name="close").edited_args == {"case_id": "B"}
    assert hitl_decisions([{"decision": "approve"}]) is None
