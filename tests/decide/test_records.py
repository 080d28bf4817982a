"""What the engine records and reports: the key retention a contract promises, each replay.

Through a real graph (``EffectToolNode`` on the in-memory ledger), counted at a fake CRM.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from _graphs import Env, build_graph, call, tool_messages

from langgraph_effects import EffectContext, ProviderContract, effect
from langgraph_effects.core.model import OperationStatus
from langgraph_effects.testing.providers import FakeCRM

S = OperationStatus
BACKENDS = [("memory", "sync")]
WINDOW = ProviderContract(idempotency_window=timedelta(hours=24))


def _close_tool(crm: FakeCRM, contract: ProviderContract | None) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"], contract=contract)
    def close_case(case_id: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, "fixed", idempotency_key=ctx.idempotency_key)

    return close_case


@pytest.mark.parametrize(
    ("contract", "retention"),
    [(WINDOW, (24 * 60 - 5) * 60.0), (None, None)],
    ids=["key-contract", "no-contract"],
)
def test_the_runner_records_the_retention_its_contract_promises(
    env: Env, contract: ProviderContract | None, retention: float | None
) -> None:
    """The record holds the key the tool was given and the contract's retention (None without
    a key contract), so the CLI can judge a resend from the record alone."""
    crm = FakeCRM()
    graph = build_graph(
        [_close_tool(crm, contract)],
        [call("close_case", "call-a", case_id="A")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, {"configurable": {"thread_id": "t"}})
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert op.idempotency_key is not None
    assert op.key_retention_seconds == retention
    assert crm.effects == 1


def _replays(caplog: pytest.LogCaptureFixture) -> int:
    return sum(getattr(r, "lge_event", None) == "replay" for r in caplog.records)


def test_the_runner_reports_each_replay_of_a_confirmed_record(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """count_replay fires when a confirmed record answers a re-run, not on the first dispatch."""
    caplog.set_level(logging.INFO, logger="langgraph_effects")
    crm = FakeCRM()
    cfg = {"configurable": {"thread_id": "t"}}
    graph = build_graph(
        [_close_tool(crm, WINDOW)],
        [call("close_case", "call-a", case_id="A")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    [msg] = tool_messages(env.invoke(graph, {"messages": [("user", "close A")]}, cfg))
    assert msg.status == "success"
    assert _replays(caplog) == 0
    before_tools = next(s for s in graph.get_state_history(cfg) if s.next == ("tools",))
    env.invoke(graph, None, before_tools.config)
    env.invoke(graph, None, before_tools.config)
    assert _replays(caplog) == 2
    assert crm.effects == 1
