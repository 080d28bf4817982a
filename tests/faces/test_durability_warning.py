"""DurabilityWarning names the user's own line, and the package's harness never raises it."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
from _graphs import build_graph, call
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_effects import DurabilityWarning, EffectContext, InMemoryLedger, effect
from langgraph_effects.decide import thread
from langgraph_effects.testing.providers import FakeCRM
from langgraph_effects.testing.scenario import (
    ProviderKind,
    Providers,
    Scenario,
    builtin_call,
    confirm_if_seen,
    effect_tools,
    run_scenario,
)


@pytest.fixture
def unwarned() -> Iterator[None]:
    """A process that has not warned yet (the warning comes once per process)."""
    before = thread._durability_warned
    thread._durability_warned = False
    yield
    thread._durability_warned = before


def graph_for(crm: FakeCRM) -> object:
    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, object]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    ledger = InMemoryLedger()
    ledger.setup()
    closing = call("close_case", "call-a", case_id="A", resolution="fixed")
    return build_graph([close_case], [closing], ledger=ledger, checkpointer=InMemorySaver())


@pytest.mark.usefixtures("unwarned")
def test_the_warning_points_at_the_users_invoke() -> None:
    """Run with LangGraph's default durability, the warning's file and line are the test's own
    ``invoke``, not a frame inside langgraph_effects or LangGraph."""
    crm = FakeCRM()
    graph = graph_for(crm)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _line() + 1
        graph.invoke({"messages": [("user", "close A")]}, {"configurable": {"thread_id": "w1"}})  # type: ignore[attr-defined]
    [warning] = [w for w in caught if issubclass(w.category, DurabilityWarning)]
    assert (warning.filename, warning.lineno) == (__file__, line)
    assert crm.effects == 1


@pytest.mark.usefixtures("unwarned")
def test_run_scenario_raises_no_durability_warning_and_keeps_the_users() -> None:
    """The harness draws the default durability on purpose: a user's test of its effects with
    run_scenario sees no DurabilityWarning, and the user's own graph still gets the one."""
    providers = Providers.open(None)
    scenario = Scenario(
        tools=effect_tools(providers),
        tool_calls=[builtin_call(ProviderKind.CRM, 0, tag="t")],
        providers=providers.all,
        clock=providers.clock,
        policy=confirm_if_seen(providers.shows),
        applied=providers.applied,
        thread_id="t",
    )
    ledger = InMemoryLedger(clock=providers.clock.now)
    ledger.setup()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = run_scenario(scenario, ledger=ledger)
        assert report.effects == 1
        assert not [w for w in caught if issubclass(w.category, DurabilityWarning)]
        graph = graph_for(FakeCRM())
        graph.invoke({"messages": [("user", "close A")]}, {"configurable": {"thread_id": "w2"}})  # type: ignore[attr-defined]
    providers.close()
    assert len([w for w in caught if issubclass(w.category, DurabilityWarning)]) == 1


def _line() -> int:
    """The line number of the caller."""
    import sys

    return sys._getframe(1).f_lineno
