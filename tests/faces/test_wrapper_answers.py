"""A wrapper that answers an effect call without running it leaves no claim behind.

Under ``tools_condition`` the node prepares a task's parallel effect calls with one
``prepare_many``, already claimed, before ToolNode fans them out. A user's
``wrap_tool_call`` that answers a call without calling ``execute`` (a policy
guard, a cache) never reaches the decision: the node gives that claim back
(``prepared``: nothing was sent), so the record never waits in ``dispatching``
(where ``stuck`` would list it) and a later run sends it. A middleware listed
after ``EffectMiddleware`` that answers without its handler is recorded
``rejected`` as not sent; listed before it, nothing is prepared at all.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from _graphs import Env, build_graph, call, tool_messages
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage

from langgraph_effects import EffectContext, EffectMiddleware, effect
from langgraph_effects.core.model import OperationStatus, utcnow
from langgraph_effects.ledger.sweep import afind_stuck, find_stuck
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM

S = OperationStatus
CFG = {"configurable": {"thread_id": "guard"}}
CALLS = [
    call("close_case", "call-a", case_id="A", resolution="fixed"),
    call("close_case", "call-b", case_id="B", resolution="fixed"),
]


def close_tool(crm: FakeCRM) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return close_case


class Guard:
    """A user's wrapper: answers itself the calls whose ``key`` (an argument, or ``"id"``: the
    tool-call id) is ``blocked``, and runs the others."""

    def __init__(self, key: str, *blocked: str) -> None:
        self.key = key
        self.blocked = set(blocked)

    def refusal(self, request: Any) -> ToolMessage | None:
        tool_call = request.tool_call
        value = tool_call["id"] if self.key == "id" else tool_call["args"][self.key]
        if value not in self.blocked:
            return None
        return ToolMessage("blocked by policy", tool_call_id=tool_call["id"], status="error")

    def wrap(self, request: Any, execute: Any) -> Any:
        return self.refusal(request) or execute(request)

    async def awrap(self, request: Any, execute: Any) -> Any:
        return self.refusal(request) or await execute(request)


def stuck(env: Env) -> list[str]:
    """The operations ``stuck`` would list an hour from now (every live lease lapsed)."""
    later = utcnow() + timedelta(hours=1)
    if env.is_async:
        found = env.run(afind_stuck(env.ledger, now=later))
    else:
        found = find_stuck(env.ledger, now=later)
    return [s.operation.operation_id for s in found.stuck]


def test_a_call_the_node_wrapper_answers_is_given_back_and_sent_later(env: Env) -> None:
    """Two calls prepared together; the wrapper answers A itself: A's claim is given back
    (``prepared``, never ``stuck``), B acts; replaying the step with A allowed sends A once."""
    crm = FakeCRM()
    guard = Guard("case_id", "A")
    graph = build_graph(
        [close_tool(crm)],
        CALLS,
        ledger=env.ledger,
        checkpointer=env.checkpointer,
        per_call=False,
        node_kwargs={"wrap_tool_call": guard.wrap, "awrap_tool_call": guard.awrap},
    )
    out = env.invoke(graph, {"messages": [("user", "close A and B")]}, CFG)
    by_target = {op.target: op for op in env.ops()}
    assert by_target["A"].status is S.PREPARED  # nothing was sent, and it says so
    assert by_target["B"].status is S.CONFIRMED
    assert (crm.effects_for("A"), crm.effects_for("B")) == (0, 1)
    assert stuck(env) == []
    assert tool_messages(out)[0].content == "blocked by policy"

    guard.blocked.clear()  # the policy now allows A: the same step, run again, sends it
    history = graph.get_state_history(CFG) if not env.is_async else None
    snapshots = (
        list(history) if history is not None else env.run(_alist(graph.aget_state_history(CFG)))
    )
    before = next(s for s in snapshots if s.next == ("tools",))
    env.invoke(graph, None, before.config)
    assert (crm.effects_for("A"), crm.effects_for("B")) == (1, 1)
    assert {op.target: op.status for op in env.ops()} == {"A": S.CONFIRMED, "B": S.CONFIRMED}


async def _alist(items: Any) -> list[Any]:
    return [item async for item in items]


class Blocker(AgentMiddleware[Any, Any, Any]):
    """A middleware answering the calls with ``blocked`` ids itself, without its handler."""

    def __init__(self, *blocked: str) -> None:
        super().__init__()
        self.guard = Guard("id", *blocked)

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return self.guard.wrap(request, handler)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await self.guard.awrap(request, handler)


@pytest.mark.parametrize("blocker_first", [True, False])
def test_a_call_a_middleware_answers_says_not_sent_and_a_later_call_acts(
    env: Env, blocker_first: bool
) -> None:
    """A middleware answering the first call itself, listed before or after EffectMiddleware:
    no record claims it (none, or ``rejected`` as not sent), none is ``stuck``, and the model's
    next call for the same case acts once."""
    crm = FakeCRM()
    first = call("close_case", "c1", case_id="A", resolution="fixed")
    again = call("close_case", "c2", case_id="A", resolution="fixed")
    blocker, effects = Blocker("c1"), EffectMiddleware(ledger=env.ledger)
    agent = create_agent(
        ScriptedChatModel(plan=[[first], [again]]),
        tools=[close_tool(crm)],
        middleware=[blocker, effects] if blocker_first else [effects, blocker],
        checkpointer=env.checkpointer,
    )
    out = env.invoke(agent, {"messages": [("user", "close A")]}, CFG)
    assert crm.effects == 1
    assert tool_messages(out)[0].content == "blocked by policy"
    statuses = sorted((op.tool_call_id, op.status) for op in env.ops())
    if blocker_first:
        assert statuses == [("c2", S.CONFIRMED)]
    else:
        assert statuses == [("c1", S.REJECTED), ("c2", S.CONFIRMED)]
        [refused] = [op for op in env.ops() if op.tool_call_id == "c1"]
        assert "not sent" in (refused.error or "")
    assert stuck(env) == []


@pytest.mark.parametrize(
    "env", [("sqlite", "sync"), ("postgres", "sync")], indirect=True, ids=["sqlite", "pg"]
)
def test_a_call_its_node_never_started_after_a_siblings_error_is_sent_on_resume(env: Env) -> None:
    """Under ``tools_condition`` the task's effect calls are claimed before ToolNode fans
    them out; when a sibling raises, ToolNode's executor cancels the calls not started yet.
    Such a claim was left ``dispatching``: the resume took it over as ``unknown`` and asked
    a person about a call that was never sent (the intended close lost behind a review; 8
    of 40 runs of two id-less calls at load). Now the node gives it back, and the resume
    sends it once.

    One worker (``max_concurrency=1``): the plain tool fails, the slow one takes the
    worker, and the two effect calls after it are cancelled before they start."""
    import time

    from langchain_core.tools import tool

    crm = FakeCRM()
    failures = [RuntimeError("the plain tool fails once")]

    @tool
    def flaky() -> str:
        """Fail the first time."""
        if failures:
            raise failures.pop()
        return "ok"

    @tool
    def slow() -> str:
        """Take the worker a while."""
        time.sleep(0.5)
        return "slow"

    calls = [call("flaky", "call-f"), call("slow", "call-s"), *CALLS]
    graph = build_graph(
        [flaky, slow, close_tool(crm)],
        calls,
        ledger=env.ledger,
        checkpointer=env.checkpointer,
        per_call=False,
        node_kwargs={"handle_tool_errors": False},
    )
    config = {"configurable": {"thread_id": "never-ran"}, "max_concurrency": 1}
    with pytest.raises(RuntimeError, match="fails once"):
        env.invoke(graph, {"messages": [("user", "close A")]}, config)
    assert crm.effects == 0
    assert [op.status for op in env.ops()] == [S.PREPARED] * 2  # given back: nothing sent
    env.invoke(graph, None, config)
    assert (crm.effects_for("A"), crm.effects_for("B")) == (1, 1)
    assert [op.status for op in env.ops()] == [S.CONFIRMED] * 2
