"""The campaign's two receipt draws bite (issue 23): a slow sibling dies mid fan-out after
its siblings answered, and a receipt commit cut on the campaign's SQLite connection is
tried again. Effects counted at the fake providers; the ledger is the real SQLite one."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from langgraph_effects.core.model import TAKEOVER_PREFIX
from langgraph_effects.core.model import OperationStatus as S
from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.scenario import ProviderKind, Providers, Schedule, run_scenario
from langgraph_effects.testing.scenario.receipts import DroppingConnection


def _run(schedule: Schedule, conn: sqlite3.Connection) -> tuple[Any, Any, Providers, Any]:
    providers = Providers.open(None)
    scenario = schedule.scenario(providers)
    ledger = SQLiteLedger(conn, clock=providers.clock.now)
    ledger.setup()
    report = run_scenario(scenario, ledger=ledger)
    return report, scenario, providers, ledger


@pytest.mark.parametrize("acted", [False, True], ids=["before-the-provider", "after-it"])
def test_a_slow_sibling_dies_in_its_call_once_its_siblings_answered(acted: bool) -> None:
    """Two CRM closures fan out (one task each); the second is slow and dies inside its
    provider call after the first answered: the first's receipt was in the ledger (never
    taken over), the second is taken over, then reconciled or reviewed; nothing twice."""
    schedule = Schedule.generate(103).with_(
        calls=(ProviderKind.CRM, ProviderKind.CRM),
        faults=(None, None),
        refaults=(),
        twins=False,
        slow_sibling=True,
        slow_acted=acted,
    )
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    report, scenario, providers, ledger = _run(schedule, conn)
    try:
        slow = scenario.slow_sibling
        assert slow is not None
        assert slow.fired
        assert set(slow.due) == {"call-s103-0"}  # answered before the death
        assert (report.crashes, report.duplicates, report.lost_receipts) == (1, 0, 0)
        # Killed before its provider heard of it, the slow call is reviewed (the schedule's
        # person decides it did not happen), never resent blindly.
        assert report.effects == (2 if acted else 1)
        for op in ledger.list(tenant_id="s103"):
            events = ledger.events(op.tenant_id, op.operation_id)
            taken = [e for e in events if e.actor.startswith(TAKEOVER_PREFIX)]
            assert bool(taken) == (op.tool_call_id == slow.slow), op
    finally:
        providers.close()
        conn.close()


@pytest.mark.parametrize("after", [False, True], ids=["rolled-back", "committed"])
def test_a_receipt_commit_cut_once_is_tried_again_and_kept(after: bool) -> None:
    """The first receipt commit fails as a dropped connection does (nothing written, or
    written with its answer lost): the engine writes it again; the operation is confirmed
    from its receipt, never taken over, and its provider acted once."""
    schedule = Schedule.generate(21).with_(crash_at=None, dropped_receipt="before")
    conn = sqlite3.connect(
        ":memory:", check_same_thread=False, isolation_level=None, factory=DroppingConnection
    )
    assert isinstance(conn, DroppingConnection)
    conn.drops, conn.after = 1, after
    report, _, providers, ledger = _run(schedule, conn)
    try:
        (dropped,) = conn.dropped
        op = ledger.get("s21", dropped)
        assert op is not None
        assert op.status is S.CONFIRMED
        events = ledger.events("s21", dropped)
        assert not [e for e in events if e.actor.startswith(TAKEOVER_PREFIX)]
        assert [e.kind.value for e in events].count("confirm") == 1
        assert (report.duplicates, report.lost_receipts, report.errors) == (0, 0, 0)
        assert providers.applied(op) == 1
    finally:
        providers.close()
        conn.close()
