"""Who decided, what else is open on the target, and how each answer was obtained (issue 14).

- **Identity**: an answer is recorded under the run's authenticated user (LangGraph
  Server's ``config["configurable"]["langgraph_auth_user"]``), else under its ``by``;
  one naming nobody is refused unless the node accepts anonymous answers.
- **Open operations**: an approval or review request lists the other unresolved
  operations of its tenant, action and target (a lost thread's refund, stuck).
- **Traces**: every effect ToolMessage carries ``response_metadata["langgraph_effects"]``
  (operation id, status, ``via``), its content unchanged.

Real graphs on real ledgers; effects counted at a fake CRM. The server end of identity
is in ``tests/test_server.py``.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _graphs import Env
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool as as_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from langgraph_effects import (
    EffectContext,
    EffectState,
    EffectToolNode,
    Evidence,
    InvalidAnswer,
    LeaseOwner,
    Operation,
    OperationStatus,
    effect,
    route_tool_calls,
)
from langgraph_effects.core.model import Decision
from langgraph_effects.decide.answers import authenticated_user, identify
from langgraph_effects.review import Answer
from langgraph_effects.testing.contract import make_draft
from langgraph_effects.testing.faults import CrashPlan, CrashPoint, InjectedCrash
from langgraph_effects.testing.providers import FakeCRM, Fault

S = OperationStatus
T = "default"
BACKENDS = [("memory", "sync"), ("sqlite", "async"), ("postgres", "sync")]


@pytest.fixture
def crm(tmp_path: Path) -> FakeCRM:
    return FakeCRM(path=tmp_path / "crm.db")


class State(MessagesState, EffectState):
    pass


def refund_tool(crm: FakeCRM, **kwargs: Any) -> Any:
    @effect("pay.refund", target=lambda a: a["order_id"], **kwargs)
    def refund(order_id: str, amount: int, ctx: EffectContext) -> str:
        """Refund an order."""
        crm.close_case(order_id, f"refund {amount}")  # no key: every send is an effect
        return f"refunded {amount} on {order_id}"

    return refund


def graph_of(env: Env, node: Any, *, routed: bool = True) -> Any:
    """START -> tools -> END: the input is the AIMessage whose calls the node answers."""
    builder = StateGraph(State)
    builder.add_node("tools", node)
    if routed:
        builder.add_conditional_edges(START, route_tool_calls, ["tools", END])
    else:
        builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=env.checkpointer)


def asking(*orders: str, amount: int = 10) -> dict[str, Any]:
    calls = [
        {"name": "refund", "args": {"order_id": o, "amount": amount}, "id": f"call-{o}"}
        for o in orders
    ]
    return {"messages": [AIMessage("", tool_calls=calls, id="ai-1")]}


def config(thread: str, user: Any = None) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": thread}
    if user is not None:
        configurable["langgraph_auth_user"] = user
    return {"configurable": configurable}


def pending(env: Env, graph: Any, cfg: dict[str, Any]) -> list[Any]:
    state = graph.get_state(cfg) if not env.is_async else env.run(graph.aget_state(cfg))
    return [i for task in state.tasks for i in task.interrupts]


def answers(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def trace(message: ToolMessage) -> dict[str, Any]:
    return dict(message.response_metadata["langgraph_effects"])


def last_event(env: Env, op_id: str) -> Any:
    return env.ledger_call("events", T, op_id)[-1]


# -- identity: who decided ------------------------------------------------------------


class _User:
    """What LangGraph Server hands the graph: a user object with identity and flags."""

    def __init__(self, identity: str, *, is_authenticated: bool = True) -> None:
        self.identity = identity
        self.is_authenticated = is_authenticated
        self.display_name = identity.title()


def test_the_authenticated_user_is_read_from_the_servers_config() -> None:
    """The server's user object or its serialized dict names the user; an unauthenticated
    user, an empty identity or no user at all is nobody."""
    assert authenticated_user(config("t", _User("alice"))) == "alice"
    assert authenticated_user(config("t", {"identity": "bob", "is_authenticated": True})) == "bob"
    assert authenticated_user(config("t", {"identity": "carol"})) == "carol"
    assert authenticated_user(config("t", _User("visitor", is_authenticated=False))) is None
    assert authenticated_user(config("t", {"identity": ""})) is None
    assert authenticated_user(config("t")) is None
    assert authenticated_user(None) is None


def test_identify_prefers_the_authenticated_user_and_keeps_a_differing_claim() -> None:
    """The user wins over ``by`` (kept as claimed_by when it differs); ``by`` alone is taken;
    nobody is refused unless anonymous answers are accepted."""
    claimed = Answer(operation_id="op", decision=Decision.APPROVE, by="mallory")
    got = identify(claimed, user="alice", anonymous=False)
    assert (got.by, got.claimed_by, got.verified_by) == (
        "alice",
        "mallory",
        "langgraph-auth:alice",
    )
    same = identify(
        Answer(operation_id="op", decision=Decision.APPROVE, by="alice"),
        user="alice",
        anonymous=False,
    )
    assert (same.by, same.claimed_by) == ("alice", None)
    assert identify(claimed, user=None, anonymous=False).by == "mallory"
    nobody = Answer(operation_id="op", decision=Decision.APPROVE, by=None)
    assert identify(nobody, user=None, anonymous=True).by == "anonymous"
    with pytest.raises(InvalidAnswer, match="who decides"):
        identify(nobody, user=None, anonymous=False)


def test_an_approval_is_recorded_under_the_authenticated_user(env: Env, crm: FakeCRM) -> None:
    """Answered under an authenticated user: the event's actor is that user, the name the
    answer gave is kept as claimed_by; a HITL-shaped answer without ``by`` needs no name."""
    graph = graph_of(
        env, EffectToolNode([refund_tool(crm, require_approval=True)], ledger=env.ledger)
    )
    env.invoke(graph, asking("order-1", "order-2"), config("t1"))
    asked = {i.value["target"]: i for i in pending(env, graph, config("t1"))}
    first = asked["order-1"].value["operation_id"]
    second = asked["order-2"].value["operation_id"]
    resume = {
        asked["order-1"].id: {"operation_id": first, "decision": "approve", "by": "mallory"},
        asked["order-2"].id: {"operation_id": second, "decisions": [{"type": "approve"}]},
    }
    out = env.invoke(graph, Command(resume=resume), config("t1", _User("alice")))
    assert {m.status for m in answers(out)} == {"success"}
    assert crm.effects == 2
    approved = next(e for e in env.ledger_call("events", T, first) if e.kind.value == "approve")
    assert approved.actor == "alice"
    assert approved.detail["claimed_by"] == "mallory"
    assert approved.detail["verified_by"] == "langgraph-auth:alice"
    other = next(e for e in env.ledger_call("events", T, second) if e.kind.value == "approve")
    assert other.actor == "alice"
    assert "claimed_by" not in other.detail
    assert env.ledger_call("get", T, first).authorization_ref == "approved-by:alice"


def test_an_answer_naming_nobody_is_refused_unless_the_node_accepts_anonymous_answers(
    env: Env, crm: FakeCRM
) -> None:
    """No ``by`` and no authenticated user: refused before it is saved (nothing recorded,
    the request still open); a node with ``anonymous_answers=True`` records ``anonymous``."""
    tool = refund_tool(crm, require_approval=True)
    strict = graph_of(env, EffectToolNode([tool], ledger=env.ledger))
    env.invoke(strict, asking("order-1"), config("t1"))
    [ask] = pending(env, strict, config("t1"))
    env.refused(
        strict, Command(resume={"decisions": [{"type": "approve"}]}), config("t1"), "who decides"
    )
    op = env.ledger_call("get", T, ask.value["operation_id"])
    assert (op.status, op.authorization_ref, crm.effects) == (S.PREPARED, None, 0)
    assert [i.id for i in pending(env, strict, config("t1"))] == [ask.id]

    lenient = graph_of(env, EffectToolNode([tool], ledger=env.ledger, anonymous_answers=True))
    env.invoke(lenient, asking("order-2"), config("t2"))
    env.invoke(lenient, Command(resume={"decisions": [{"type": "approve"}]}), config("t2"))
    [done] = [o for o in env.ops() if o.target == "order-2"]
    assert done.status is S.CONFIRMED
    assert done.authorization_ref == "approved-by:anonymous"
    assert crm.effects == 1


def test_a_review_is_recorded_under_the_authenticated_user(env: Env, crm: FakeCRM) -> None:
    """A review of an unknown outcome, answered under a user: resolved by that user, verified."""
    crm.faults.script([Fault.LOSE_RESPONSE])
    graph = graph_of(env, EffectToolNode([refund_tool(crm)], ledger=env.ledger))
    env.invoke(graph, asking("order-1"), config("t1"))
    [review] = pending(env, graph, config("t1"))
    op_id = review.value["operation_id"]
    answer = {"operation_id": op_id, "decision": "confirm", "reason": "seen in the CRM"}
    out = env.invoke(graph, Command(resume=answer), config("t1", {"identity": "ana"}))
    event = last_event(env, op_id)
    assert (event.actor, event.to_status) == ("ana", S.CONFIRMED)
    assert event.detail["verified_by"] == "langgraph-auth:ana"
    assert trace(answers(out)[0])["via"] == "reviewed"
    assert crm.effects == 1


# -- open operations where a person decides ----------------------------------------


def test_a_new_threads_approval_names_the_refund_a_lost_thread_left_open(
    env: Env, crm: FakeCRM
) -> None:
    """Thread 1 refunded order-42, lost the provider's answer and was abandoned at its review
    (unknown); another worker died mid-refund (dispatching). Thread 2 asks to refund order-42
    again: its approval request names both; a request for another order names none."""
    crm.faults.script([Fault.LOSE_RESPONSE])
    refund = refund_tool(crm, require_approval=True)
    graph = graph_of(env, EffectToolNode([refund], ledger=env.ledger))
    env.invoke(graph, asking("order-42"), config("lost"))
    [approval] = pending(env, graph, config("lost"))
    assert approval.value["open_operations"] == []
    answer = {"operation_id": approval.value["operation_id"], "decision": "approve", "by": "ana"}
    env.invoke(graph, Command(resume=answer), config("lost"))
    [review] = pending(env, graph, config("lost"))
    lost = review.value["operation_id"]
    assert env.ledger_call("get", T, lost).status is S.UNKNOWN  # the thread is abandoned here
    dead = LeaseOwner(host="elsewhere", pid=1, started_at=1.0, nonce="gone")
    stuck = make_draft("op-stuck", tenant_id=T, action="pay.refund", target="order-42")
    env.ledger_call("prepare", stuck, owner=dead)

    env.invoke(graph, asking("order-42", "order-7"), config("new"))
    asked = {i.value["target"]: i.value for i in pending(env, graph, config("new"))}
    request = asked["order-42"]
    listed = {o["operation_id"]: o for o in request["open_operations"]}
    assert set(listed) == {lost, "op-stuck"}
    assert request["open_operations_total"] == 2
    assert (listed[lost]["status"], listed[lost]["workflow_id"]) == ("unknown", "lost")
    assert listed["op-stuck"]["status"] == "dispatching"
    assert "pay.refund order-42 is still unknown since" in listed[lost]["summary"]
    description = request["action_requests"][0]["description"]
    assert "2 other unresolved operation(s) on this target" in description
    assert asked["order-7"]["open_operations"] == []
    assert crm.effects == 1  # nothing sent by asking


def test_a_review_names_the_other_open_operations_on_its_target(env: Env, crm: FakeCRM) -> None:
    """A review request lists the other open refunds of its order, never itself."""
    crm.faults.script([Fault.LOSE_RESPONSE])
    env.ledger_call(
        "prepare", make_draft("op-waiting", tenant_id=T, action="pay.refund", target="order-42")
    )
    graph = graph_of(env, EffectToolNode([refund_tool(crm)], ledger=env.ledger))
    env.invoke(graph, asking("order-42"), config("t1"))
    [review] = pending(env, graph, config("t1"))
    assert review.value["kind"] == "effect_review"
    assert [o["operation_id"] for o in review.value["open_operations"]] == ["op-waiting"]
    assert review.value["open_operations_total"] == 1


# -- traces: how each answer was obtained ------------------------------------------


def test_a_first_dispatch_says_dispatched_and_reads_as_toolnodes_message(
    env: Env, crm: FakeCRM
) -> None:
    """First run: ``via: dispatched``; the message is otherwise the one ToolNode makes."""
    tool = refund_tool(crm)
    out = env.invoke(
        graph_of(env, EffectToolNode([tool], ledger=env.ledger)), asking("o-1"), config("t1")
    )
    [ours] = answers(out)
    [op] = env.ops()
    assert trace(ours) == {
        "operation_id": op.operation_id,
        "status": "confirmed",
        "via": "dispatched",
    }

    @as_tool
    def refund(order_id: str, amount: int) -> str:
        """Refund an order."""
        return f"refunded {amount} on {order_id}"

    plain = graph_of(env, ToolNode([refund]))
    [theirs] = answers(env.invoke(plain, asking("o-1"), config("plain")))
    assert theirs.response_metadata == {}
    assert ours.model_copy(update={"response_metadata": {}, "id": None}) == theirs.model_copy(
        update={"id": None}
    )


def test_a_replay_after_a_fork_says_replayed(env: Env, crm: FakeCRM) -> None:
    """Time travel to before the tools ran: the ledger answers, ``via: replayed``, one effect."""
    graph = graph_of(env, EffectToolNode([refund_tool(crm)], ledger=env.ledger))
    env.invoke(graph, asking("o-1"), config("t1"))
    if env.is_async:

        async def collect() -> list[Any]:
            return [s async for s in graph.aget_state_history(config("t1"))]

        history = env.run(collect())
    else:
        history = list(graph.get_state_history(config("t1")))
    before = next(s for s in history if s.next == ("tools",))
    out = env.invoke(graph, None, before.config)
    [message] = answers(out)
    assert (trace(message)["via"], trace(message)["status"]) == ("replayed", "confirmed")
    assert crm.effects == 1


def test_an_outcome_settled_by_the_reconciler_says_reconciled(env: Env, crm: FakeCRM) -> None:
    """The provider acted and the answer was lost; the reconciler finds the refund: ``via:
    reconciled``, confirmed, one effect."""
    crm.faults.script([Fault.LOSE_RESPONSE])

    def found(op: Operation) -> Evidence:
        return Evidence.confirmed(result="refunded (seen by the reconciler)")

    graph = graph_of(env, EffectToolNode([refund_tool(crm, reconcile=found)], ledger=env.ledger))
    out = env.invoke(graph, asking("o-1"), config("t1"))
    [message] = answers(out)
    assert (trace(message)["via"], trace(message)["status"]) == ("reconciled", "confirmed")
    assert crm.effects == 1


def test_a_crash_after_the_provider_acted_is_reconciled_on_resume_and_says_so(
    env: Env, crm: FakeCRM
) -> None:
    """The process dies after the provider acted, before the receipt (an in-process crash:
    the ledger row and the checkpoint stay as a real one leaves them); resumed after the
    lease lapsed, the operation is taken over and the reconciler finds the refund: ``via:
    reconciled``, one effect."""
    if env.is_async:
        pytest.skip("the in-process crash (a BaseException) is raised through the sync driver")

    def found(op: Operation) -> Evidence:
        seen = crm.get_case(op.target or "")
        if seen["status"] == "closed":
            return Evidence.confirmed(result=f"refunded (seen: {seen['resolution']})")
        return Evidence.inconclusive("not in the CRM")

    node = EffectToolNode(
        [refund_tool(crm, reconcile=found)], ledger=env.ledger, lease_for=timedelta(seconds=0.3)
    )
    graph = graph_of(env, node)
    with CrashPlan.arm(CrashPoint.AFTER_PROVIDER, mode="raise"), pytest.raises(InjectedCrash):
        env.invoke(graph, asking("o-1"), config("t1"))
    [op] = env.ops()
    assert (op.status, crm.effects) == (S.DISPATCHING, 1)
    time.sleep(0.4)  # the dead run's lease lapses (our own pid is alive: not provably dead)
    [message] = answers(env.invoke(graph, None, config("t1")))
    assert (trace(message)["via"], trace(message)["status"]) == ("reconciled", "confirmed")
    assert crm.effects == 1
    kinds = [e.kind.value for e in env.ledger_call("events", T, op.operation_id)]
    assert "mark_unknown" in kinds


def test_a_refusal_by_authorize_says_refused(env: Env, crm: FakeCRM) -> None:
    """The effect's authorize hook says no before any dispatch: ``via: refused``, nothing sent."""
    graph = graph_of(
        env, EffectToolNode([refund_tool(crm, authorize=lambda ctx: False)], ledger=env.ledger)
    )
    [message] = answers(env.invoke(graph, asking("o-1"), config("t1")))
    assert (trace(message)["via"], trace(message)["status"]) == ("refused", "rejected")
    assert crm.effects == 0


