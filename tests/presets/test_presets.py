"""Provider presets (``langgraph_effects.presets``) against their fakes (``testing.FakeAPI``).

Two halves: each fake behaves as its provider documents (key replay, errors replayed,
window expiry, payload mismatch, a request in flight, late search results, convergent
upserts, keyless resends that act), and each preset with its fake gives 0 duplicates
and 1 effect per intended call across the crash points, the scenario runner driving a
real graph over a real ledger.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from langgraph_effects import EffectContext, InMemoryLedger, PostgresLedger, SQLiteLedger, effect
from langgraph_effects.core.model import Evidence, EvidenceKind, OperationStatus
from langgraph_effects.errors import EffectRejected, InvalidInput, TransientProviderError
from langgraph_effects.presets import (
    ADYEN,
    GITHUB,
    HUBSPOT,
    PAYPAL,
    PRESETS,
    SALESFORCE,
    SQUARE,
    STRIPE,
    ZENDESK,
    Preset,
)
from langgraph_effects.testing import CrashPoint, FakeAPI, FakeClock, Fault, Scenario, defer
from langgraph_effects.testing.providers import ProviderTimeout
from langgraph_effects.testing.scenario import run_scenario

KEYED = [p for p in PRESETS.values() if p.key is not None]
KEYLESS = [p for p in PRESETS.values() if p.key is None and p.resend == "never"]
# PayPal resends only once told its API's window: the matrix runs it both ways.
PAYPAL_3H = PAYPAL.with_window(timedelta(hours=3))
RUNNABLE = [*PRESETS.values(), PAYPAL_3H]
# The points one lone call crosses (AFTER_PREPARE is crossed by an approved call only).
CRASHES = [
    CrashPoint.BEFORE_PREPARE,
    CrashPoint.AFTER_CLAIM,
    CrashPoint.AFTER_PROVIDER,
    CrashPoint.AFTER_RECEIPT,
]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def api(preset: Preset, clock: FakeClock, **kw: Any) -> FakeAPI:
    return FakeAPI(preset=preset, clock=clock, **kw)


def test_presets_say_what_they_resend() -> None:
    resend = {p.name: p.resend for p in PRESETS.values()}
    assert {n for n, r in resend.items() if r == "under key"} == {
        "stripe",
        "adyen",
        "square",
        "zendesk",
    }
    assert {n for n, r in resend.items() if r == "convergent"} == {"salesforce", "hubspot"}
    assert resend["paypal"] == "never"  # until its API's window is stated
    assert {p.name for p in KEYLESS} == {
        "sendgrid",
        "postmark",
        "mailgun",
        "ses",
        "github",
        "slack",
    }
    assert STRIPE.contract is not None
    assert STRIPE.contract.key_retention == timedelta(hours=23)
    assert ADYEN.contract is not None
    assert ADYEN.contract.idempotency_window == timedelta(days=31)
    # Square publishes no window: resends stop 10 minutes after the first dispatch.
    assert SQUARE.contract is not None
    assert SQUARE.contract.key_retention == timedelta(minutes=10)
    assert PAYPAL.with_window(timedelta(hours=3)).resend == "under key"
    with pytest.raises(InvalidInput, match="takes no idempotency key"):
        GITHUB.with_window(timedelta(hours=1))
    for preset in PRESETS.values():
        assert preset.source.startswith("https://")
        assert preset.limits


# --------------------------------------------------------------------------- the fakes


@pytest.mark.parametrize("preset", KEYED, ids=lambda p: p.name)
def test_a_keyed_fake_replays_refuses_expires_and_409s(preset: Preset, clock: FakeClock) -> None:
    fake = api(preset, clock)
    first = fake.create("a", {"amount": 5}, idempotency_key="k1")
    assert fake.create("a", {"amount": 5}, idempotency_key="k1") == first  # replayed
    with pytest.raises(EffectRejected) as mismatch:
        fake.create("a", {"amount": 6}, idempotency_key="k1")
    assert mismatch.value.code == "idempotency_key_reused"
    assert (fake.effects, fake.stats().replays) == (1, 1)
    # In flight: the first request with k2 is still being processed; a resend is a 409.
    fake.faults.push(Fault.LATE, delay=timedelta(seconds=30))
    with pytest.raises(ProviderTimeout):
        fake.create("b", {"amount": 1}, idempotency_key="k2")
    with pytest.raises(TransientProviderError, match="still in progress"):
        fake.create("b", {"amount": 1}, idempotency_key="k2")
    clock.advance(timedelta(seconds=31))
    assert fake.create("b", {"amount": 1}, idempotency_key="k2")["status"] == "created"
    assert fake.effects == 2  # the late request landed once; the resend replayed it
    # Past the window the key is forgotten: the same resend acts again.
    clock.advance(fake.retention)
    fake.create("a", {"amount": 5}, idempotency_key="k1")
    assert fake.duplicates == 1


def test_zendesk_keeps_a_key_two_hours_and_refuses_another_body_with_a_400(
    clock: FakeClock,
) -> None:
    """As developer.zendesk.com documents: "Keys expire after two hours"; the same key with
    another body is a 400 IdempotentRequestError; resends stop 15 minutes before expiry."""
    assert ZENDESK.contract is not None
    assert ZENDESK.contract.idempotency_window == timedelta(hours=2)
    assert ZENDESK.contract.key_retention == timedelta(hours=1, minutes=45)
    fake = api(ZENDESK, clock)
    assert fake.retention == timedelta(hours=2)
    first = fake.create("t", {"subject": "help"}, idempotency_key="z1")
    clock.advance(timedelta(hours=1, minutes=59))
    assert fake.create("t", {"subject": "help"}, idempotency_key="z1") == first
    with pytest.raises(EffectRejected) as mismatch:
        fake.create("t", {"subject": "other"}, idempotency_key="z1")
    assert mismatch.value.code == "idempotency_key_reused"
    assert mismatch.value.detail == {"status": 400, "error": "IdempotentRequestError"}
    clock.advance(timedelta(minutes=1))  # two hours after the original request
    assert fake.create("t", {"subject": "help"}, idempotency_key="z1") != first
    assert (fake.effects, fake.duplicates) == (2, 1)


def test_stripe_replays_a_definitive_error_under_its_key(clock: FakeClock) -> None:
    fake = api(STRIPE, clock)
    fake.faults.push(Fault.REJECT, reason="card declined", code="card_declined")
    for _ in range(2):
        with pytest.raises(EffectRejected) as declined:
            fake.create("a", {"amount": 5}, idempotency_key="k1")
        assert declined.value.code == "card_declined"
    assert (fake.effects, fake.stats().replays) == (0, 1)


@pytest.mark.parametrize("preset", [SALESFORCE, HUBSPOT], ids=lambda p: p.name)
def test_a_convergent_upsert_changes_nothing_the_second_time(
    preset: Preset, clock: FakeClock
) -> None:
    fake = api(preset, clock)
    first = fake.upsert("ext-1", {"stage": "won"})
    assert fake.upsert("ext-1", {"stage": "won"})["id"] == first["id"]
    assert fake.effects == 1
    assert fake.upsert("ext-1", {"stage": "lost"})["status"] == "updated"
    assert (fake.effects, fake.duplicates) == (2, 0)


@pytest.mark.parametrize("preset", KEYLESS, ids=lambda p: p.name)
def test_a_keyless_fake_acts_on_every_resend_and_its_search_lags(
    preset: Preset, clock: FakeClock
) -> None:
    fake = api(preset, clock, search_delay=timedelta(minutes=1))
    marker = "lge-op:k1"
    fake.create("ana@example.com", {"note": marker}, idempotency_key="k1")
    fake.create("ana@example.com", {"note": marker}, idempotency_key="k1")  # the key is ignored
    assert (fake.effects, fake.duplicates) == (2, 1)
    assert fake.search(marker) == []  # not indexed yet: proves nothing
    clock.advance(timedelta(minutes=2))
    assert len(fake.search(marker)) == 2


def test_the_reconciler_confirms_by_marker_and_is_inconclusive_until_search_catches_up(
    clock: FakeClock,
) -> None:
    """Sync and async searches alike; an empty search never rejects."""
    import asyncio

    fake = api(GITHUB, clock, search_delay=timedelta(minutes=1))
    ledger = InMemoryLedger(clock=clock.now)
    ledger.setup()
    tool = issue_tool(GITHUB, fake)
    out = run_scenario(
        Scenario(
            tools=[tool],
            tool_calls=[CALL],
            providers=[fake],
            clock=clock,
            crash_at=CrashPoint.AFTER_PROVIDER,
            policy=defer,
            thread_id="late",
        ),
        ledger=ledger,
    )
    [op] = ledger.list(tenant_id="late")
    assert (out.effects, out.duplicates, op.status) == (1, 0, OperationStatus.UNKNOWN)
    assert out.unknown == 1  # pending a person's review: the search had not caught up
    clock.advance(timedelta(minutes=2))
    found = GITHUB.reconciler(fake.search)(op)
    assert isinstance(found, Evidence)
    assert found.kind is EvidenceKind.CONFIRMED
    assert found.provider_result_id == "github-000001"

    async def search(marker: str) -> list[dict[str, Any]]:
        return fake.search(marker)

    later = GITHUB.reconciler(search)(op)
    assert not isinstance(later, Evidence)
    assert asyncio.run(later).kind is EvidenceKind.CONFIRMED  # type: ignore[arg-type]
    nothing = GITHUB.reconciler(lambda marker: [])(op)
    assert isinstance(nothing, Evidence)
    assert nothing.kind is EvidenceKind.INCONCLUSIVE  # never rejected: absence proves nothing


# --------------------------------------------------------------------------- the contract

CALL = {"name": "act", "args": {"target": "t-1", "note": "hello"}, "id": "c1"}


def issue_tool(preset: Preset, fake: FakeAPI) -> Any:
    """The effect a user writes with a preset: its contract, its reconciler, its marker."""

    @effect(
        f"{preset.name}.act",
        target=lambda a: a["target"],
        contract=preset.contract,
        reconcile=preset.reconciler(fake.search),
    )
    def act(target: str, note: str, ctx: EffectContext) -> dict[str, Any]:
        """Act at the provider."""
        payload = {"note": note, "marker": preset.marker(ctx)}
        if preset.resend == "convergent":
            return fake.upsert(target, payload)
        return fake.create(target, payload, idempotency_key=ctx.idempotency_key)

    return act


def operator(fake: FakeAPI, asked: list[str]) -> Any:
    """A person who looks at the provider: confirm what it shows, order a resend otherwise."""

    def policy(request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request["operation_id"])
        shown = fake.effects_for(CALL["args"]["target"]) > 0
        return {
            "operation_id": request["operation_id"],
            "decision": "confirm" if shown else "retry",
            "by": "operator@example.com",
            "reason": "seen at the provider" if shown else "the provider shows nothing",
        }

    return policy


def contract_run(preset: Preset, crash: CrashPoint, ledger: Any, clock: FakeClock) -> Any:
    fake = api(preset, clock)
    asked: list[str] = []
    report = run_scenario(
        Scenario(
            tools=[issue_tool(preset, fake)],
            tool_calls=[CALL],
            providers=[fake],
            clock=clock,
            crash_at=crash,
            policy=operator(fake, asked),
            thread_id=f"{preset.name}-{crash.value}",
        ),
        ledger=ledger,
    )
    return report, fake, asked


@pytest.mark.parametrize("crash", CRASHES, ids=lambda c: c.value)
@pytest.mark.parametrize(
    "preset", RUNNABLE, ids=lambda p: p.name + ("-3h" if p is PAYPAL_3H else "")
)
def test_preset_and_fake_give_one_effect_across_the_crash_points(
    preset: Preset, crash: CrashPoint, clock: FakeClock
) -> None:
    ledger = InMemoryLedger(clock=clock.now)
    ledger.setup()
    report, fake, asked = contract_run(preset, crash, ledger, clock)
    assert report.crashes == 1
    assert (fake.effects, fake.duplicates) == (1, 0), report.problems
    assert (report.mislabelled, report.unknown, report.completed) == (0, 0, 1), report.problems
    # A person is asked only where the preset cannot settle it alone: a keyless API that
    # may or may not have heard the request (crashed after the claim, before it answered).
    keyless_unsure = preset.resend == "never" and crash is CrashPoint.AFTER_CLAIM
    assert len(asked) == int(keyless_unsure), asked


@pytest.mark.parametrize("window", ["preset", "assumed_24h"])
def test_square_resends_nothing_past_its_stated_interval(window: str, clock: FakeClock) -> None:
    """Square publishes no key window: the preset resends only within 10 minutes. Killed after
    Square charged, resumed 16 minutes later while its search still lags: a person is asked,
    nothing is resent. The control assumes a 24 h window: it resends blindly, and a Square
    that kept the key 15 minutes charges again."""
    preset = SQUARE if window == "preset" else SQUARE.with_window(timedelta(hours=24))
    # Square keeps the key 15 minutes here (the control does not know it); its search lags.
    fake = api(preset, clock, retention=timedelta(minutes=15), search_delay=timedelta(hours=1))
    ledger = InMemoryLedger(clock=clock.now)
    ledger.setup()
    asked: list[str] = []
    report = run_scenario(
        Scenario(
            tools=[issue_tool(preset, fake)],
            tool_calls=[CALL],
            providers=[fake],
            clock=clock,
            crash_at=CrashPoint.AFTER_PROVIDER,
            between=lambda: clock.advance(timedelta(minutes=16)),
            policy=operator(fake, asked),
            thread_id=f"square-{window}",
        ),
        ledger=ledger,
    )
    if window == "preset":
        assert (fake.effects, fake.duplicates, len(asked)) == (1, 0, 1), report.problems
        assert report.completed == 1
    else:
        assert (fake.effects, fake.duplicates, len(asked)) == (2, 1, 0)


@pytest.fixture
def durable_ledger(
    request: pytest.FixtureRequest, tmp_path: Any, clock: FakeClock
) -> Iterator[Any]:
    if request.param == "sqlite":
        with SQLiteLedger.from_conn_string(str(tmp_path / "l.db"), clock=clock.now) as ledger:
            ledger.setup()
            yield ledger
        return
    url = request.getfixturevalue("pg_url")
    with psycopg.connect(url, autocommit=True) as conn:
        ledger = PostgresLedger(conn, clock=clock.now)
        ledger.setup()
        yield ledger


@pytest.mark.parametrize("durable_ledger", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("preset", [STRIPE, SALESFORCE, GITHUB], ids=lambda p: p.name)
def test_one_effect_on_sqlite_and_postgres(
    preset: Preset, durable_ledger: Any, clock: FakeClock
) -> None:
    report, fake, _ = contract_run(preset, CrashPoint.AFTER_PROVIDER, durable_ledger, clock)
    assert (fake.effects, fake.duplicates, report.unknown) == (1, 0, 0), report.problems
