"""Rows 1, 5 and 6 of issue 22: a request asked again after its answer acts again.

Whatever the thread's messages hold by then (trimmed by a node returning
``RemoveMessage``, removed with ``update_state``, summarized by
``SummarizationMiddleware``) and whatever id the model gives the call (a reused
``call_0``, an empty id, hand-made ``Send`` ids ``mail-0 ...``): 2 asked, 2 acted,
as with a plain ``ToolNode`` beside it; and a re-run of the same task still acts once.
"""

from __future__ import annotations

from typing import Any

import pytest
from _graphs import Env, State
from _identity_tools import CFG, agent_graph, ask, close_tool, proposer, tool_node
from langchain_core.messages import (
    AIMessage,
    RemoveMessage,
    ToolMessage,
)
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, Send

from langgraph_effects import EffectToolNode, route_tool_calls
from langgraph_effects.testing.providers import FakeCRM


@pytest.mark.parametrize("plain", [False, True], ids=["effects", "toolnode"])
def test_a_request_repeated_after_removemessage_trimming_acts_again(
    env: Env, crm: FakeCRM, plain: bool
) -> None:
    graph = agent_graph(env, crm, plain=plain, trim=True)
    ask(env, graph)
    ask(env, graph, "close case A again, please")
    assert crm.effects == 2


@pytest.mark.parametrize("plain", [False, True], ids=["effects", "toolnode"])
def test_a_request_repeated_after_update_state_removed_the_exchange_acts_again(
    env: Env, crm: FakeCRM, plain: bool
) -> None:
    graph = agent_graph(env, crm, plain=plain)
    out = ask(env, graph)
    removed = [RemoveMessage(id=m.id) for m in out["messages"] if m.id is not None]
    if env.is_async:
        env.run(graph.aupdate_state(CFG, {"messages": removed}))
    else:
        graph.update_state(CFG, {"messages": removed})
    ask(env, graph, "close case A again")
    assert crm.effects == 2


@pytest.mark.parametrize("ids", ["reused", "empty"])
@pytest.mark.parametrize("plain", [False, True], ids=["effects", "toolnode"])
def test_a_reused_or_empty_call_id_never_hides_a_new_call(
    env: Env, crm: FakeCRM, plain: bool, ids: str
) -> None:
    """``call_0`` (or ``""``) every turn; ``tools_condition`` runs every call of the
    AIMessage (``route_tool_calls``' routing of reused ids is its own test)."""
    graph = agent_graph(env, crm, plain=plain, ids=ids, router=tools_condition)
    ask(env, graph)
    ask(env, graph, "and again")
    assert crm.effects == 2
    if not plain:
        assert len(env.ops()) == 2


def fanout_graph(env: Env, crm: FakeCRM, *, plain: bool) -> Any:
    """A node that sends five mails (closes five cases) with hand-made ids ``mail-<i>``."""
    tools = [close_tool(crm, plain=plain)]

    def plan(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage(content="sending")]}

    def fan_out(state: State) -> list[Send]:
        return [
            Send("tools", [{"name": "close_case", "args": {"case_id": f"C{i}"},
                            "id": f"mail-{i}", "type": "tool_call"}])
            for i in range(5)
        ]  # fmt: skip

    builder = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_node("tools", tool_node(env, tools, plain))
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", fan_out, ["tools"])
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=env.checkpointer)


@pytest.mark.parametrize("plain", [False, True], ids=["effects", "toolnode"])
def test_a_second_hand_made_send_fan_out_sends_all_again(
    env: Env, crm: FakeCRM, plain: bool
) -> None:
    graph = fanout_graph(env, crm, plain=plain)
    ask(env, graph, "send the five mails")
    assert crm.effects == 5
    ask(env, graph, "send them again")
    assert crm.effects == 10
    assert all(crm.effects_for(f"C{i}") == 2 for i in range(5))


