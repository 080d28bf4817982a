"""Rows 4, 7 and 9 of issue 22: parallel branches, no checkpointer, forks and replays.

Two tool nodes issuing the same call (even the same id) in one superstep or one step
apart act twice, as a plain ``ToolNode`` does: the count never depends on scheduling.
A graph without a checkpointer protects within one invoke only, says so once
(``NoCheckpointerWarning``), and never replays an earlier invoke's request. Time
travel replays an answer from before it was delivered (a ``ToolNode`` sends again),
unless the effect says ``forks="new"``; a fork after the answer that asks again acts.
"""

from __future__ import annotations

from typing import Any

import pytest
from _graphs import Env, State
from _identity_tools import CFG, agent_graph, ask, close_tool, tool_node
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import RetryPolicy, Send

from langgraph_effects import NoCheckpointerWarning
from langgraph_effects.decide import identity
from langgraph_effects.testing.providers import FakeCRM

CLOSE_A = {"name": "close_case", "args": {"case_id": "A"}, "id": "call_0", "type": "tool_call"}


def branches_graph(env: Env, crm: FakeCRM, *, plain: bool, apart: bool) -> Any:
    """``tools_a`` and ``tools_b`` both close case A (same id): in one superstep, or
    ``tools_b`` one step after ``tools_a``."""
    tools = [close_tool(crm, plain=plain)]

    def start(state: State) -> list[Send]:
        first = [Send("tools_a", [CLOSE_A])]
        return first if apart else [*first, Send("tools_b", [CLOSE_A])]

    builder = StateGraph(State)
    builder.add_node("tools_a", tool_node(env, tools, plain, name="tools_a"))
    builder.add_node("tools_b", tool_node(env, tools, plain, name="tools_b"))
    builder.add_conditional_edges(START, start, ["tools_a", "tools_b"])
    if apart:
        builder.add_conditional_edges("tools_a", lambda s: [Send("tools_b", [CLOSE_A])])
    else:
        builder.add_edge("tools_a", END)
    builder.add_edge("tools_b", END)
    return builder.compile(checkpointer=env.checkpointer)


@pytest.mark.parametrize("apart", [False, True], ids=["one-superstep", "one-step-apart"])
@pytest.mark.parametrize("plain", [False, True], ids=["effects", "toolnode"])
def test_two_tool_nodes_issuing_the_same_call_act_twice(
    env: Env, crm: FakeCRM, plain: bool, apart: bool
) -> None:
    graph = branches_graph(env, crm, plain=plain, apart=apart)
    ask(env, graph, "close A on both branches")
    assert crm.effects == 2
    # A re-run of the thread from where it stands sends nothing more.
    env.invoke(graph, None, CFG)
    assert crm.effects == 2


# --------------------------------------------------------------------------- no checkpointer


@pytest.fixture
def fresh_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity, "_warned_no_checkpointer", False)


@pytest.mark.usefixtures("fresh_warning")
@pytest.mark.parametrize("plain", [False, True], ids=["effects", "toolnode"])
def test_without_a_checkpointer_next_weeks_request_is_a_new_operation(
    env: Env, crm: FakeCRM, plain: bool
) -> None:
    """A stateless service: each request its own invoke, no thread kept between them."""
    builder = StateGraph(State)
    builder.add_node("tools", tool_node(env, [close_tool(crm, plain=plain)], plain))
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    graph = builder.compile()  # no checkpointer
    request = {"messages": [AIMessage(content="", tool_calls=[CLOSE_A])]}
    with pytest.warns(NoCheckpointerWarning, match="intent_key") if not plain else _nothing():
        env.invoke(graph, request, {}, durability=None)
    env.invoke(graph, request, {}, durability=None)
    assert crm.effects == 2


