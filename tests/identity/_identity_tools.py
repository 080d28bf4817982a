"""Tools shared by the identity room's tests (and its crash child)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from _graphs import Env, State
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode

from langgraph_effects import EffectContext, EffectToolNode, effect, route_tool_calls
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM


def close_tool(crm: FakeCRM, *, plain: bool = False, **kwargs: Any) -> Any:
    """``close_case``: an effect, or (``plain``) the same tool for a plain ``ToolNode``.

    No idempotency key is sent: every send is an effect at the CRM, so a duplicate shows.
    """
    if plain:

        @tool
        def close_case(case_id: str) -> dict[str, Any]:
            """Close a CRM case."""
            return crm.close_case(case_id, "fixed")

        return close_case

    @effect("crm.close_case", target=lambda a: a["case_id"], **kwargs)
    def close_case(case_id: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, "fixed")

    return close_case


CFG = {"configurable": {"thread_id": "t1"}}


def proposer(ids: str) -> ScriptedChatModel:
    """After a human message: close case A (ids ``fresh``, ``reused`` or ``empty``)."""
    turns = 0

    def reply(messages: Sequence[BaseMessage]) -> AIMessage:
        nonlocal turns
        if not isinstance(messages[-1], HumanMessage):
            return AIMessage(content="done")
        turns += 1
        call_id = {"fresh": f"call-{turns}", "reused": "call_0", "empty": ""}[ids]
        call = {"name": "close_case", "args": {"case_id": "A"}, "id": call_id}
        return AIMessage(content="", tool_calls=[call], id=f"ai-{turns}")

    return ScriptedChatModel(script=reply)


def tool_node(env: Env, tools: list[Any], plain: bool, **kwargs: Any) -> ToolNode:
    """A plain ``ToolNode`` (the control) or an ``EffectToolNode`` on the env's ledger."""
    return ToolNode(tools) if plain else EffectToolNode(tools, ledger=env.ledger, **kwargs)


def agent_graph(
    env: Env,
    crm: FakeCRM,
    *,
    plain: bool,
    ids: str = "fresh",
    trim: bool = False,
    router: Any = route_tool_calls,
    **effect_kwargs: Any,
) -> Any:
    """[trim ->] agent -> tools -> agent; ``trim`` keeps only the latest human message
    (LangGraph's delete-messages recipe)."""
    model = proposer(ids)
    tools = [close_tool(crm, plain=plain, **({} if plain else effect_kwargs))]

    def trimmer(state: State) -> dict[str, Any]:
        old = state["messages"][:-1]
        return {"messages": [RemoveMessage(id=m.id) for m in old if m.id is not None]}

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("trim", trimmer)
    builder.add_node("agent", agent)
    builder.add_node("tools", tool_node(env, tools, plain))
    builder.add_edge(START, "trim" if trim else "agent")
    builder.add_edge("trim", "agent")
    builder.add_conditional_edges("agent", router, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=env.checkpointer)


def ask(env: Env, graph: Any, text: str = "close case A") -> Any:
    return env.invoke(graph, {"messages": [HumanMessage(text)]}, CFG)
