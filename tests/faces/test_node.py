"""EffectToolNode in real LangGraph graphs: issue 3's scenarios, counted at fake providers.

Every scenario runs on the in-memory, SQLite and PostgreSQL ledgers (each with
the matching checkpointer), sync and async. Crash scenarios with real process
kills live in ``tests/kills/test_node_crash.py``.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _graphs import Env, build_graph, call, tool_messages
from langgraph.types import Command

from langgraph_effects import (
    EffectContext,
    Evidence,
    OperationStatus,
    PayloadMismatch,
    ProviderContract,
    effect,
)
from langgraph_effects.core.model import EventKind
from langgraph_effects.testing.faults import scaled
from langgraph_effects.testing.providers import FakeCRM, FakeMail, Fault

S = OperationStatus
BACKENDS = [
    ("memory", "sync"),
    ("memory", "async"),
    ("sqlite", "sync"),
    ("sqlite", "async"),
    ("postgres", "sync"),
    ("postgres", "async"),
]


def crm_tools(crm: FakeCRM, **kw: Any) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"], **kw)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return close_case


def find_closure(crm: FakeCRM) -> Any:
    def reconcile(op: Any) -> Evidence:
        case = crm.get_case(op.target)
        if case["closed_by"] == op.idempotency_key:
            return Evidence.confirmed(
                "closed under our key",
                provider_result_id=case["version"],
                result={"case_id": op.target, "closed": True},
            )
        return Evidence.inconclusive("no closure carrying our key")

    return reconcile


CFG = {"configurable": {"thread_id": "t1"}}
CLOSE_A = call("close_case", "call-a", case_id="A", resolution="fixed")


def pending_interrupts(env: Env, graph: Any, config: dict[str, Any]) -> list[Any]:
    state = graph.get_state(config) if not env.is_async else env.run(graph.aget_state(config))
    return [i for task in state.tasks for i in task.interrupts]


def test_first_run_then_replay_from_earlier_checkpoint(env: Env) -> None:
    """Scenario 11: a confirmed effect replays from the ledger when an old checkpoint re-runs."""
    crm = FakeCRM()
    graph = build_graph(
        [crm_tools(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    first = env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [msg] = tool_messages(first)
    assert msg.status == "success"
    assert crm.effects == 1
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert first["effect_operations"] == [op.operation_id]
    history = list(graph.get_state_history(CFG)) if not env.is_async else []
    if env.is_async:

        async def collect() -> list[Any]:
            return [s async for s in graph.aget_state_history(CFG)]

        history = env.run(collect())
    before_tools = next(s for s in history if s.next == ("tools",))
    again = env.invoke(graph, None, before_tools.config)
    assert crm.effects == 1
    assert tool_messages(again)[-1].content == msg.content


def test_lost_response_is_reconciled_without_resending(env: Env) -> None:
    """Scenario 2: a lost response with a conclusive reconciler confirms; the provider counts 1."""
    crm = FakeCRM()
    crm.faults.push(Fault.LOSE_RESPONSE)
    tool = crm_tools(crm, reconcile=find_closure(crm))
    graph = build_graph([tool], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer)
    out = env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert op.attempts == 1
    assert crm.effects == 1
    assert tool_messages(out)[0].status == "success"
    kinds = [e.kind for e in env.ledger_call("events", "default", op.operation_id)]
    assert EventKind.MARK_UNKNOWN in kinds
    assert EventKind.RESOLVE in kinds


def test_lost_response_is_retried_under_the_same_key(env: Env) -> None:
    """Scenario 3: inside the key window the resend carries the same key; the provider counts 1."""
    crm = FakeCRM()
    crm.faults.push(Fault.LOSE_RESPONSE)
    tool = crm_tools(crm, contract=ProviderContract(idempotency_window=timedelta(hours=24)))
    graph = build_graph([tool], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert op.attempts == 2
    assert crm.effects == 1
    assert crm.duplicates == 0


def _review_graph(env: Env, crm: FakeCRM) -> Any:
    crm.faults.push(Fault.LOSE_RESPONSE)
    graph = build_graph(
        [crm_tools(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    return graph


def test_unresolvable_unknown_interrupts_and_operator_confirms(env: Env) -> None:
    """Scenario 4: no reconciler, no key contract: review; nothing re-sent; confirm completes."""
    crm = FakeCRM()
    graph = _review_graph(env, crm)
    [intr] = pending_interrupts(env, graph, CFG)
    request = intr.value
    [op] = env.ops()
    assert request["operation_id"] == op.operation_id
    assert request["status"] == "unknown"
    assert request["retry_risk"]["duplicate_possible"] is True
    assert set(request["allowed_decisions"]) == {"confirm", "reject", "retry"}
    assert crm.effects == 1
    out = env.invoke(
        graph,
        Command(
            resume={
                "operation_id": op.operation_id,
                "decision": "confirm",
                "by": "alice",
                "reason": "seen in CRM",
            }
        ),
        CFG,
    )
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert crm.effects == 1
    assert tool_messages(out)[0].status == "success"
    assert out["messages"][-1].content == "done"
    resolve = env.ledger_call("events", "default", op.operation_id)[-1]
    assert resolve.actor == "alice"


def test_operator_retry_resends_with_the_same_key(env: Env) -> None:
    """Scenario 4: "retry" sends once more under the same key (the CRM dedupes it)."""
    crm = FakeCRM()
    graph = _review_graph(env, crm)
    [op] = env.ops()
    env.invoke(
        graph,
        Command(
            resume={
                "operation_id": op.operation_id,
                "decision": "retry",
                "by": "bob",
                "reason": "resend",
            }
        ),
        CFG,
    )
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert op.attempts == 2
    assert crm.effects == 1


def test_operator_reject_records_its_author(env: Env) -> None:
    """Scenario 4: "reject" records the rejection with who decided; the model is told."""
    crm = FakeCRM()
    graph = _review_graph(env, crm)
    [op] = env.ops()
    out = env.invoke(
        graph,
        Command(
            resume={
                "operation_id": op.operation_id,
                "decision": "reject",
                "by": "carol",
                "reason": "not applied",
            }
        ),
        CFG,
    )
    [op] = env.ops()
    assert op.status is S.REJECTED
    assert env.ledger_call("events", "default", op.operation_id)[-1].actor == "carol"
    assert tool_messages(out)[0].status == "error"


def test_answer_naming_another_operation_is_refused(env: Env) -> None:
    """An answer for an operation this thread does not own is refused and can be re-answered."""
    crm = FakeCRM()
    graph = _review_graph(env, crm)
    env.refused(
        graph,
        Command(resume={"operation_id": "op-elsewhere", "decision": "confirm", "by": "eve"}),
        CFG,
        "does not own",
    )
    [op] = env.ops()
    assert op.status is S.UNKNOWN
    env.invoke(graph, Command(resume={"decision": "confirm", "by": "alice"}), CFG)
    assert env.ops()[0].status is S.CONFIRMED


def test_out_of_band_resolution_then_resume(env: Env) -> None:
    """A resolution made through the ledger lets invoke(None) finish the thread."""
    from langgraph_effects import Decision, Resolution

    crm = FakeCRM()
    graph = _review_graph(env, crm)
    [op] = env.ops()
    env.ledger_call(
        "resolve",
        "default",
        op.operation_id,
        Resolution(decision=Decision.CONFIRM, by="ops", result={"ok": 1}),
    )
    out = env.invoke(graph, None, CFG)
    assert tool_messages(out)[0].content == '{"ok": 1}'
    assert crm.effects == 1


def test_accepted_notification_stays_unknown(env: Env) -> None:
    """Scenario 5: mail accepted, receipt lost, search lags: stays unknown, goes to review."""
    mail = FakeMail(search_delay=timedelta(hours=1))
    mail.faults.push(Fault.LOSE_RESPONSE)

    def seen(op: Any) -> Evidence:
        hits = mail.search(idempotency_key=op.idempotency_key)
        if hits:
            return Evidence.confirmed("in Sent", result=hits[0])
        return Evidence.inconclusive("Sent search is empty (it lags)")

    @effect("mail.send", target=lambda a: a["to"], reconcile=seen)
    def send(to: str, subject: str, ctx: EffectContext) -> dict[str, Any]:
        """Send a mail."""
        return mail.send(to, subject, "body", idempotency_key=ctx.idempotency_key)

    graph = build_graph(
        [send],
        [call("send", "m1", to="x@y", subject="hi")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    env.invoke(graph, {"messages": [("user", "mail")]}, CFG)
    [op] = env.ops()
    assert op.status is S.UNKNOWN
    assert mail.effects == 1
    [intr] = pending_interrupts(env, graph, CFG)
    assert intr.value["evidence"][0]["kind"] == "inconclusive"


def test_definitive_rejection_needs_no_person(env: Env) -> None:
    """A provider's definitive refusal ends rejected, with an error ToolMessage, no interrupt."""
    crm = FakeCRM()
    crm.faults.push(Fault.REJECT, reason="case is locked")
    graph = build_graph(
        [crm_tools(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    out = env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [op] = env.ops()
    assert op.status is S.REJECTED
    assert crm.effects == 0
    msg = tool_messages(out)[0]
    assert msg.status == "error"
    assert "NOT carried out" in str(msg.content)


def test_transient_refusals_are_retried(env: Env) -> None:
    """A transient refusal (provably not applied) is retried with backoff and then succeeds."""
    crm = FakeCRM()
    crm.faults.push(Fault.TRANSIENT, times=2, retry_after=0.0)
    contract = ProviderContract(backoff_initial=0.0)
    graph = build_graph(
        [crm_tools(crm, contract=contract)],
        [CLOSE_A],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert crm.effects == 1


def test_same_intent_key_with_another_payload_is_refused(env: Env) -> None:
    """Scenario 8: one intent key with another payload: PayloadMismatch, nothing sent."""
    crm = FakeCRM()
    tool = crm_tools(crm, intent_key=lambda a: f"close:{a['case_id']}")
    graph = build_graph([tool], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    other = build_graph(
        [tool],
        [call("close_case", "call-z", case_id="A", resolution="other")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    with pytest.raises(PayloadMismatch):
        env.invoke(
            other, {"messages": [("user", "close A")]}, {"configurable": {"thread_id": "t2"}}
        )
    assert crm.effects == 1
    assert len(env.ops()) == 1


def test_same_intent_key_replays_a_reproposed_call(env: Env) -> None:
    """Scenario 8: a re-proposed call (new tool_call_id), same intent key: one operation."""
    crm = FakeCRM()
    tool = crm_tools(crm, intent_key=lambda a: f"close:{a['case_id']}")
    for n, tc_id in enumerate(["call-1", "call-2"]):
        graph = build_graph(
            [tool],
            [call("close_case", tc_id, case_id="A", resolution="fixed")],
            ledger=env.ledger,
            checkpointer=env.checkpointer,
        )
        env.invoke(
            graph, {"messages": [("user", "close A")]}, {"configurable": {"thread_id": f"t{n}"}}
        )
    assert crm.effects == 1
    assert len(env.ops()) == 1


def _approval_tool(crm: FakeCRM, allowed: dict[str, bool]) -> Any:
    return crm_tools(crm, require_approval=True, authorize=lambda ctx: allowed["ok"])


def test_approval_binds_to_its_operation(env: Env) -> None:
    """require_approval interrupts with the operation id and HITL fields; approve sends once."""
    crm = FakeCRM()
    graph = build_graph(
        [_approval_tool(crm, {"ok": True})],
        [CLOSE_A],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [intr] = pending_interrupts(env, graph, CFG)
    [op] = env.ops()
    assert intr.value["operation_id"] == op.operation_id
    assert intr.value["status"] == "prepared"
    assert intr.value["action_requests"][0]["name"] == "close_case"
    assert crm.effects == 0
    env.invoke(graph, Command(resume={"decisions": [{"type": "approve"}], "by": "ana"}), CFG)
    assert env.ops()[0].status is S.CONFIRMED
    assert crm.effects == 1


def test_edit_is_a_new_operation(env: Env) -> None:
    """A HITL "edit" is a new call: a new operation (the original rejected as replaced)."""
    crm = FakeCRM()
    graph = build_graph(
        [_approval_tool(crm, {"ok": True})],
        [CLOSE_A],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    edit = {
        "type": "edit",
        "edited_action": {"name": "close_case", "args": {"case_id": "A", "resolution": "edited"}},
    }
    out = env.invoke(graph, Command(resume={"decisions": [edit], "by": "ana"}), CFG)
    ops = {o.status: o for o in env.ops()}
    assert set(ops) == {S.REJECTED, S.CONFIRMED}
    assert crm.effects == 1
    assert ops[S.CONFIRMED].payload["resolution"] == "edited"
    assert '"edited"' in str(tool_messages(out)[0].content)
    assert set(out["effect_operations"]) == {o.operation_id for o in ops.values()}


def test_authorization_revoked_while_approval_pending(env: Env) -> None:
    """Scenario 9: authorization revoked before the approved dispatch: rejected, evidence kept."""
    crm = FakeCRM()
    allowed = {"ok": True}
    graph = build_graph(
        [_approval_tool(crm, allowed)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    allowed["ok"] = False
    [op] = env.ops()
    env.invoke(
        graph,
        Command(resume={"operation_id": op.operation_id, "decision": "approve", "by": "alice"}),
        CFG,
    )
    [op] = env.ops()
    assert op.status is S.REJECTED
    assert crm.effects == 0
    kinds = [e.kind for e in env.ledger_call("events", "default", op.operation_id)]
    assert kinds == [EventKind.PREPARE, EventKind.APPROVE, EventKind.REJECT]


def test_authorization_revoked_before_recovery_retry(env: Env) -> None:
    """Scenario 9: an operator's retry meets a revoked authorization: nothing re-sent, and
    the operation stays unknown for a person (no retry offered): the refusal proves nothing
    about the earlier attempt, so it is never "rejected, not carried out"."""
    crm = FakeCRM()
    allowed = {"ok": True}
    crm.faults.push(Fault.LOSE_RESPONSE)
    tool = crm_tools(crm, authorize=lambda ctx: allowed["ok"])
    graph = build_graph([tool], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    allowed["ok"] = False
    env.invoke(graph, Command(resume={"decision": "retry", "by": "bob"}), CFG)
    [op] = env.ops()
    assert op.status is S.UNKNOWN
    assert crm.effects == 1
    events = env.ledger_call("events", "default", op.operation_id)
    assert any(e.kind is EventKind.MARK_UNKNOWN for e in events)
    refusal = events[-1].evidence
    assert refusal is not None
    assert (refusal.source, refusal.kind.value) == ("authorize", "inconclusive")
    [review] = pending_interrupts(env, graph, CFG)
    assert "retry" not in review.value["allowed_decisions"]
    assert "Your retry of operation" in review.value["notice"]  # told why, not just re-asked
    env.invoke(graph, Command(resume={"decision": "reject", "by": "bob"}), CFG)
    assert env.ops()[0].status is S.REJECTED
    assert crm.effects == 1


def test_parallel_sibling_not_rerun_when_one_interrupts(env: Env) -> None:
    """Scenario 10: in one ToolNode task, a finished sibling is replayed, not re-executed."""
    crm = FakeCRM()
    plain = crm_tools(crm)
    gated = effect("crm.close_gated", target=lambda a: a["case_id"], require_approval=True)(
        lambda_tool(crm)
    )
    calls = [CLOSE_A, call("close_gated", "call-b", case_id="B", resolution="r")]
    graph = build_graph(
        [plain, gated], calls, ledger=env.ledger, checkpointer=env.checkpointer, per_call=False
    )
    env.invoke(graph, {"messages": [("user", "close both")]}, CFG)
    # Sync: the sibling finished. Async: gather may cancel it first (it is then released),
    # or its worker thread may still be finishing it: read the count once.
    effects = crm.effects
    assert effects <= 1 if env.is_async else effects == 1
    [intr] = pending_interrupts(env, graph, CFG)
    # Several effect calls share this task, so the answer must name its operation.
    env.refused(graph, Command(resume={"decision": "approve", "by": "alice"}), CFG, "must name")
    answer = {"operation_id": intr.value["operation_id"], "decision": "approve", "by": "alice"}
    env.invoke(graph, Command(resume=answer), CFG)
    assert crm.effects == 2
    assert crm.effects_for("A") == 1
    assert {o.status for o in env.ops()} == {S.CONFIRMED}


def lambda_tool(crm: FakeCRM) -> Any:
    def close_gated(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a case after approval."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return close_gated


def test_two_approvals_each_apply_to_their_own_operation(env: Env) -> None:
    """Scenario 10: answers crossed between positions still apply to the operation they name."""
    crm = FakeCRM()
    gated = effect("crm.close_gated", target=lambda a: a["case_id"], require_approval=True)(
        lambda_tool(crm)
    )
    calls = [
        call("close_gated", "g1", case_id="A", resolution="r"),
        call("close_gated", "g2", case_id="B", resolution="r"),
    ]
    graph = build_graph(
        [gated], calls, ledger=env.ledger, checkpointer=env.checkpointer, per_call=False
    )
    env.invoke(graph, {"messages": [("user", "close both")]}, CFG)
    [first] = pending_interrupts(env, graph, CFG)
    from langgraph_effects.decide import EffectCall

    ids = {
        tc["args"]["case_id"]: EffectCall.build(
            gated.effect_spec,
            tool_name=tc["name"],
            tool_call_id=tc["id"],
            args=tc["args"],
            tenant_id="default",
            workflow_id="t1",
        ).operation_id
        for tc in calls
    }
    other = "B" if first.value["target"] == "A" else "A"
    # The pending request is about one call; the answer names the other (approve it).
    env.invoke(
        graph, Command(resume={"operation_id": ids[other], "decision": "approve", "by": "al"}), CFG
    )
    assert env.ledger_call("get", "default", ids[first.value["target"]]).status is S.PREPARED
    # Whichever call asks next (thread timing decides), each answer names its operation.
    for _ in range(3):
        pending = pending_interrupts(env, graph, CFG)
        if not pending:
            break
        target = pending[0].value["target"]
        decision = "approve" if target == other else "reject"
        env.invoke(
            graph,
            Command(resume={"operation_id": ids[target], "decision": decision, "by": "al"}),
            CFG,
        )
    status = {o.target: o.status for o in env.ops()}
    expected = {other: S.CONFIRMED, first.value["target"]: S.REJECTED}
    assert status == expected
    assert crm.effects_for(other) == 1
    assert crm.effects_for(first.value["target"]) == 0


def test_concurrent_resumes_dispatch_once(env: Env) -> None:
    """Scenario 6 (threads): two resumes of one thread at once: one dispatch."""
    if env.is_async:
        pytest.skip("the two-resumer race is exercised with threads on sync ledgers")
    crm = FakeCRM()
    started, release = threading.Event(), threading.Event()

    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        started.set()
        release.wait(scaled(10))
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    graph = build_graph([close_case], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer)
    graph.interrupt_before_nodes = ["tools"]
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    graph.interrupt_before_nodes = []
    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(env.invoke(graph, None, CFG)))
    first.start()
    assert started.wait(scaled(10))
    second = threading.Thread(target=lambda: results.append(env.invoke(graph, None, CFG)))
    second.start()
    release.set()
    first.join(scaled(20))
    second.join(scaled(20))
    assert crm.effects == 1
    assert env.ops()[0].status is S.CONFIRMED


def test_stale_worker_confirm_is_refused(env: Env) -> None:
    """Scenario 7: a worker whose lease was taken over cannot confirm; the record stays intact."""
    if env.is_async and env.kind != "memory":
        pytest.skip("the tool takes the lease over through the sync ledger")
    crm = FakeCRM()

    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        result = crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)
        op = env.ledger.get("default", ctx.operation_id)
        env.ledger.mark_unknown(
            "default",
            ctx.operation_id,
            token=op.fencing_token,
            reason="taken over by another worker",
            actor="worker-2",
        )
        return result

    graph = build_graph([close_case], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer)
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [op] = env.ops()
    events = env.ledger_call("events", "default", op.operation_id)
    assert EventKind.CONFIRM not in [e.kind for e in events]  # the stale confirm wrote nothing
    assert [e.actor for e in events if e.kind is EventKind.MARK_UNKNOWN] == ["worker-2"]
    # The stale worker's receipt is evidence: the operation resolves confirmed, once.
    assert op.status is S.CONFIRMED
    assert crm.effects == 1


def test_plain_tools_run_as_in_toolnode(env: Env) -> None:
    """A tool without effect metadata runs exactly as in ToolNode and writes no operation."""
    from langchain_core.tools import tool

    @tool
    def search_docs(query: str) -> str:
        """Search the docs."""
        return f"found {query}"

    graph = build_graph(
        [search_docs],
        [call("search_docs", "s1", query="q")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    out = env.invoke(graph, {"messages": [("user", "search")]}, CFG)
    assert tool_messages(out)[0].content == "found q"
    assert env.ops() == []


def test_control_plain_toolnode_duplicates(env: Env) -> None:
    """Scenario 12: a plain ToolNode re-sends after a lost response; the provider counts 2."""
    from langchain_core.tools import tool

    crm = FakeCRM()
    crm.faults.push(Fault.LOSE_RESPONSE)

    @tool
    def close_case(case_id: str, resolution: str) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution)

    graph = build_graph([close_case], [CLOSE_A], plain=True, checkpointer=env.checkpointer)
    with pytest.raises(Exception, match="timed out"):
        env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    env.invoke(graph, None, CFG)
    assert crm.effects > 1


def test_durability_other_than_sync_warns_once(tmp_path: Path) -> None:
    """With durability="async" the node warns (once) that intent_key closes the id gap."""
    import warnings

    from langgraph.checkpoint.memory import InMemorySaver

    from langgraph_effects import InMemoryLedger
    from langgraph_effects.decide import thread as runner_module

    ledger = InMemoryLedger()
    ledger.setup()
    crm = FakeCRM()
    graph = build_graph([crm_tools(crm)], [CLOSE_A], ledger=ledger, checkpointer=InMemorySaver())
    runner_module._durability_warned = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph.invoke({"messages": [("user", "x")]}, CFG, durability="async")
        graph.invoke(
            {"messages": [("user", "x")]}, {"configurable": {"thread_id": "t9"}}, durability="async"
        )
    found = [w for w in caught if issubclass(w.category, runner_module.DurabilityWarning)]
    assert len(found) == 1
    assert "intent_key" in str(found[0].message)


@pytest.mark.parametrize("kept", [True, False], ids=["effect-state", "messages-state"])
def test_durability_exit_acts_on_a_later_request_with_or_without_effect_state(
    tmp_path: Path, kept: bool
) -> None:
    """Under durability="exit" a later request for the same call acts again (2 asked, 2
    acted at the fake CRM): where the state lists the answered operations
    (``EffectState``) and where it does not (``MessagesState``: the first record's run
    says its answer was delivered in the checkpoint saved at exit). The warning names
    ``intent_key`` for re-proposals and says nothing of a lost repeat."""
    import warnings

    from _graphs import State
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    from langgraph_effects import EffectToolNode, InMemoryLedger, route_tool_calls
    from langgraph_effects.decide import thread as runner_module
    from langgraph_effects.testing import ScriptedChatModel

    ledger = InMemoryLedger()
    ledger.setup()
    crm = FakeCRM()
    again = call("close_case", "call-a2", case_id="A", resolution="fixed")
    model = ScriptedChatModel(plan=[[CLOSE_A], [again]])
    builder = StateGraph(State if kept else MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", EffectToolNode([crm_tools(crm)], ledger=ledger))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=InMemorySaver())
    runner_module._durability_warned = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph.invoke({"messages": [("user", "close A")]}, CFG, durability="exit")
        graph.invoke({"messages": [("user", "close A again")]}, CFG, durability="exit")
    [found] = [w for w in caught if issubclass(w.category, runner_module.DurabilityWarning)]
    assert "does not act again" not in str(found.message)
    assert "intent_key per request" not in str(found.message)
    assert "intent_key" in str(found.message)
    assert crm.effects == 2