@pytest.mark.usefixtures("fresh_warning")
@pytest.mark.parametrize("plain", [False, True], ids=["effects", "toolnode"])
def test_without_a_checkpointer_a_retry_of_the_task_is_still_one_operation(
    env: Env, crm: FakeCRM, plain: bool
) -> None:
    """Within one invoke protection holds: a RetryPolicy re-run replays the effect."""
    failures = [1]

    @tool
    def flaky(x: int) -> str:
        """Fails once."""
        if failures:
            failures.pop()
            raise ConnectionError("flaky")
        return "ok"

    calls = [CLOSE_A, {"name": "flaky", "args": {"x": 1}, "id": "c2", "type": "tool_call"}]
    builder = StateGraph(State)
    node = tool_node(env, [close_tool(crm, plain=plain), flaky], plain, handle_tool_errors=False)
    builder.add_node("tools", node, retry_policy=RetryPolicy(max_attempts=2, initial_interval=0))
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    graph = builder.compile()
    with pytest.warns(NoCheckpointerWarning) if not plain else _nothing():
        env.invoke(
            graph, {"messages": [AIMessage(content="", tool_calls=calls)]}, {}, durability=None
        )
    assert crm.effects == (2 if plain else 1)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_langgraph_hands_a_task_its_checkpointer_and_checkpoint_map() -> None:
    """The private config key the lineage is read from (``decide.identity``): fails loudly
    when LangGraph moves it, instead of every call silently losing its lineage."""
    from langgraph.checkpoint.memory import InMemorySaver

    seen: dict[str, Any] = {}

    def node(state: State) -> dict[str, Any]:
        conf = get_config()["configurable"]
        seen.update(saver=conf.get(identity.CHECKPOINTER_KEY), steps=conf.get("checkpoint_map"))
        return {}

    saver = InMemorySaver()
    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    builder.compile(checkpointer=saver).invoke({"messages": []}, CFG)
    assert seen["saver"] is saver
    assert list(seen["steps"]) == [""]
    conf = {"thread_id": "t1", "checkpoint_map": seen["steps"], identity.CHECKPOINTER_KEY: saver}
    timeline = identity.timeline_of({"configurable": conf}, "task-1")
    assert timeline is not None
    assert timeline.saver is saver
    assert timeline.steps == tuple(seen["steps"].items())


# --------------------------------------------------------------------------- forks, replays


def _history(env: Env, graph: Any) -> list[Any]:
    if env.is_async:

        async def collect() -> list[Any]:
            return [s async for s in graph.aget_state_history(CFG)]

        return list(env.run(collect()))
    return list(graph.get_state_history(CFG))


def _update(env: Env, graph: Any, config: Any, values: dict[str, Any]) -> Any:
    if env.is_async:
        return env.run(graph.aupdate_state(config, values))
    return graph.update_state(config, values)


@pytest.mark.parametrize(
    ("plain", "forks", "sent"),
    [(False, "replay", 1), (False, "new", 2), (True, None, 2)],
    ids=["effects", "effects-forks-new", "toolnode"],
)
def test_a_replay_from_before_the_answer_replays_it_unless_forks_new(
    env: Env, crm: FakeCRM, plain: bool, forks: str | None, sent: int
) -> None:
    kwargs = {} if forks is None else {"forks": forks}
    graph = agent_graph(env, crm, plain=plain, **kwargs)
    ask(env, graph)
    before = next(s for s in _history(env, graph) if s.next == ("tools",))
    env.invoke(graph, None, before.config)
    assert crm.effects == sent
    # A fork through update_state from the same point does the same.
    fork = _update(env, graph, before.config, {})
    env.invoke(graph, None, fork)
    assert crm.effects == (1 if sent == 1 else 3)


@pytest.mark.parametrize(
    ("plain", "forks", "second"),
    [(False, "replay", 2), (False, "new", 3), (True, None, 3)],
    ids=["effects", "effects-forks-new", "toolnode"],
)
def test_a_fork_after_the_answer_that_asks_again_acts(
    env: Env, crm: FakeCRM, plain: bool, forks: str | None, second: int
) -> None:
    """ "Resend it, the first one bounced", sent as new input on a checkpoint after the
    answer (a fork of the answered thread): a new operation. The same request on a
    second fork of that checkpoint is, for the first fork's resend, a fork from before
    its answer: replayed, unless ``forks="new"``."""
    kwargs = {} if forks is None else {"forks": forks}
    graph = agent_graph(env, crm, plain=plain, **kwargs)
    ask(env, graph)
    after = _history(env, graph)[0]
    assert after.next == ()
    env.invoke(graph, {"messages": [HumanMessage("resend it, it bounced")]}, after.config)
    assert crm.effects == 2
    env.invoke(graph, {"messages": [HumanMessage("resend it, it bounced")]}, after.config)
    assert crm.effects == second


def test_a_fork_whose_router_is_tools_condition_replays_alike(env: Env, crm: FakeCRM) -> None:
    """The same rule under ``tools_condition`` (one task for the AIMessage's calls)."""
    graph = agent_graph(env, crm, plain=False, router=tools_condition)
    ask(env, graph)
    before = next(s for s in _history(env, graph) if s.next == ("tools",))
    env.invoke(graph, None, before.config)
    assert crm.effects == 1
