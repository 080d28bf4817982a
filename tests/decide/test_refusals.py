"""A refused *resend* proves nothing about the earlier attempt: the operation stays unknown.

Found by the campaign's randomized schedules (seeds 374, 321): the CRM applied the
close, the response was lost, and the safe retry under the same key was refused.
The operation must not become ``rejected`` ("refused and NOT carried out") while
the CRM shows it done; it returns to ``unknown`` and a person decides, with no
retry offered. A first dispatch's refusal, by contrast, stays conclusive.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from _graphs import Env, build_graph, call
from langgraph.types import Command

from langgraph_effects import EffectContext, OperationStatus, ProviderContract, effect
from langgraph_effects.core.model import EventKind, EvidenceKind
from langgraph_effects.testing.providers import FakeCRM, Fault

S = OperationStatus
BACKENDS = [("sqlite", "sync"), ("sqlite", "async")]
CFG = {"configurable": {"thread_id": "t1"}}
CLOSE_A = call("close_case", "call-a", case_id="A", resolution="fixed")
KEYED = ProviderContract(
    idempotency_window=timedelta(hours=24), max_transient_retries=1, backoff_initial=0.0
)


def close_tool(crm: FakeCRM) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"], contract=KEYED)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return close_case


def _interrupts(env: Env, graph: Any) -> list[Any]:
    state = graph.get_state(CFG) if not env.is_async else env.run(graph.aget_state(CFG))
    return [i for task in state.tasks for i in task.interrupts]


@pytest.mark.parametrize("refusal", [Fault.REJECT, Fault.TRANSIENT])
def test_refused_resend_returns_to_unknown_for_review(env: Env, refusal: Fault) -> None:
    """Applied, response lost, resend refused: unknown with the refusal as evidence, then review."""
    crm = FakeCRM()
    # A transient refusal may be retried on the resume (the provider then replays the first
    # response under the key); a definitive one is never resent, even across the resume.
    # Transient: refused on the resend and on its one in-process retry.
    refusals = [refusal] if refusal is Fault.REJECT else [refusal, refusal]
    crm.faults.script([Fault.LOSE_RESPONSE, *refusals])
    graph = build_graph(
        [close_tool(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)

    [op] = env.ops()
    assert crm.effects == 1
    assert op.status is S.UNKNOWN, op.status
    events = env.ledger_call("events", "default", op.operation_id)
    assert EventKind.REJECT not in [e.kind for e in events]
    last = events[-1]
    assert last.kind is EventKind.MARK_UNKNOWN
    assert last.evidence is not None
    assert last.evidence.kind is EvidenceKind.INCONCLUSIVE
    [pending] = _interrupts(env, graph)
    assert pending.value["operation_id"] == op.operation_id
    # A definitive refusal forbids resending; a transient one only postpones it.
    assert ("retry" in pending.value["allowed_decisions"]) is (refusal is Fault.TRANSIENT)

    requests = crm.stats().requests
    answer = {
        "operation_id": op.operation_id,
        "decision": "confirm",
        "by": "ana",
        "reason": "the CRM shows case A closed under our key",
    }
    env.invoke(graph, Command(resume=answer), CFG)
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert crm.effects == 1
    if refusal is Fault.REJECT:
        assert crm.stats().requests == requests  # the resume sent nothing


def test_first_dispatch_refusal_stays_conclusive(env: Env) -> None:
    """A refusal of the very first dispatch is still a definitive rejection, without a person."""
    crm = FakeCRM()
    crm.faults.push(Fault.REJECT)
    graph = build_graph(
        [close_tool(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [op] = env.ops()
    assert op.status is S.REJECTED
    assert crm.effects == 0
    assert _interrupts(env, graph) == []