@pytest.mark.parametrize("plain", [False, True], ids=["effects", "toolnode"])
def test_the_same_task_re_run_is_the_same_operation(env: Env, crm: FakeCRM, plain: bool) -> None:
    """The other half of the rows above: a RetryPolicy re-run of the task whose plain
    sibling failed replays the effect (the same task id); a ToolNode sends it twice."""
    from langchain_core.tools import tool
    from langgraph.types import RetryPolicy

    failures = [1]

    @tool
    def flaky(x: int) -> str:
        """Fails once."""
        if failures:
            failures.pop()
            raise ConnectionError("flaky")
        return "ok"

    def agent(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        if isinstance(last, ToolMessage):
            return {"messages": [AIMessage(content="done")]}
        calls = [
            {"name": "close_case", "args": {"case_id": "A"}, "id": "c1"},
            {"name": "flaky", "args": {"x": 1}, "id": "c2"},
        ]
        return {"messages": [AIMessage(content="", tool_calls=calls, id="ai-1")]}

    tools = [close_tool(crm, plain=plain), flaky]
    node = (
        ToolNode(tools, handle_tool_errors=False)
        if plain
        else EffectToolNode(tools, ledger=env.ledger, handle_tool_errors=False)
    )
    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", node, retry_policy=RetryPolicy(max_attempts=2, initial_interval=0))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=env.checkpointer)
    ask(env, graph)
    assert crm.effects == (2 if plain else 1)
    assert not failures


@pytest.mark.parametrize("plain", [False, True], ids=["effects", "toolnode"])
def test_a_request_repeated_after_summarization_acts_again(
    env: Env, crm: FakeCRM, plain: bool
) -> None:
    """``create_agent`` with ``SummarizationMiddleware``: the first exchange is summarized
    away (``RemoveMessage(REMOVE_ALL_MESSAGES)``) before the same request comes again."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware

    from langgraph_effects import EffectMiddleware
    from langgraph_effects.testing import ScriptedChatModel

    summarize = SummarizationMiddleware(
        model=ScriptedChatModel(final="the user had case A closed"),
        trigger=("messages", 4),
        keep=("messages", 1),
    )
    middleware: list[Any] = [summarize]
    if not plain:
        middleware.append(EffectMiddleware(ledger=env.ledger))
    agent = create_agent(
        proposer("fresh"),
        tools=[close_tool(crm, plain=plain)],
        middleware=middleware,
        checkpointer=env.checkpointer,
    )
    ask(env, agent)
    out = ask(env, agent, "close case A again, please")
    assert not any(
        isinstance(m, ToolMessage) and m.tool_call_id == "call-1" for m in out["messages"]
    )  # the first answer was summarized away
    assert crm.effects == 2


TWIN_IDS = {"distinct": ["twin-1", "twin-2"], "empty": ["", ""]}
"""The ids of two identical calls in one AIMessage: the model's own, or ``""`` for both."""

FACES = ["tools_condition", "route_tool_calls", "create_agent"]
"""One task for both calls (``tools_condition``), a task per call (``route_tool_calls``), and
``create_agent`` with ``EffectMiddleware`` (a task per call)."""


def twins_graph(env: Env, crm: FakeCRM, face: str, ids: list[Any], plain: bool = False) -> Any:
    """agent -> tools -> agent, the model proposing two identical calls with ``ids`` after
    the human message (kept as given: a ``ScriptedChatModel`` plan would fill empty ids)."""
    calls = [{"name": "close_case", "args": {"case_id": "A"}, "id": i} for i in ids]

    def reply(messages: Any) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(content="done")
        return AIMessage(content="", tool_calls=calls, id="ai-twins")

    tools = [close_tool(crm, plain=plain)]
    if face == "create_agent":
        from langchain.agents import create_agent

        from langgraph_effects import EffectMiddleware
        from langgraph_effects.testing import ScriptedChatModel

        return create_agent(
            ScriptedChatModel(script=reply),
            tools=tools,
            middleware=[] if plain else [EffectMiddleware(ledger=env.ledger)],
            checkpointer=env.checkpointer,
        )

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [reply(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", tool_node(env, tools, plain))
    builder.add_edge(START, "agent")
    route = tools_condition if face == "tools_condition" else route_tool_calls
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=env.checkpointer)


@pytest.mark.parametrize("ids", list(TWIN_IDS))
@pytest.mark.parametrize("face", FACES)
def test_identical_calls_of_one_aimessage_are_two_operations(
    env: Env, crm: FakeCRM, face: str, ids: str
) -> None:
    """Two identical calls in one AIMessage (ToolNode's thread pool or gather runs them in
    any order, the node batches their write-aheads): two operations, two acts; the turn
    run again sends nothing more. Also when the model gives neither call an id: each is
    known by its place among the message's calls (``_faces.call_id_of``) or its task."""
    graph = twins_graph(env, crm, face, TWIN_IDS[ids])
    out = ask(env, graph)
    assert crm.effects == 2
    assert sorted(o.status.value for o in env.ops()) == ["confirmed", "confirmed"]
    assert [m.type for m in out["messages"]].count("tool") == 2
    env.invoke(graph, None, CFG)
    assert crm.effects == 2


@pytest.mark.parametrize("plain", [False, True], ids=["effects", "toolnode"])
@pytest.mark.parametrize("face", FACES)
def test_identical_calls_with_id_none_act_twice_in_all(
    env: Env, crm: FakeCRM, face: str, plain: bool
) -> None:
    """Two identical calls whose id is None: LangChain's ToolNode runs a tool, then refuses
    its output (called with no tool-call id, a tool returns its raw value, not a
    ToolMessage), and LangGraph may cancel the sibling call's task. Each effect is
    recorded before that refusal, so the run tried again sends only what was not sent and
    then answers both from their records: two acts in all. A plain ToolNode acts again on
    every try."""
    graph = twins_graph(env, crm, face, [None, None], plain=plain)
    acted: list[int] = []
    refused: list[str] = []
    out = None
    for attempt in range(3):  # each try sends at least one call that never went out
        try:
            out = ask(env, graph) if attempt == 0 else env.invoke(graph, None, CFG)
        except TypeError as exc:
            refused.append(str(exc))
            acted.append(crm.effects)
            continue
        break
    assert all("returned unexpected type" in r for r in refused), refused
    if plain:
        assert out is None
        assert len(acted) == 3
        assert acted == sorted(set(acted))  # more acts on every try
        assert crm.effects > 2
        return
    assert out is not None
    assert crm.effects == 2
    assert sorted(o.status.value for o in env.ops()) == ["confirmed", "confirmed"]
    assert [m.type for m in out["messages"]].count("tool") == 2


def test_id_less_twins_copied_by_a_wrapper_are_two_operations(env: Env, crm: FakeCRM) -> None:
    """A ``wrap_tool_call`` that hands on a copy of each call (``request.override``): the
    node cannot tell the copies by identity, so each takes the first equal place not
    given yet: still two operations, two acts."""
    call = {"name": "close_case", "args": {"case_id": "A"}, "id": ""}

    def agent(state: State) -> dict[str, Any]:
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage(content="done")]}
        return {"messages": [AIMessage(content="", tool_calls=[call, dict(call)], id="ai")]}

    def copying(request: Any, handler: Any) -> Any:
        return handler(request.override(tool_call=dict(request.tool_call)))

    async def acopying(request: Any, handler: Any) -> Any:
        return await handler(request.override(tool_call=dict(request.tool_call)))

    node = EffectToolNode(
        [close_tool(crm)], ledger=env.ledger, wrap_tool_call=copying, awrap_tool_call=acopying
    )
    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    builder.add_edge("tools", "agent")
    ask(env, builder.compile(checkpointer=env.checkpointer))
    assert crm.effects == 2
    assert len(env.ops()) == 2


