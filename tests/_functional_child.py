"""What a child process runs in the Functional API tests: an entrypoint and a task, run or resumed.

Module-level and picklable, so ``run_in_child`` can spawn it in a fresh process.
The entrypoint closes case A through a ``@task``; the task calls the effect with
``run_effect`` / ``arun_effect`` (``flavour`` "reconcile" or "review"), or calls
the provider directly ("plain": the control, no ledger). ``flavour`` "body" calls the
effect (with its reconciler) in the entrypoint's own body, no task around it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _graphs import Env
from langgraph.func import entrypoint, task
from langgraph.types import Command

from langgraph_effects import EffectContext, Evidence, arun_effect, effect, run_effect
from langgraph_effects.testing.providers import FakeCRM

CFG = {"configurable": {"thread_id": "t1"}}


def close_case_effect(crm: FakeCRM, flavour: str) -> Any:
    """The effect closing a case: with a reconciler that finds our key, or bare."""

    def find(op: Any) -> Evidence:
        case = crm.get_case(op.target)
        if case["closed_by"] == op.idempotency_key:
            return Evidence.confirmed("closed under our key", result={"closed": op.target})
        return Evidence.inconclusive("not closed under our key")

    kw: dict[str, Any] = {"reconcile": find} if flavour in ("reconcile", "body") else {}

    @effect("crm.close_case", target=lambda a: a["case_id"], **kw)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return close_case


def build(env: Env, crm: FakeCRM, flavour: str) -> Any:
    """The entrypoint of ``flavour``, sync or async as ``env`` is."""
    tool = None if flavour == "plain" else close_case_effect(crm, flavour)
    args = {"case_id": "A", "resolution": "fixed"}

    if env.is_async:

        @task
        async def aclose(case_id: str) -> Any:
            if tool is None:
                return crm.close_case(case_id, "fixed")
            return await arun_effect(tool, {**args, "case_id": case_id}, ledger=env.ledger)

        @entrypoint(checkpointer=env.checkpointer)
        async def aflow(case_id: str) -> Any:
            if flavour == "body":
                assert tool is not None
                return await arun_effect(tool, {**args, "case_id": case_id}, ledger=env.ledger)
            return await aclose(case_id)

        return aflow

    @task
    def close(case_id: str) -> Any:
        if tool is None:
            return crm.close_case(case_id, "fixed")
        return run_effect(tool, {**args, "case_id": case_id}, ledger=env.ledger)

    @entrypoint(checkpointer=env.checkpointer)
    def flow(case_id: str) -> Any:
        if flavour == "body":
            assert tool is not None
            return run_effect(tool, {**args, "case_id": case_id}, ledger=env.ledger)
        return close(case_id).result()

    return flow


def _state(env: Env, flow: Any) -> Any:
    return flow.get_state(CFG) if not env.is_async else env.run(flow.aget_state(CFG))


def run(
    kind: str, mode: str, where: str, crm_path: str, flavour: str, value: Any
) -> dict[str, Any]:
    """Start thread t1 (``value`` "A"), resume it (None) or answer it (a dict: a resume).

    Returns the ledger's statuses, the pending interrupts and the run's output.
    """
    env = Env(kind, mode, path=Path(where), url=where)
    crm = FakeCRM(crm_path)
    try:
        flow = build(env, crm, flavour)
        given = Command(resume=value) if isinstance(value, dict) else value
        resent = value is None and not _state(env, flow).next
        if resent:
            # LangGraph saves a run's first checkpoint while its first tasks already run: a
            # kill can beat it, and then nothing is left to resume (EmptyInputError). The
            # user sends the request again, as they would.
            given = "A"
        out = env.invoke(flow, given, CFG)
        if isinstance(out, dict) and "__interrupt__" in out:
            out = None  # asked a person: read from the state's tasks below
        state = _state(env, flow)
        ops = [] if flavour == "plain" else env.ops()
        return {
            "statuses": [o.status.value for o in ops],
            "interrupts": [i.value for t in state.tasks for i in t.interrupts],
            "output": out,
            "resent": resent,
        }
    finally:
        crm.close()
        env.close()