def test_a_batch_of_calls_in_one_task_is_traced_and_the_option_turns_it_off(
    env: Env, crm: FakeCRM
) -> None:
    """Two calls in one task (receipts confirmed together): each message says dispatched;
    ``trace_metadata=False`` gives messages exactly as ToolNode makes them."""
    tool = refund_tool(crm)
    graph = graph_of(env, EffectToolNode([tool], ledger=env.ledger), routed=False)
    messages = answers(env.invoke(graph, asking("o-1", "o-2"), config("t1")))
    assert [trace(m)["via"] for m in messages] == ["dispatched", "dispatched"]
    bare = graph_of(env, EffectToolNode([tool], ledger=env.ledger, trace_metadata=False))
    [message] = answers(env.invoke(bare, asking("o-3"), config("t2")))
    assert message.response_metadata == {}
    assert crm.effects == 3


def test_the_cli_shows_who_approved_as_verified_and_as_claimed(crm: FakeCRM) -> None:
    """``langgraph-effects show``: the approval's actor is the authenticated user, and the
    name the answer gave is printed beside it (how it was verified: ``--json``)."""
    from typer.testing import CliRunner

    from langgraph_effects.cli import app

    env = Env("memory", "sync")
    try:
        graph = graph_of(
            env, EffectToolNode([refund_tool(crm, require_approval=True)], ledger=env.ledger)
        )
        env.invoke(graph, asking("order-1"), config("t1"))
        [ask] = pending(env, graph, config("t1"))
        op_id = ask.value["operation_id"]
        answer = {"operation_id": op_id, "decision": "approve", "by": "mallory"}
        env.invoke(graph, Command(resume=answer), config("t1", _User("alice")))
        shown = CliRunner().invoke(
            # A wide terminal: at 80 columns the CLI cuts free text (docs/cli.md).
            app,
            ["show", op_id, "--tenant", T],
            obj=env.ledger,
            env={"LGE_DB": None, "COLUMNS": "300"},
        )
    finally:
        env.close()
    assert shown.exit_code == 0, shown.output
    [line] = [ln for ln in shown.output.splitlines() if "prepared -> prepared" in ln]
    assert "by alice" in line
    assert line.endswith("[given as mallory]")
