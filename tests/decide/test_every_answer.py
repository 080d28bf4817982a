"""Every answer applies, or the person is told why and asked again (issue 23, findings 1-4).

Real graphs on SQLite and PostgreSQL, sync and async; effects counted at a
file-backed fake CRM that honours no idempotency key, so every dispatch that
reaches it is an effect. The crash between the ledger applying an answer and
LangGraph saving it is a real process kill: ``tests/kills/test_answer_kills.py`` (this
room starts no process).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _answer_child import APPROVE, CFG, gated_graph
from _graphs import Env, build_graph, call, tool_messages
from langgraph.types import Command
from pydantic import ValidationError

from langgraph_effects import EffectContext, Evidence, ProviderContract, effect
from langgraph_effects.core.actors import person_refusal
from langgraph_effects.core.model import EventKind, OperationStatus
from langgraph_effects.errors import InvalidAnswer
from langgraph_effects.testing.providers import FakeCRM, Fault

S = OperationStatus
BACKENDS = [(k, m) for k in ("sqlite", "postgres") for m in ("sync", "async")]
REFUSED = (ValidationError, InvalidAnswer)


@pytest.fixture
def crm(tmp_path: Path) -> Any:
    with FakeCRM(path=tmp_path / "crm.db") as fake:
        yield fake


def pending(env: Env, graph: Any) -> list[Any]:
    state = graph.get_state(CFG) if not env.is_async else env.run(graph.aget_state(CFG))
    return [i.value for task in state.tasks for i in task.interrupts]


def review_graph(env: Env, crm: FakeCRM, looked: list[str]) -> Any:
    """One call whose response is lost; its reconciler never sees anything either way."""

    def look(op: Any) -> Evidence:
        looked.append(op.operation_id)
        return Evidence.inconclusive("the CRM's search shows nothing yet")

    @effect("crm.close_case", target=lambda a: a["case_id"], reconcile=look)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution)

    crm.faults.script([Fault.LOSE_RESPONSE])
    return build_graph(
        [close_case],
        [call("close_case", "call-a", case_id="A", resolution="fixed")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )


# -- finding 1: an inconclusive reconciliation does not open a new round ---------------


@pytest.mark.parametrize(
    ("env", "echo"),
    [((k, m), True) for k, m in BACKENDS] + [(("sqlite", "sync"), False)],
    indirect=["env"],
    ids=[f"{k}-{m}-echoed" for k, m in BACKENDS] + ["sqlite-sync-not-echoed"],
)
def test_a_review_answer_applies_whatever_was_reconciled_since(
    env: Env, crm: FakeCRM, echo: bool
) -> None:
    """Each resume reconciles again and records the inconclusive evidence (the record's
    version moves), and the answer still applies the first time, with its request_id
    echoed or not: the round is bound to what the person decides."""
    looked: list[str] = []
    graph = review_graph(env, crm, looked)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [review] = pending(env, graph)
    op_id = review["operation_id"]
    version = env.ledger_call("get", "default", op_id).record_version
    answer = {"operation_id": op_id, "decision": "confirm", "by": "ana", "reason": "seen it"}
    if echo:
        answer["request_id"] = review["request_id"]
    out = env.invoke(graph, Command(resume=answer), CFG)
    op = env.ledger_call("get", "default", op_id)
    assert pending(env, graph) == []
    assert (op.status, crm.effects, len(looked)) == (S.CONFIRMED, 1, 2)
    assert op.record_version > version + 1  # the second reconciliation moved it, then confirm
    assert [m.status for m in tool_messages(out)] == ["success"]


LEAN = pytest.mark.parametrize(
    "env", [("sqlite", "sync"), ("postgres", "async")], indirect=True, ids=["sqlite", "pg-async"]
)


@LEAN
def test_a_request_id_of_no_request_of_ours_is_refused(env: Env, crm: FakeCRM) -> None:
    """A non-string, garbage or foreign request_id is refused with words naming it, nothing
    is recorded, and the next right answer applies."""
    looked: list[str] = []
    graph = review_graph(env, crm, looked)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [review] = pending(env, graph)
    op_id = review["operation_id"]
    for request_id in (
        7,
        "nonsense",
        f"{op_id}@garbage",
        "op-someone-else@unknown.1.1",
        "approvals:0123456789abcdef01234567",
    ):
        bad = {"operation_id": op_id, "decision": "reject", "by": "ana", "request_id": request_id}
        env.refused(graph, Command(resume=bad), CFG, "request_id")
    assert env.ledger_call("get", "default", op_id).status is S.UNKNOWN
    good = {"operation_id": op_id, "decision": "reject", "by": "ana", "reason": "not there"}
    env.invoke(graph, Command(resume=good), CFG)
    assert env.ledger_call("get", "default", op_id).status is S.REJECTED
    assert crm.effects == 1


# -- finding 4: one rule for who answered ----------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "receipt",
        "Reconciler",
        "takeover:host|1|2",
        "host|123|abc",
        "langgraph-auth:admin",
        "anonymous",
        "operator",
        "\x1b[31mana\x1b[0m",
        " ",
        None,
        42,
    ],
)
def test_system_names_are_no_person(name: Any) -> None:
    """The one rule refuses system actors, reserved forms, control characters, non-strings."""
    assert person_refusal(name) is not None


def test_a_person_is_a_person() -> None:
    """Plain names pass, including ones that merely contain a reserved word."""
    assert [person_refusal(n) for n in ("ana", "Ana Lopez", "receipt-team", "ops@acme")] == [
        None
    ] * 4


@LEAN
def test_a_graph_answer_in_a_system_name_is_refused(env: Env, crm: FakeCRM) -> None:
    """A graph answer whose ``by`` is a system actor is refused before it is saved; the
    same answer from a person applies."""
    graph = gated_graph(env, crm)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    for by in ("receipt", "takeover:x", "langgraph-auth:admin", "anonymous", "\x1b[2Jana"):
        env.refused(graph, Command(resume={**APPROVE, "by": by}), CFG, "cannot decide")
    assert crm.effects == 0
    env.invoke(graph, Command(resume=APPROVE), CFG)
    assert crm.effects == 1


@LEAN
def test_reconciler_evidence_cannot_speak_as_an_operator(env: Env, crm: FakeCRM) -> None:
    """A reconciler's evidence with ``source="operator"`` resolves as the reconciler's,
    never logged as actor ``operator``."""

    def look(op: Any) -> Evidence:
        return Evidence.confirmed("found it", result={"closed": "A"}, source="operator")

    @effect("crm.close_case", target=lambda a: a["case_id"], reconcile=look)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution)

    crm.faults.script([Fault.LOSE_RESPONSE])
    graph = build_graph(
        [close_case],
        [call("close_case", "call-a", case_id="A", resolution="fixed")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [op] = env.ops()
    assert (op.status, crm.effects) == (S.CONFIRMED, 1)
    [resolved] = [e for e in env.ledger_call("events", "default", op.operation_id) if e.evidence]
    assert resolved.actor == "reconciler"
    assert resolved.evidence is not None
    assert resolved.evidence.source == "reconciler"


def test_a_cli_identity_hook_returning_none_verifies_nobody(tmp_path: Path) -> None:
    """An identity hook that returns None is refused (forbidden), never operator "None"."""
    from typer.testing import CliRunner

    from langgraph_effects.cli import ExitCode, app

    env = Env("sqlite", "sync", path=tmp_path / "app.db")
    with FakeCRM(path=tmp_path / "crm.db") as crm:
        graph = gated_graph(env, crm)
        env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
        [op] = env.ops()
        url = {"LGE_LEDGER_URL": f"sqlite:///{tmp_path / 'app.db'}", "LGE_TENANT": "default"}
        outputs = []
        for hook, code in (("nobody", ExitCode.FORBIDDEN), ("signed_in", 0)):
            result = CliRunner().invoke(
                app,
                ["approve", op.operation_id, "--reason", "checked"],
                env={**url, "LGE_IDENTITY": f"_answer_child:{hook}"},
            )
            assert result.exit_code == code, result.output
            outputs.append(" ".join(result.output.split()))
        assert "returned None, not a name: it verified nobody" in outputs[0]
        events = env.ledger_call("events", "default", op.operation_id)
        assert [e.actor for e in events if e.kind is EventKind.APPROVE] == ["olga"]
    env.close()


def test_what_a_person_is_told_names_who_decided_what_and_when() -> None:
    """The words of a refusal: who decided, what, when; an answer that agrees needs none."""
    from datetime import UTC, datetime

    from langgraph_effects.core.model import Decision, Operation, OperationEvent
    from langgraph_effects.decide.answers import agrees, decided_note, named_round, round_id
    from langgraph_effects.review import Answer

    at = datetime(2026, 12, 2, 14, 3, 11, tzinfo=UTC)
    op = Operation(
        tenant_id="t",
        operation_id="op-1",
        action="pay.refund",
        payload_digest="0" * 64,
        status=S.CONFIRMED,
        attempts=1,
        fencing_token=1,
        authorization_ref="approved-by:bob",
        created_at=at,
        updated_at=at,
    )
    approve = OperationEvent(
        tenant_id="t",
        operation_id="op-1",
        seq=2,
        kind=EventKind.APPROVE,
        from_status=S.PREPARED,
        to_status=S.PREPARED,
        actor="bob",
        at=at,
    )
    reject = Answer(operation_id="op-1", decision=Decision.REJECT, by="ana")
    assert decided_note(op, [approve], reject) == (
        "Your reject of operation op-1 was not applied: bob decided approve at "
        "2026-12-02 14:03:11 UTC (now confirmed). Nothing you answered changed it."
    )
    assert not agrees(op, reject)
    assert agrees(op, Answer(operation_id="op-1", decision=Decision.APPROVE, by="ana"))
    assert round_id(op) == "op-1@confirmed.1.1"
    assert named_round({"request_id": "op-1@unknown.1.1"}, "op-1") == "op-1@unknown.1.1"
    assert named_round({"decision": "reject"}, "op-1") is None


def test_an_answer_told_and_asked_again_is_never_read_as_a_last_word(
    env: Env, crm: FakeCRM
) -> None:
    """An answer naming an earlier request is told and asked again; it keeps its place in
    the task, and on a later run (before a safe resend) it is passed over, never read as
    the person's newest word and refused: the answer given after it applies or is told
    (campaign seed 1180: the refusal failed the run, and the next answer was lost)."""

    def look(op: Any) -> Evidence:
        return Evidence.inconclusive("the CRM's search shows nothing yet")

    @effect(
        "crm.close_case",
        target=lambda a: a["case_id"],
        reconcile=look,
        contract=ProviderContract(idempotency_window=timedelta(hours=24)),
    )
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    crm.faults.script([Fault.LOSE_RESPONSE] * 12)
    graph = build_graph(
        [close_case],
        [call("close_case", "call-a", case_id="A", resolution="fixed")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [review] = pending(env, graph)
    op_id = review["operation_id"]
    earlier = f"{op_id}@unknown.1.2"
    assert review["request_id"] != earlier
    stale = {"operation_id": op_id, "decision": "confirm", "by": "ana", "request_id": earlier}
    env.invoke(graph, Command(resume=stale), CFG)
    [again] = pending(env, graph)
    assert earlier in again["notice"]  # told, asked again
    # Answered by position, no request_id: applied (the retry is sent, then one safe resend).
    env.invoke(
        graph, Command(resume={"operation_id": op_id, "decision": "retry", "by": "ana"}), CFG
    )
    [third] = pending(env, graph)
    assert "notice" not in third
    assert third["request_id"] != again["request_id"]
    # A later run reads the answer before any resend: the told answer is passed over.
    confirm = {"operation_id": op_id, "decision": "confirm", "by": "ana", "reason": "seen"}
    env.invoke(graph, Command(resume=confirm), CFG)  # not refused
    op = env.ledger_call("get", "default", op_id)
    assert (op.status, pending(env, graph)) == (S.CONFIRMED, [])


# -- a refused answer is asked again under the id LangGraph answers next ---------------


@pytest.mark.parametrize("by_id", [True, False], ids=["by-id", "by-position"])
def test_a_bad_answer_under_tool_retry_is_refused_in_words_and_the_next_applies(
    env: Env, crm: FakeCRM, by_id: bool
) -> None:
    """``ToolRetryMiddleware`` listed before ``EffectMiddleware`` retries every exception a
    tool call raises: a bad answer's refusal travels as the same request asked again with a
    notice (an interrupt, which it lets through), under the interrupt id the person
    answered, so the next answer, by id or by position, applies: 1 act (campaign seeds
    439, 1153, 1619, 868: the request came back under an id LangGraph never answered)."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import ToolRetryMiddleware

    from langgraph_effects import EffectMiddleware
    from langgraph_effects.testing import ScriptedChatModel

    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def close_case(case_id: str, resolution: str) -> dict[str, Any]:
        """Close a CRM case (a person approves first)."""
        return crm.close_case(case_id, resolution)

    graph = create_agent(
        ScriptedChatModel(plan=[[call("close_case", "c1", case_id="A", resolution="fixed")]]),
        tools=[close_case],
        middleware=[
            ToolRetryMiddleware(initial_delay=0.0, jitter=False),
            EffectMiddleware(ledger=env.ledger),
        ],
        checkpointer=env.checkpointer,
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    state = graph.get_state(CFG) if not env.is_async else env.run(graph.aget_state(CFG))
    [asked] = state.interrupts
    op_id = asked.value["operation_id"]

    def resume(value: Any) -> Command[Any]:
        return Command(resume={asked.id: value} if by_id else value)

    for bad, why in (
        ({"operation_id": op_id, "decision": "confirm", "by": "ana"}, "'confirm'"),
        ({"operation_id": op_id, "decision": "approve", "by": "receipt"}, "cannot decide"),
    ):
        env.refused(graph, resume(bad), CFG, why)
    op = env.ledger_call("get", "default", op_id)
    assert (op.status, op.authorization_ref, crm.effects) == (S.PREPARED, None, 0)
    out = env.invoke(
        graph, resume({"operation_id": op_id, "decision": "approve", "by": "ana"}), CFG
    )
    assert pending(env, graph) == []
    assert env.ledger_call("get", "default", op_id).status is S.CONFIRMED
    assert [m.status for m in tool_messages(out)] == ["success"]
    assert crm.effects == 1


# -- the last word before dispatch wins: a resume reads the answer before a safe resend --


@pytest.mark.parametrize(
    ("env", "echo"),
    [((k, m), True) for k, m in BACKENDS] + [(("sqlite", "sync"), False)],
    indirect=["env"],
    ids=[f"{k}-{m}-echoed" for k, m in BACKENDS] + ["sqlite-sync-not-echoed"],
)
def test_a_review_after_a_safe_resend_is_answered_before_any_other_send(
    env: Env, crm: FakeCRM, echo: bool
) -> None:
    """A provider that deduplicates by key: the first send and one safe resend lose their
    responses, and a person is asked. Their answer is read before anything is sent again:
    a ``retry`` (echoing the request_id or not) sends once more, then one safe resend, and
    the ``confirm`` given to the review after them applies the first time, nothing sent
    after it (4 sends in all, counted at the provider).
    Before, every resume resent first: the echoed answer named a gone round, and a reject
    arrived after a resend that may have acted."""
    sends: list[str] = []

    def look(op: Any) -> Evidence:
        return Evidence.inconclusive("the CRM's search shows nothing yet")

    @effect(
        "crm.close_case",
        target=lambda a: a["case_id"],
        reconcile=look,
        contract=ProviderContract(idempotency_window=timedelta(hours=24)),
    )
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        sends.append(ctx.idempotency_key)
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    crm.faults.script([Fault.LOSE_RESPONSE] * 4)
    graph = build_graph(
        [close_case],
        [call("close_case", "call-a", case_id="A", resolution="fixed")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [review] = pending(env, graph)
    op_id = review["operation_id"]
    assert len(sends) == 2
    retry = {"operation_id": op_id, "decision": "retry", "by": "ana"}
    if echo:
        retry["request_id"] = review["request_id"]
    env.invoke(graph, Command(resume=retry), CFG)
    [again] = pending(env, graph)
    # The ordered retry and one safe resend after it, both lost: asked again.
    assert (len(sends), "notice" in again) == (4, False)
    confirm = {"operation_id": op_id, "decision": "confirm", "by": "ana", "reason": "seen"}
    if echo:
        confirm["request_id"] = again["request_id"]
    out = env.invoke(graph, Command(resume=confirm), CFG)
    op = env.ledger_call("get", "default", op_id)
    assert (op.status, pending(env, graph), len(sends)) == (S.CONFIRMED, [], 4)
    assert [m.status for m in tool_messages(out)] == ["success"]
    assert crm.effects == 1  # one key: the provider applied it once


@pytest.mark.parametrize("env", BACKENDS, indirect=True, ids=[f"{k}-{m}" for k, m in BACKENDS])
def test_a_reject_given_to_the_review_after_a_safe_resend_stops_the_resends(
    env: Env, crm: FakeCRM
) -> None:
    """The review that follows a safe resend, answered ``reject``: recorded rejected under
    who said so, with nothing sent after the answer (2 sends, counted at the provider)."""
    sends: list[str] = []

    @effect(
        "crm.close_case",
        target=lambda a: a["case_id"],
        reconcile=lambda op: Evidence.inconclusive("nothing seen"),
        contract=ProviderContract(idempotency_window=timedelta(hours=24)),
    )
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        sends.append(ctx.idempotency_key)
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    crm.faults.script([Fault.LOSE_REQUEST] * 3)
    graph = build_graph(
        [close_case],
        [call("close_case", "call-a", case_id="A", resolution="fixed")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [review] = pending(env, graph)
    reject = {"operation_id": review["operation_id"], "decision": "reject", "by": "ana"}
    out = env.invoke(graph, Command(resume={**reject, "request_id": review["request_id"]}), CFG)
    op = env.ledger_call("get", "default", review["operation_id"])
    assert (op.status, pending(env, graph), len(sends), crm.effects) == (S.REJECTED, [], 2, 0)
    assert [m.status for m in tool_messages(out)] == ["error"]
    [rejected] = [
        e
        for e in env.ledger_call("events", "default", op.operation_id)
        if e.kind is EventKind.RESOLVE
    ]
    assert rejected.actor == "ana"
