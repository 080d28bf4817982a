"""What a child process runs in the crash tests: build the graph on files/URL, run or resume.

Module-level and picklable, so ``run_in_child`` can spawn it in a fresh process.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from _graphs import Env, build_graph, call

from langgraph_effects import EffectContext, Evidence, ProviderContract, effect
from langgraph_effects.testing.providers import FakeCRM

CFG = {"configurable": {"thread_id": "t1"}}


def _tools(crm: FakeCRM, flavour: str) -> list[Any]:
    if flavour == "plain":
        from langchain_core.tools import tool

        @tool
        def close_case(case_id: str, resolution: str) -> dict[str, Any]:
            """Close a CRM case."""
            return crm.close_case(case_id, resolution)

        return [close_case]

    def find(op: Any) -> Evidence:
        case = crm.get_case(op.target)
        if case["closed_by"] == op.idempotency_key:
            return Evidence.confirmed("closed under our key", result={"closed": op.target})
        return Evidence.inconclusive("not closed under our key")

    kw: dict[str, Any] = {
        "reconcile": {"reconcile": find},
        "key": {"contract": ProviderContract(idempotency_window=timedelta(hours=24))},
        "authorize": {"authorize": lambda ctx: True},
        "bare": {},
    }[flavour]

    @effect("crm.close_case", target=lambda a: a["case_id"], **kw)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return [close_case]


def run(
    kind: str, mode: str, where: str, crm_path: str, flavour: str, start: bool
) -> dict[str, Any]:
    """Run (``start``) or resume thread t1; return the ledger's statuses and pending interrupts."""
    env = Env(kind, mode, path=Path(where), url=where)
    crm = FakeCRM(crm_path)
    try:
        graph = build_graph(
            _tools(crm, flavour),
            [call("close_case", "call-a", case_id="A", resolution="fixed")],
            ledger=None if flavour == "plain" else env.ledger,
            checkpointer=env.checkpointer,
            plain=flavour == "plain",
        )
        value = {"messages": [("user", "close A")]} if start else None
        try:
            env.invoke(graph, value, CFG)
        except Exception as exc:  # the control's lost response fails the run
            return {"error": repr(exc)}
        state = graph.get_state(CFG) if not env.is_async else env.run(graph.aget_state(CFG))
        interrupts = [i.value for t in state.tasks for i in t.interrupts]
        ops = [] if flavour == "plain" else env.ops()
        return {
            "statuses": [o.status.value for o in ops],
            "attempts": [o.attempts for o in ops],
            "interrupts": interrupts,
        }
    finally:
        crm.close()
        env.close()
