"""What a child process runs in the re-run path crash tests (``test_rerun_crash.py``).

The model mints a new tool-call id on every generation, as a real model does,
and the graph runs with LangGraph's default durability (none passed) unless the
step says otherwise. Module-level and picklable for ``run_in_child``.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _graphs import Env, State
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from langgraph_effects import DurabilityWarning, EffectContext, EffectToolNode, effect
from langgraph_effects.node import route_tool_calls
from langgraph_effects.testing.models import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM

CFG = {"configurable": {"thread_id": "t1", "tenant_id": "acme"}}
CLOSE_A = {
    "name": "close_case",
    "args": {"case_id": "A", "resolution": "fixed"},
    "type": "tool_call",
}


def fresh_ids(messages: Sequence[BaseMessage]) -> AIMessage:
    """Proposes ``CLOSE_A`` with a fresh id after a human message; "done" after a result."""
    if isinstance(messages[-1], ToolMessage):
        return AIMessage(content="done")
    return AIMessage(content="", tool_calls=[{**CLOSE_A, "id": f"call-{uuid.uuid4().hex[:8]}"}])


def _graph(env: Env, crm: FakeCRM) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case (this CRM honours no idempotency key)."""
        return crm.close_case(case_id, resolution)

    model = ScriptedChatModel(script=fresh_ids)

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", EffectToolNode([close_case], ledger=env.ledger))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=env.checkpointer)


def run(kind: str, mode: str, where: str, crm_path: str, step: str) -> dict[str, Any]:
    """One step on thread t1: ``send`` the request (again), ``resume`` with None,
    or answer the pending review with ``retry`` / ``reject``. Returns what the
    ledger and the checkpoint say afterwards."""
    env = Env(kind, mode, path=Path(where), url=where)
    crm = FakeCRM(crm_path)
    try:
        graph = _graph(env, crm)
        config = CFG if step != "resume-no-tenant" else {"configurable": {"thread_id": "t1"}}
        state = graph.get_state(config) if not env.is_async else env.run(graph.aget_state(config))
        pending = [i for t in state.tasks for i in t.interrupts]
        if step == "send":
            value: Any = {"messages": [("user", "close case A")]}
        elif step in ("resume", "resume-no-tenant"):
            value = None
        else:
            [review] = pending
            value = Command(
                resume={"operation_id": review.value["operation_id"], "decision": step, "by": "ana"}
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DurabilityWarning)
            env.invoke(graph, value, config, durability=None)
        state = graph.get_state(config) if not env.is_async else env.run(graph.aget_state(config))
        return {
            "statuses": [o.status.value for o in env.ops("acme")],
            "interrupts": [i.value for t in state.tasks for i in t.interrupts],
        }
    finally:
        crm.close()
        env.close()
