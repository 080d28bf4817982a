"""The campaign's identity draws (``testing.draws``) count intended against acted, both ways.

Each shape, run clean with a deliberate repeat, acts once per intent, as its plain
``ToolNode`` control does; and a repeat the library merges into the earlier call's
operation (here on purpose: an ``intent_key``) is counted as a lost effect, at the provider.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from langgraph_effects import EffectContext, effect
from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.draws import VARIANTS, Variant
from langgraph_effects.testing.scenario import (
    Kind,
    ProviderKind,
    Providers,
    Schedule,
    run_scenario,
)

CASES: list[tuple[Kind, Variant]] = (
    [(Kind.PARALLEL, v) for v in VARIANTS["parallel"]]
    + [(Kind.SUB_AGENT, v) for v in VARIANTS["sub_agent"]]
    + [
        (Kind.HAND_MADE, "send"),
        (Kind.SUMMARIZED, "send"),
        (Kind.COLLIDING, "send"),
    ]
)


@pytest.fixture
def providers() -> Iterator[Providers]:
    world = Providers.open(None)
    yield world
    world.close()


def clean(kind: Kind, variant: Variant, **changes: Any) -> Schedule:
    """A schedule of ``kind`` with no crash, no fault, and the same request asked twice."""
    calls = (ProviderKind.CRM,) * (2 if kind is Kind.COLLIDING else 1)
    return Schedule.generate(7, [kind]).with_(
        calls=calls,
        faults=(None,) * len(calls),
        refaults=(),
        crash_at=None,
        revoke="none",
        twins=False,
        resumers=1,
        asynchronous=False,
        repeat=kind is not Kind.SUMMARIZED,  # summarized_thread repeats by its own story
        variant=variant,
        policy="confirm_if_seen",
        bad_answers=0.0,
        **changes,
    )


@pytest.mark.parametrize(("kind", "variant"), CASES, ids=[f"{k.value}-{v}" for k, v in CASES])
@pytest.mark.parametrize("control", [False, True], ids=["effects", "toolnode"])
def test_each_shape_acts_once_per_intent_with_a_deliberate_repeat(
    providers: Providers, kind: Kind, variant: Variant, control: bool
) -> None:
    schedule = clean(kind, variant)
    sc = schedule.scenario(providers, control=control)
    with SQLiteLedger.from_conn_string(":memory:", clock=providers.clock.now) as ledger:
        ledger.setup()
        report = run_scenario(sc, ledger=ledger)
    calls = len(schedule.calls) + (kind is Kind.PARALLEL)  # the audit branch means it again
    assert report.completed == 1, report.problems
    assert (report.intents, report.effects) == (2 * calls, 2 * calls), report.problems
    assert (report.duplicates, report.lost_effects, report.violations) == (0, 0, 0)


def test_a_stateless_service_acts_once_per_request(providers: Providers) -> None:
    """Two invokes of the same request, no checkpointer; a RetryPolicy re-runs the node
    within each: two effects, where a plain ToolNode acts again on the retry."""
    schedule = Schedule.generate(7, [Kind.NO_CHECKPOINTER]).with_(
        calls=(ProviderKind.CRM,), faults=(None,), refaults=(), flakes=1
    )
    counts = []
    for control in (False, True):
        world = Providers.open(None)
        try:
            sc = schedule.scenario(world, control=control)
            with SQLiteLedger.from_conn_string(":memory:", clock=world.clock.now) as ledger:
                ledger.setup()
                report = run_scenario(sc, ledger=ledger)
        finally:
            world.close()
        counts.append((report.intents, report.effects, report.duplicates, report.lost_effects))
    assert counts == [(2, 2, 0, 0), (2, 3, 1, 0)]


@pytest.mark.parametrize("shape_kind", [Kind.HAND_MADE, Kind.SUB_AGENT, Kind.PARALLEL])
def test_a_repeat_merged_into_the_earlier_operation_is_a_lost_effect(
    providers: Providers, shape_kind: Kind
) -> None:
    """An ``intent_key`` maps every proposal of the close to one operation, as documented:
    the person's second request is answered from the first's receipt. The draws count it
    at the provider: one effect for two intents."""
    crm = providers.crm

    @effect("crm.close_case", target=lambda a: a["case_id"], intent_key=lambda a: a["case_id"])
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    schedule = clean(shape_kind, "send")
    sc = schedule.scenario(providers)
    sc = replace(sc, tools=[close_case])
    with SQLiteLedger.from_conn_string(":memory:", clock=providers.clock.now) as ledger:
        ledger.setup()
        report = run_scenario(sc, ledger=ledger)
    assert report.completed == 1, report.problems
    assert report.effects == 1
    assert report.lost_effects >= 1, report.problems
    assert any("never acted" in p or "answered done" in p for p in report.problems)
