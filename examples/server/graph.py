"""A support agent for LangGraph Server: ``langgraph dev`` in this directory serves it.

Run it (the ``server`` extra: ``pip install -e '.[server]'``; no API key)::

    cd examples/server
    langgraph dev --no-browser                    # http://127.0.0.1:2024
    LGE_LEDGER_URL=postgresql://postgres@127.0.0.1:5432/test langgraph dev --no-browser

then drive it with ``langgraph_sdk`` (``tests/server/test_server.py`` does, end to end)::

    from langgraph_sdk import get_sync_client
    client = get_sync_client(url="http://127.0.0.1:2024")
    thread = client.threads.create()
    config = {"configurable": {"tenant_id": "acme"}}
    client.runs.wait(thread["thread_id"], "support", config=config,
                     input={"messages": [{"role": "user", "content": "close case-1 and case-2"}]})
    for it in client.threads.get_state(thread["thread_id"])["interrupts"]:
        print(it["id"], it["value"]["target"])    # one approval request per case

and answer each approval by its interrupt id::

    client.runs.wait(thread["thread_id"], "support", config=config, command={"resume": {
        interrupt_id: {"operation_id": ..., "decision": "approve", "by": "ana"}, ...}})

``support_hitl`` is the same agent for HITL UIs such as Agent Chat UI: one interrupt per
AIMessage in the shape of LangChain's ``HumanInTheLoopMiddleware``, answered without an
interrupt id::

    client.runs.wait(thread["thread_id"], "support_hitl", config=config, command={"resume": {
        "decisions": [{"type": "approve"}, {"type": "reject", "message": "not this one"}]}})

What the server supplies and what this module does:

* The **checkpointer** is the server's (in memory under ``langgraph dev``, kept in
  ``.langgraph_api/``; PostgreSQL on a deployment), so the graph is compiled without one.
* The **ledger** comes from ``ledger_from_env()``: ``LGE_LEDGER_URL`` (a SQLite file
  ``effects.db`` here by default; a ``postgresql://`` URL in production). Creating it does
  no I/O; the first tool call opens it in the server's event loop without blocking it and
  runs ``setup()`` once. (A sync ledger would work too: under ``ainvoke`` its calls run in a
  worker thread, off the server's loop.)
* The **tenant** is the run's ``config["configurable"]["tenant_id"]`` (or the assistant's);
  the **thread** is the server's thread id.
* Everything the graph awaits is non-blocking: the reconciler hands the CRM's sync client
  to a worker thread; sync tools already run in one.

The CRM is ``langgraph_effects.testing.FakeCRM`` on a SQLite file (``LGE_EXAMPLE_CRM``,
default ``crm.db``), so a test can count its closures from another process; the chat
model is ``langgraph_effects.testing.ScriptedChatModel``: it proposes ``close_case`` for
every ``case-N`` the user names, then summarises. The directory needs nothing else from
the repository: copy it as the start of your own server, and put your CRM client and your
LLM in their places.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
from datetime import timedelta
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from langgraph_effects import (
    EffectContext,
    EffectState,
    EffectToolNode,
    Evidence,
    Operation,
    ProviderContract,
    effect,
    ledger_from_env,
    route_tool_calls,
)

# The scripted chat model and the fake CRM: your LLM and your CRM client go here.
from langgraph_effects.testing import FakeCRM, ScriptedChatModel

ledger = ledger_from_env()


@functools.cache
def crm() -> FakeCRM:
    """The CRM client, created on first use (in a worker thread: it opens a file)."""
    return FakeCRM(os.environ.get("LGE_EXAMPLE_CRM", "crm.db"))


async def find_closure(op: Operation) -> Evidence:
    """The reconciler: did the CRM close this case under this operation's key?"""
    case = await asyncio.to_thread(lambda: crm().get_case(op.target or ""))
    if case["closed_by"] == op.idempotency_key:
        return Evidence.confirmed(provider_result_id=str(case["version"]), result=case)
    return Evidence.inconclusive("no closure carrying our key")


@effect(
    "crm.close_case",
    target=lambda args: args["case_id"],
    reconcile=find_closure,
    require_approval=True,
    contract=ProviderContract(idempotency_window=timedelta(hours=24)),
)
def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
    """Close a CRM case."""
    return crm().close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)


class State(MessagesState, EffectState):
    pass


async def call_model(state: State) -> dict[str, Any]:
    """The scripted model: one ``close_case`` per ``case-N`` in the first user message."""
    asked = next(m for m in state["messages"] if isinstance(m, HumanMessage))
    cases = dict.fromkeys(re.findall(r"case-[\w-]+", str(asked.content)))
    plan = [[{"name": "close_case", "args": {"case_id": c, "resolution": "done"}} for c in cases]]
    return {"messages": [await ScriptedChatModel(plan=plan).ainvoke(state["messages"])]}


builder = StateGraph(State)
builder.add_node("agent", call_model)
builder.add_node("tools", EffectToolNode([close_case], ledger=ledger))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
builder.add_edge("tools", "agent")
graph = builder.compile()  # no checkpointer: the server supplies it

# The same agent for HITL UIs (Agent Chat UI): the approvals of one AIMessage are asked in
# one interrupt, in the shape of LangChain's HumanInTheLoopMiddleware, by a node between
# the model and the router; answered {"decisions": [...]} in order, without an interrupt id.
tools = EffectToolNode([close_case], ledger=ledger, approvals="batched")
builder = StateGraph(State)
builder.add_node("agent", call_model)
builder.add_node("approve", tools.approval_node())
builder.add_node("tools", tools)
builder.add_edge(START, "agent")
builder.add_edge("agent", "approve")
builder.add_conditional_edges("approve", route_tool_calls, ["tools", END])
builder.add_edge("tools", "agent")
hitl_graph = builder.compile()
