"""Results and evidence no backend stores as given are stored escaped, and never lose a receipt.

Issue 10, finding 6 (and the storage part of 7): a provider answer with a NUL
(PostgreSQL's text and jsonb refuse it) or a lone surrogate (UTF-8 cannot encode
it) turned an applied effect into ``unknown``; a reconciler echoing it, or
conclusive evidence with a long summary or source, failed on every resume. The
rule (``core.storable``): such characters are written as their ``\\uXXXX``
escape, over-long evidence texts are cut with a marker. Effects are counted at
the fake CRM.
"""

from __future__ import annotations

import json
from typing import Any

from _graphs import Env, build_graph, call, tool_messages

from langgraph_effects import EffectContext, Evidence, OperationStatus, effect
from langgraph_effects.core.model import EventKind
from langgraph_effects.testing.providers import FakeCRM, Fault

S = OperationStatus
CFG = {"configurable": {"thread_id": "t1"}}
CLOSE_A = call("close_case", "call-a", case_id="A", resolution="fixed")
ODD = "nul\x00 and lone \ud800 surrogate"
ESCAPED = "nul\\u0000 and lone \\ud800 surrogate"


def odd_tool(crm: FakeCRM, reconcile: Any = None) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"], reconcile=reconcile)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case; the provider's answer carries characters no backend stores."""
        answer = crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)
        return {**answer, "note": ODD, ODD: 1}

    return close_case


def test_result_with_nul_and_surrogate_is_confirmed(env: Env) -> None:
    """The answer holds NUL and a lone surrogate: confirmed, stored escaped, sent once."""
    crm = FakeCRM()
    graph = build_graph(
        [odd_tool(crm)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    out = env.invoke(graph, {"messages": [("user", "close A")]}, CFG)

    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert op.result["note"] == ESCAPED
    assert op.result[ESCAPED] == 1
    assert op.result["case_id"] == "A"
    [message] = tool_messages(out)
    assert message.status == "success"
    assert json.loads(str(message.content))["note"] == ESCAPED
    # A replay answers from the record and never calls the provider again.
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    assert crm.effects == 1
    assert crm.stats().requests == 1


def test_reconciler_echoing_odd_long_evidence_settles(env: Env) -> None:
    """Response lost; the reconciler echoes NUL, a surrogate, a 10,000-character summary and a
    500-character source: the operation is confirmed from it, once, and nothing wedges."""
    crm = FakeCRM()
    crm.faults.push(Fault.LOSE_RESPONSE)

    def find(op: Any) -> Evidence:
        case = crm.get_case(op.target)
        assert case["closed_by"] == op.idempotency_key
        return Evidence.confirmed(
            ODD + "x" * 10_000,
            result={"case_id": op.target, "note": ODD},
            provider_result_id=ODD,
            source="lookup " + "s" * 500,
        )

    graph = build_graph(
        [odd_tool(crm, reconcile=find)], [CLOSE_A], ledger=env.ledger, checkpointer=env.checkpointer
    )
    out = env.invoke(graph, {"messages": [("user", "close A")]}, CFG)

    [op] = env.ops()
    assert op.status is S.CONFIRMED, op
    assert op.result == {"case_id": "A", "note": ESCAPED}
    assert op.provider_result_id == ESCAPED
    [message] = tool_messages(out)
    assert message.status == "success"
    [resolved] = [
        e
        for e in env.ledger_call("events", "default", op.operation_id)
        if e.kind is EventKind.RESOLVE
    ]
    assert resolved.evidence is not None
    assert resolved.evidence.summary.startswith(ESCAPED)
    assert resolved.evidence.summary.endswith("characters in all]")
    assert len(resolved.evidence.summary) <= 4000
    assert len(resolved.evidence.source) <= 200
    assert crm.effects == 1


def test_ambiguous_error_with_odd_text_is_recorded_unknown(env: Env) -> None:
    """The provider acts, then the call fails with NUL and a surrogate in the error text: the
    operation is recorded unknown with the escaped reason (not wedged in dispatching)."""
    crm = FakeCRM()

    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case; the connection drops with an odd message."""
        crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)
        raise ConnectionError(ODD)

    graph = build_graph(
        [close_case],
        [CLOSE_A],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
        node_kwargs={"interrupt_on_unknown": False},
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, CFG)
    [op] = env.ops()
    assert op.status is S.UNKNOWN
    assert op.error is not None
    assert ESCAPED in op.error
    assert crm.effects == 1