def two_gated_calls_graph(env: Env, crm: FakeCRM) -> Any:
    """``tools_condition``: one task runs both calls (close A, close B), each approved by a
    person; the model proposes the same two calls (same ids) after each human message."""
    calls = [
        {"name": "close_case", "args": {"case_id": c}, "id": f"call-{c}", "type": "tool_call"}
        for c in "AB"
    ]

    def agent(state: State) -> dict[str, Any]:
        turn = sum(1 for m in state["messages"] if m.type == "human")
        if state["messages"][-1].type != "human":
            return {"messages": [AIMessage(content="done", id=f"done-{turn}")]}
        return {"messages": [AIMessage(content="", tool_calls=calls, id=f"ai-{turn}")]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", tool_node(env, [close_tool(crm, require_approval=True)], False))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=env.checkpointer)


def test_a_repeat_of_two_approved_calls_in_one_task_is_answered_and_acts(
    env: Env, crm: FakeCRM
) -> None:
    """The repeat's calls are new operations (the walk moves them to their next
    candidate): an answer LangGraph hands one of them by position naming the other is
    still that task's, applied to it; both act again. (Found by the campaign's
    ``parallel_branches`` kind: the calls knew each other only by their first candidate
    ids, so the answer was refused, or asked again, and B never acted: 3 of 4.)"""
    graph = two_gated_calls_graph(env, crm)
    for turn in range(2):
        out = ask(env, graph, f"close A and B ({turn})")
        for _ in range(6):
            if not out.get("__interrupt__"):
                break
            answers = {
                i.id: {
                    "operation_id": i.value["operation_id"],
                    "decision": "approve",
                    "by": "ana",
                    "reason": "yes",
                }
                for i in out["__interrupt__"]
            }
            out = env.invoke(graph, Command(resume=answers), CFG)
        assert "__interrupt__" not in out
        assert (crm.effects_for("A"), crm.effects_for("B")) == (turn + 1, turn + 1)
