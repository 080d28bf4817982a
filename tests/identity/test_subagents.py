"""Row 2 of issue 22: sub-agents and supervisors ask again in a later turn, and act again.

The sub-agent never sees the earlier answer: a worker subgraph fed only the latest
request, an agent called from a tool ("subagents as tools"), and a supervisor that
keeps only each worker's final message (``langgraph-supervisor``'s default
``output_mode="last_message"``; the package is not installed here, so the same graph
is built by hand). Each runs on the parent's thread; the parent's step has moved on,
so the same request of a later turn is a new operation: 2 asked, 2 acted, as with a
plain ``ToolNode``. A crash-free re-run of a turn still acts once.
"""

from __future__ import annotations

from typing import Any

import pytest
from _graphs import Env, State
from _identity_tools import CFG, ask, close_tool, proposer, tool_node
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import tools_condition

from langgraph_effects import route_tool_calls
from langgraph_effects.testing.providers import FakeCRM


def worker_agent(env: Env, crm: FakeCRM, *, plain: bool, ids: str = "fresh") -> Any:
    """agent -> tools -> agent, compiled without a checkpointer of its own (it runs
    inside its parent's task and is saved under the parent's thread)."""
    model = proposer(ids)

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", tool_node(env, [close_tool(crm, plain=plain)], plain))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile()


def latest_request_graph(env: Env, worker: Any) -> Any:
    """The parent hands the worker only its latest human message."""

    async def arun(state: State) -> dict[str, Any]:
        out = await worker.ainvoke({"messages": [state["messages"][-1]]})
        return {"messages": [out["messages"][-1]]}

    def run(state: State) -> dict[str, Any]:
        out = worker.invoke({"messages": [state["messages"][-1]]})
        return {"messages": [out["messages"][-1]]}

    builder = StateGraph(State)
    builder.add_node("worker", arun if env.is_async else run)
    builder.add_edge(START, "worker")
    builder.add_edge("worker", END)
    return builder.compile(checkpointer=env.checkpointer)


def agent_as_tool_graph(env: Env, worker: Any) -> Any:
    """The parent agent's tool ``delegate`` runs the worker on a fresh conversation."""

    @tool
    def delegate(task: str) -> str:
        """Hand a task to the CRM agent."""
        return str(worker.invoke({"messages": [HumanMessage(task)]})["messages"][-1].content)

    @tool
    async def adelegate(task: str) -> str:
        """Hand a task to the CRM agent."""
        out = await worker.ainvoke({"messages": [HumanMessage(task)]})
        return str(out["messages"][-1].content)

    adelegate.name = "delegate"
    turns = 0

    def agent(state: State) -> dict[str, Any]:
        nonlocal turns
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage(content="the CRM agent is done")]}
        turns += 1
        call = {"name": "delegate", "args": {"task": "close case A"}, "id": f"d-{turns}"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    from langgraph.prebuilt import ToolNode

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([adelegate if env.is_async else delegate]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=env.checkpointer)


def supervisor_graph(env: Env, worker: Any) -> Any:
    """supervisor -> worker (full history in, only its last message back) -> supervisor."""

    def supervisor(state: State) -> dict[str, Any]:
        return {}

    def route(state: State) -> str:
        return "worker" if isinstance(state["messages"][-1], HumanMessage) else END

    async def arun(state: State) -> dict[str, Any]:
        out = await worker.ainvoke({"messages": state["messages"]})
        return {"messages": [out["messages"][-1]]}  # output_mode="last_message"

    def run(state: State) -> dict[str, Any]:
        out = worker.invoke({"messages": state["messages"]})
        return {"messages": [out["messages"][-1]]}

    builder = StateGraph(State)
    builder.add_node("supervisor", supervisor)
    builder.add_node("worker", arun if env.is_async else run)
    builder.add_edge(START, "supervisor")
    builder.add_conditional_edges("supervisor", route, ["worker", END])
    builder.add_edge("worker", "supervisor")
    return builder.compile(checkpointer=env.checkpointer)


SHAPES = {
    "latest-request": latest_request_graph,
    "agent-as-tool": agent_as_tool_graph,
    "supervisor-last-message": supervisor_graph,
}


@pytest.mark.parametrize("ids", ["fresh", "reused"])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("plain", [False, True], ids=["effects", "toolnode"])
def test_a_sub_agents_later_turn_acts_again(
    env: Env, crm: FakeCRM, plain: bool, shape: str, ids: str
) -> None:
    graph = SHAPES[shape](env, worker_agent(env, crm, plain=plain, ids=ids))
    ask(env, graph)
    assert crm.effects == 1
    env.invoke(graph, None, CFG)  # the finished turn run again: nothing more
    assert crm.effects == 1
    ask(env, graph, "close case A again")
    assert crm.effects == 2
