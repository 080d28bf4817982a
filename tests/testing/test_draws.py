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
from langgraph_effects.core.model import Decision
from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.draws import VARIANTS, Variant
from langgraph_effects.testing.providers import Fault
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
    pinned: dict[str, Any] = {
        "calls": calls,
        "faults": (None,) * len(calls),
        "refaults": (),
        "crash_at": None,
        "revoke": "none",
        "twins": False,
        "resumers": 1,
        "asynchronous": False,
        "repeat": kind is not Kind.SUMMARIZED,  # summarized_thread repeats by its own story
        "variant": variant,
        "policy": "confirm_if_seen",
        "bad_answers": 0.0,
    }
    return Schedule.generate(7, [kind]).with_(**{**pinned, **changes})


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


REPEATED = [Kind.BASE, Kind.KEY_ROTATION, Kind.FUNCTIONAL, Kind.HISTORY, Kind.FORK]


@pytest.mark.parametrize("kind", REPEATED, ids=[k.value for k in REPEATED])
def test_a_deliberate_repeat_acts_again_in_every_kind_that_draws_one(kind: Kind) -> None:
    """Asked again once the first answer was delivered, the same request acts again: under
    a rotated ``payload_key`` (keyed digests alone tell it apart), in a Functional API
    workflow, and before a replay or a fork of a snapshot from before an answer, which
    sends nothing again; the plain ``ToolNode`` beside it acts again on that replay."""
    schedule = clean(kind, "send")
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
        assert report.completed == 1, report.problems
        assert report.intents == 2, report.problems
        counts.append((report.effects, report.duplicates, report.lost_effects))
    (effects, duplicates, lost), (control_effects, _, control_lost) = counts
    assert (effects, duplicates, lost) == (2, 0, 0)
    # The replay (or fork) here starts before the first turn's tools ran: a ToolNode runs
    # them again; elsewhere it acts once per intent as well.
    travels = kind in (Kind.HISTORY, Kind.FORK)
    assert (control_effects > 2, control_lost) == (travels, 0)


def _at_console(
    console: Decision, answer: dict[str, Any], *, control: bool = False, **changes: Any
) -> tuple[Any, Any]:
    """One CRM call of the ``operator_decisions`` kind: the operator decides its pending
    question at the console (``console``), then the person answers ``answer`` in the UI."""
    schedule = clean(Kind.OUT_OF_BAND, "send", repeat=False, **changes)
    world = Providers.open(None)
    try:
        sc = replace(
            schedule.scenario(world, control=control),
            console=lambda request: console,
            policy=lambda request: {**answer, "by": "ana"},
        )
        with SQLiteLedger.from_conn_string(":memory:", clock=world.clock.now) as ledger:
            ledger.setup()
            report = run_scenario(sc, ledger=ledger)
            ops = [] if control else ledger.list(tenant_id=sc.thread_id)
    finally:
        world.close()
    return report, ops


@pytest.mark.parametrize(
    ("console", "answer", "changes", "control_effects"),
    [
        (Decision.REJECT, {"decisions": [{"type": "approve"}]}, {"approval": True}, 1),
        (
            Decision.CONFIRM,
            {"decision": "confirm"},
            {"faults": (Fault.LOSE_RESPONSE,), "key_window_zero": True},
            2,
        ),
    ],
    ids=["approval-rejected-then-approved", "review-confirmed-then-confirmed"],
)
def test_a_decision_taken_at_the_console_while_its_question_is_pending_stands(
    console: Decision, answer: dict[str, Any], changes: dict[str, Any], control_effects: int
) -> None:
    """An operator rejects a pending approval at the console (or confirms a pending review)
    and the person then answers the question still shown: the operator's final decision
    stands (nothing sent; one effect, confirmed), counted at the CRM; the plain ToolNode
    beside it, which asks nobody, sends the rejected call (resends the lost response)."""
    report, ops = _at_console(console, answer, **changes)
    assert report.completed == 1, report.problems
    assert (report.violations, report.duplicates, report.lost_effects) == (0, 0, 0)
    (op,) = ops
    rejected = console is Decision.REJECT
    assert (report.effects, op.status.value) == (
        (0, "rejected") if rejected else (1, "confirmed")
    ), report.problems
    control, _ = _at_console(console, answer, control=True, **changes)
    assert control.effects == control_effects


@pytest.mark.parametrize(
    "answer",
    [
        {"decisions": [{"type": "reject", "message": "no"}]},
        {"decision": "reject", "reason": "no"},
    ],
    ids=["hitl", "native"],
)
def test_the_persons_reject_after_an_approval_at_the_console_is_the_last_word(
    answer: dict[str, Any],
) -> None:
    """The operator approves a pending call at the console, then the person rejects it in
    the UI before anything ran: the last word before dispatch wins, nothing is sent."""
    report, ops = _at_console(Decision.APPROVE, answer, approval=True)
    (op,) = ops
    assert (report.effects, op.status.value, report.violations) == (0, "rejected", 0)
