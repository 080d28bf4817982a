"""What a child process runs in tests/kills/test_identity_kills.py: one user turn.

The graph (``[trim ->] agent -> tools -> agent``) is rebuilt on the files or URL in
each fresh process. The model mints a new tool-call id on every proposal, as a real
model does, so a request sent again after a lost AIMessage is a re-proposal with
another id. Module-level and picklable, so ``run_in_child`` can spawn it.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from _graphs import Env, State, counting_prepares
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from langgraph_effects import (
    EffectContext,
    EffectToolNode,
    Evidence,
    ProviderContract,
    effect,
    route_tool_calls,
)
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM

CFG = {"configurable": {"thread_id": "t1"}}


def _tool(crm: FakeCRM, plain: bool, *, keyed: bool = False) -> Any:
    """``close_case``; ``keyed``: the CRM's key window is declared, so a call whose claim
    died before it reached the CRM is retried under its key, not sent to a person."""
    if plain:

        @tool
        def close_case(case_id: str) -> dict[str, Any]:
            """Close a CRM case."""
            return crm.close_case(case_id, "fixed")

        return close_case

    def find(op: Any) -> Evidence:
        # By the CRM's log, not the case's last closer: twins close one case twice.
        if crm.effects_for(op.target, idempotency_key=op.idempotency_key):
            return Evidence.confirmed("closed under our key", result={"closed": op.target})
        return Evidence.inconclusive("not closed under our key")

    window = ProviderContract(idempotency_window=timedelta(hours=24)) if keyed else None

    @effect("crm.close_case", target=lambda a: a["case_id"], reconcile=find, contract=window)
    def close_case(case_id: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, "fixed", idempotency_key=ctx.idempotency_key)

    return close_case


def _reply(messages: Sequence[BaseMessage]) -> AIMessage:
    if not isinstance(messages[-1], HumanMessage):
        return AIMessage(content="done")
    call = {"name": "close_case", "args": {"case_id": "A"}, "id": f"call-{uuid.uuid4().hex[:8]}"}
    return AIMessage(content="", tool_calls=[call])


def _twins(messages: Sequence[BaseMessage]) -> AIMessage:
    """Close case A twice, both calls without an id (two intents in one AIMessage)."""
    if not isinstance(messages[-1], HumanMessage):
        return AIMessage(content="done")
    call = {"name": "close_case", "args": {"case_id": "A"}, "id": ""}
    return AIMessage(content="", tool_calls=[call, dict(call)], id="ai-twins")


def turn(
    kind: str,
    mode: str,
    where: str,
    crm_path: str,
    plain: bool,
    text: str | None,
    trim: bool = False,
    durability: str | None = None,
    twins: bool = False,
    face: str = "tools_condition",
) -> dict[str, Any]:
    """Send ``text`` (None: resume the thread as it stands); return what the thread holds.

    ``twins``: the model proposes two identical id-less calls in one AIMessage, run by
    ``face``: ``tools_condition`` (one task for both), ``route_tool_calls`` (a task per
    call) or ``create_agent`` with ``EffectMiddleware`` (a task per call)."""
    env = Env(kind, mode, path=Path(where), url=where)
    crm = FakeCRM(crm_path)
    try:
        model = ScriptedChatModel(script=_twins if twins else _reply)
        if twins and face == "create_agent":
            from langchain.agents import create_agent

            from langgraph_effects import EffectMiddleware

            graph: Any = create_agent(
                model,
                tools=[_tool(crm, plain, keyed=True)],
                middleware=[] if plain else [EffectMiddleware(ledger=env.ledger)],
                checkpointer=env.checkpointer,
            )
        else:
            graph = _graph(env, crm, model, plain, trim, twins, face)
        value = None if text is None else {"messages": [HumanMessage(text)]}
        env.invoke(graph, value, CFG, durability=durability)
        ops = [] if plain else env.ops()
        return {"statuses": sorted(o.status.value for o in ops)}
    finally:
        crm.close()
        env.close()


def _graph(
    env: Env,
    crm: FakeCRM,
    model: ScriptedChatModel,
    plain: bool,
    trim: bool,
    twins: bool,
    face: str,
) -> Any:
    """[trim ->] agent -> tools -> agent, on ``EffectToolNode`` (``plain``: a ``ToolNode``)."""

    def trimmer(state: State) -> dict[str, Any]:
        old = state["messages"][:-1]
        return {"messages": [RemoveMessage(id=m.id) for m in old if m.id is not None]}

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    tools = [_tool(crm, plain, keyed=twins)]
    builder = StateGraph(State)
    builder.add_node("trim", trimmer)
    builder.add_node("agent", agent)
    builder.add_node(
        "tools", ToolNode(tools) if plain else EffectToolNode(tools, ledger=env.ledger)
    )
    builder.add_edge(START, "trim" if trim else "agent")
    builder.add_edge("trim", "agent")
    router = tools_condition if twins and face == "tools_condition" else route_tool_calls
    builder.add_conditional_edges("agent", router, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=env.checkpointer)


def many_twins(
    kind: str, mode: str, where: str, crm_path: str, plain: bool, face: str, n: int, ask: bool
) -> dict[str, Any]:
    """``n`` identical calls (close case A, ids ``sms-0`` ...) in one AIMessage, run by
    ``face`` (``tools_condition``: one task; ``route_tool_calls``: a task each), the CRM's
    key window declared; ``ask``: send the request, else resume the thread as it stands.
    Returns the records' statuses and the write-aheads this process prepared."""
    env = Env(kind, mode, path=Path(where), url=where)
    crm = FakeCRM(crm_path)
    try:
        prepares = counting_prepares(env.ledger)
        calls = [
            {"name": "close_case", "args": {"case_id": "A"}, "id": f"sms-{i}"} for i in range(n)
        ]

        def agent(state: State) -> dict[str, Any]:
            if not isinstance(state["messages"][-1], HumanMessage):
                return {"messages": [AIMessage(content="done")]}
            return {"messages": [AIMessage(content="", tool_calls=calls, id="ai-many")]}

        tools = [_tool(crm, plain, keyed=True)]
        builder = StateGraph(State)
        builder.add_node("agent", agent)
        builder.add_node(
            "tools", ToolNode(tools) if plain else EffectToolNode(tools, ledger=env.ledger)
        )
        builder.add_edge(START, "agent")
        router = tools_condition if face == "tools_condition" else route_tool_calls
        builder.add_conditional_edges("agent", router, ["tools", END])
        builder.add_edge("tools", "agent")
        graph = builder.compile(checkpointer=env.checkpointer)
        out = env.invoke(graph, {"messages": [HumanMessage("send it")]} if ask else None, CFG)
        ops = [] if plain else env.ledger_call("list", tenant_id="default", limit=10 * n)
        return {
            "statuses": dict(Counter(o.status.value for o in ops)),
            "answers": sum(m.type == "tool" for m in out["messages"]),
            "prepares": prepares["prepare"],
        }
    finally:
        crm.close()
        env.close()
