"""What a child process runs in tests/kills/test_exit_repeat_kills.py: one request under
``durability="exit"`` on a face whose state lists no answers.

The faces: ``run_effect`` in an ``@entrypoint`` (the Functional API), an
``EffectToolNode`` on LangGraph's ``MessagesState`` (no ``EffectState``), a worker
subgraph fed only the latest request. Each is rebuilt on the files or URL in every fresh
process; ``plain`` runs the same shape on a plain ``@task`` / ``ToolNode``. ``kill``:
``os._exit`` once the answer was recorded and returned to the graph, before the run
ends, so ``"exit"`` saves nothing of the run (its record confirmed, its step unsaved).
Module-level and picklable, so ``run_in_forked_child`` can start it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _graphs import Env, State
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from langgraph_effects import (
    EffectContext,
    EffectToolNode,
    Evidence,
    effect,
    route_tool_calls,
    run_effect,
)
from langgraph_effects._faults import CRASH_EXIT_CODE
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM

CFG = {"configurable": {"thread_id": "t1"}}
FACES = ("functional", "messages-state", "sub-agent")
NEVER_MIND = "never mind"
"""A request that proposes no call (on every face)."""


def _effect(crm: FakeCRM) -> Any:
    def find(op: Any) -> Evidence:
        if crm.effects_for(op.target, idempotency_key=op.idempotency_key):
            return Evidence.confirmed("closed under our key", result={"closed": op.target})
        return Evidence.inconclusive("not closed under our key")

    @effect("crm.close_case", target=lambda a: a["case_id"], reconcile=find)
    def close_case(case_id: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, "fixed", idempotency_key=ctx.idempotency_key)

    return close_case


def _plain(crm: FakeCRM) -> Any:
    @tool
    def close_case(case_id: str) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, "fixed")

    return close_case


def _model(kill: bool) -> ScriptedChatModel:
    """After a human message close case A (a new call id each proposal, as a real model);
    after its answer: done, or (``kill``) the process dies there, the answer recorded."""

    def reply(messages: Sequence[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            if kill:
                os._exit(CRASH_EXIT_CODE)
            return AIMessage(content="done")
        if NEVER_MIND in str(messages[-1].content):
            return AIMessage(content="nothing to do")
        call = {"name": "close_case", "args": {"case_id": "A"}, "id": f"c-{uuid.uuid4().hex[:8]}"}
        return AIMessage(content="", tool_calls=[call])

    return ScriptedChatModel(script=reply)


def _agent(
    env: Env, crm: FakeCRM, plain: bool, kill: bool, state: Any, saver: Any, paused: bool = False
) -> Any:
    model = _model(kill)
    tools = [_plain(crm) if plain else _effect(crm)]
    builder = StateGraph(state)
    builder.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    builder.add_node(
        "tools", ToolNode(tools) if plain else EffectToolNode(tools, ledger=env.ledger)
    )
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver, interrupt_before=["tools"] if paused else None)


def _face(env: Env, crm: FakeCRM, face: str, plain: bool, kill: bool, paused: bool) -> Any:
    if face == "messages-state":
        return _agent(env, crm, plain, kill, MessagesState, env.checkpointer, paused)
    if face == "sub-agent":
        worker = _agent(env, crm, plain, kill, State, None)

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
    from langgraph.func import entrypoint, task
    from langgraph.types import interrupt

    from langgraph_effects import arun_effect

    close = _effect(crm)

    @task
    def close_plain() -> Any:
        return crm.close_case("A", "fixed")

    def after(out: Any) -> Any:
        if kill:
            os._exit(CRASH_EXIT_CODE)  # the answer recorded and returned, the run unsaved
        return out

    if env.is_async:

        @entrypoint(checkpointer=env.checkpointer)
        async def aflow(text: str) -> Any:
            if NEVER_MIND in text:
                return None
            if paused:
                interrupt("close case A?")
            if plain:
                return after(await close_plain())
            return after(await arun_effect(close, {"case_id": "A"}, ledger=env.ledger))

        return aflow

    @entrypoint(checkpointer=env.checkpointer)
    def flow(text: str) -> Any:
        if NEVER_MIND in text:
            return None
        if paused:
            interrupt("close case A?")
        if plain:
            return after(close_plain().result())
        return after(run_effect(close, {"case_id": "A"}, ledger=env.ledger))

    return flow


def ask(
    kind: str,
    mode: str,
    where: str,
    crm_path: str,
    face: str,
    plain: bool,
    kill: bool,
    text: str | None,
    paused: bool = False,
) -> dict[str, Any]:
    """Send ``text`` under ``durability="exit"``; return the ledger's statuses. ``paused``:
    each request stops before it acts (``interrupt_before=["tools"]``; ``interrupt()`` in
    the entrypoint), saved at exit; ``text`` None resumes it (``invoke(None)``;
    ``Command(resume=...)``)."""
    from langgraph.types import Command

    env = Env(kind, mode, path=Path(where), url=where)
    crm = FakeCRM(crm_path)
    try:
        graph = _face(env, crm, face, plain, kill, paused)
        value: Any
        if text is None:
            value = Command(resume="yes") if face == "functional" else None
        else:
            value = text if face == "functional" else {"messages": [HumanMessage(text)]}
        env.invoke(graph, value, CFG, durability="exit")
        return {"statuses": [] if plain else sorted(o.status.value for o in env.ops())}
    finally:
        crm.close()
        env.close()
