"""What a child process runs in the settled-``Command`` crash tests: a tool returning a
``Command`` (an update and a ``goto``), killed between the provider and the receipt, then
resumed in a fresh process and settled (reconciled, or confirmed by a person).

Module-level and picklable, so ``run_in_child`` can spawn it in a fresh process.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any

from _graphs import Env, call
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from langgraph_effects import EffectContext, EffectState, EffectToolNode, Evidence, effect
from langgraph_effects.core.model import Operation
from langgraph_effects.testing.providers import FakeCRM

CFG = {"configurable": {"thread_id": "cmd"}}
CLOSE = call("close_case", "c1", case_id="A", resolution="fixed")


class State(EffectState, total=False):
    messages: Annotated[list[Any], operator.add]
    note: str
    visited: Annotated[list[str], operator.add]


def closed(case_id: str, version: Any, tool_call_id: str) -> Command[Any]:
    """The tool's answer: the case noted in the state, and the route to ``after``."""
    return Command(
        update={
            "note": f"closed {case_id} v{version}",
            "messages": [ToolMessage(f"closed {case_id}", tool_call_id=tool_call_id)],
        },
        goto="after",
    )


def settled(op: Operation, result: Any) -> Command[Any]:
    """``answer=``: the same Command, rebuilt from a record settled without the tool."""
    version = result.get("version") if isinstance(result, dict) else None
    assert op.target is not None
    assert op.tool_call_id is not None
    return closed(op.target, version, op.tool_call_id)


def close_tool(crm: FakeCRM, *, reconcile: bool, answer: bool) -> Any:
    def find(op: Operation) -> Evidence:
        case = crm.get_case(op.target or "")
        if case["closed_by"] == op.idempotency_key:
            return Evidence.confirmed("closed under our key", result={"version": case["version"]})
        return Evidence.inconclusive("not closed under our key")

    @effect(
        "crm.close_case",
        target=lambda a: a["case_id"],
        reconcile=find if reconcile else None,
        answer=settled if answer else None,
    )
    def close_case(
        case_id: str,
        resolution: str,
        ctx: EffectContext,
        tool_call_id: Annotated[str, InjectedToolCallId],
    ) -> Command[Any]:
        """Close a CRM case and note it in the graph state."""
        case = crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)
        return closed(case_id, case["version"], tool_call_id)

    return close_case


def build(env: Env, crm: FakeCRM, *, reconcile: bool, answer: bool) -> Any:
    """START -> tools -> END, and an ``after`` node that only a Command's goto reaches."""
    builder = StateGraph(State)
    node = EffectToolNode([close_tool(crm, reconcile=reconcile, answer=answer)], ledger=env.ledger)
    builder.add_node("tools", node)
    builder.add_node("after", lambda state: {"visited": ["after"]})
    builder.add_edge(START, "tools")
    builder.add_edge("after", END)
    return builder.compile(checkpointer=env.checkpointer)


def run(
    kind: str, mode: str, where: str, crm_path: str, path: str, answer: bool, start: bool
) -> dict[str, Any]:
    """Start thread ``cmd`` (``start``; the CRM kills the process once it applied), or resume
    it and settle it: ``path`` is ``reconciled`` (the reconciler finds the close) or
    ``reviewed`` (no reconciler: a person confirms, with the version they saw)."""
    env = Env(kind, mode, path=Path(where), url=where)
    crm = FakeCRM(crm_path)
    try:
        graph = build(env, crm, reconcile=path == "reconciled", answer=answer)
        if start:
            env.invoke(graph, {"messages": [AIMessage("", tool_calls=[CLOSE])]}, CFG)
            return {"error": "the CRM did not kill this process"}
        out = env.invoke(graph, None, CFG)
        state = graph.get_state(CFG) if not env.is_async else env.run(graph.aget_state(CFG))
        asked = [i.value for t in state.tasks for i in t.interrupts]
        if asked:
            request = asked[0]
            confirm = {
                "operation_id": request["operation_id"],
                "decision": "confirm",
                "by": "ana",
                "reason": "the case shows closed in the CRM",
                "result": {"version": 1},
            }
            out = env.invoke(graph, Command(resume=confirm), CFG)
        messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        return {
            "asked": len(asked),
            "statuses": [o.status.value for o in env.ops()],
            "note": out.get("note"),
            "visited": out.get("visited", []),
            "messages": [(m.content, m.tool_call_id) for m in messages],
            "via": [m.response_metadata.get("langgraph_effects", {}).get("via") for m in messages],
        }
    finally:
        crm.close()
        env.close()
