"""The fake providers: each fault does what it says, and effects are counted honestly."""

from __future__ import annotations

import pickle
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from langgraph_effects.errors import EffectRejected, ProviderError, TransientProviderError
from langgraph_effects.testing.faults import CRASH_EXIT_CODE, ChildExit, run_in_child
from langgraph_effects.testing.providers import (
    FakeClock,
    FakeCRM,
    FakeMail,
    FakeTicketing,
    Fault,
    ProviderTimeout,
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def crm(clock: FakeClock) -> FakeCRM:
    return FakeCRM(clock=clock)


# --------------------------------------------------------------------------- CRM and keys


def test_lose_response_applies_once_and_a_resend_under_the_key_replays_the_first_response(
    crm: FakeCRM,
) -> None:
    """LOSE_RESPONSE commits, raises an ambiguous timeout; the resend applies nothing."""
    crm.faults.push(Fault.LOSE_RESPONSE)
    with pytest.raises(ProviderTimeout) as raised:
        crm.close_case("case-1", "refunded", idempotency_key="k1")
    assert not isinstance(raised.value, ProviderError)
    assert crm.get_case("case-1")["closed_by"] == "k1"

    again = crm.close_case("case-1", "refunded", idempotency_key="k1")

    assert again == {
        "case_id": "case-1",
        "status": "closed",
        "resolution": "refunded",
        "version": 1,
        "closed_by": "k1",
    }
    stats = crm.stats()
    assert (stats.effects, stats.duplicates, stats.replays, stats.timeouts) == (1, 0, 1, 1)


def test_key_reused_with_another_payload_is_rejected_like_a_422(crm: FakeCRM) -> None:
    """The same key with another payload raises EffectRejected and applies nothing."""
    crm.close_case("case-1", "refunded", idempotency_key="k1")
    with pytest.raises(EffectRejected) as raised:
        crm.close_case("case-1", "replaced", idempotency_key="k1")
    assert raised.value.code == "idempotency_key_reused"
    assert crm.effects == 1
    assert crm.get_case("case-1")["resolution"] == "refunded"


def test_keys_dedupe_inside_the_retention_window_and_not_after(clock: FakeClock) -> None:
    """A resend just inside the window replays; once the window passed it applies again."""
    crm = FakeCRM(clock=clock, retention=timedelta(hours=24))
    crm.close_case("case-1", "refunded", idempotency_key="k1")
    clock.advance(timedelta(hours=24) - timedelta(seconds=1))
    crm.close_case("case-1", "refunded", idempotency_key="k1")
    assert (crm.effects, crm.duplicates) == (1, 0)

    clock.advance(timedelta(seconds=1))
    second = crm.close_case("case-1", "refunded", idempotency_key="k1")

    assert second["version"] == 2
    assert (crm.effects, crm.duplicates, crm.effects_for("case-1")) == (2, 1, 2)
    assert (
        crm.effects_for(idempotency_key="k1"),
        crm.effects_for("case-2", idempotency_key="k1"),
    ) == (
        2,
        0,
    )


def test_transient_fault_refuses_before_acting_with_retry_after(crm: FakeCRM) -> None:
    """TRANSIENT raises TransientProviderError with retry_after, applies nothing, stores no key."""
    crm.faults.push(Fault.TRANSIENT, retry_after=7.5)
    with pytest.raises(TransientProviderError) as raised:
        crm.close_case("case-1", "refunded", idempotency_key="k1")
    assert raised.value.retry_after == 7.5
    assert crm.effects == 0

    crm.close_case("case-1", "refunded", idempotency_key="k1")
    assert (crm.effects, crm.stats().replays) == (1, 0)


def test_reject_fault_refuses_definitively_and_applies_nothing(crm: FakeCRM) -> None:
    """REJECT raises EffectRejected with the scripted code and leaves the case open."""
    crm.faults.push(Fault.REJECT, reason="case is locked", code="locked")
    with pytest.raises(EffectRejected) as raised:
        crm.close_case("case-1", "refunded", idempotency_key="k1")
    assert (raised.value.code, raised.value.reason) == ("locked", "case is locked")
    assert crm.get_case("case-1")["status"] == "open"
    assert crm.effects == 0


def test_lose_request_times_out_without_acting(crm: FakeCRM) -> None:
    """LOSE_REQUEST looks like a lost response to the caller but applies nothing."""
    crm.faults.push(Fault.LOSE_REQUEST)
    with pytest.raises(ProviderTimeout):
        crm.close_case("case-1", "refunded", idempotency_key="k1")
    assert crm.effects == 0
    assert crm.get_case("case-1") == {
        "case_id": "case-1",
        "status": "open",
        "resolution": None,
        "version": 0,
        "closed_by": None,
        "closed_at": None,
        "fields": {},
    }


def test_late_answer_lands_after_the_delay_and_holds_its_key_meanwhile(
    crm: FakeCRM, clock: FakeClock
) -> None:
    """LATE times out, applies once the clock passes the delay; a resend meanwhile gets a 409."""
    crm.faults.push(Fault.LATE, delay=timedelta(seconds=60))
    with pytest.raises(ProviderTimeout):
        crm.close_case("case-1", "refunded", idempotency_key="k1")
    assert (crm.effects, crm.stats().in_flight) == (0, 1)
    assert crm.get_case("case-1")["status"] == "open"
    with pytest.raises(TransientProviderError):
        crm.close_case("case-1", "refunded", idempotency_key="k1")

    clock.advance(60)

    case = crm.get_case("case-1")
    assert (case["status"], case["closed_by"]) == ("closed", "k1")
    assert crm.close_case("case-1", "refunded", idempotency_key="k1")["version"] == 1
    assert crm.effect_log()[0].late
    assert (crm.effects, crm.duplicates, crm.stats().in_flight) == (1, 0, 0)


def test_revoked_authorization_refuses_every_call(crm: FakeCRM) -> None:
    """A revoked authorization raises EffectRejected on effects and lookups until restored."""
    crm.revoke_authorization()
    with pytest.raises(EffectRejected) as raised:
        crm.close_case("case-1", "refunded", idempotency_key="k1")
    assert raised.value.code == "authorization_revoked"
    with pytest.raises(EffectRejected):
        crm.get_case("case-1")
    assert crm.effects == 0

    crm.restore_authorization()
    crm.close_case("case-1", "refunded", idempotency_key="k1")
    assert crm.effects == 1


def test_script_consumes_faults_in_call_order_and_lookup_faults_only_hit_lookups(
    crm: FakeCRM,
) -> None:
    """A script applies one fault per effect call; a fault aimed at get_case waits for it."""
    crm.faults.push(Fault.TRANSIENT, on="get_case")
    crm.script([None, Fault.REJECT])
    assert crm.faults.pending() == [Fault.TRANSIENT, Fault.NONE, Fault.REJECT]
    crm.faults.push(Fault.LOSE_RESPONSE, on="get_case")

    crm.close_case("case-1", "refunded")
    with pytest.raises(EffectRejected):
        crm.close_case("case-2", "refunded")
    with pytest.raises(TransientProviderError):
        crm.get_case("case-1")
    with pytest.raises(ProviderTimeout):
        crm.get_case("case-1")

    assert crm.faults.pending() == []
    assert crm.get_case("case-1")["status"] == "closed"
    assert crm.effects == 1


def test_update_merges_fields_and_counts_per_target(crm: FakeCRM) -> None:
    """update() merges fields, bumps the version, and counts effects for its target only."""
    crm.update("acct-1", {"tier": "gold"}, idempotency_key="u1")
    result = crm.update("acct-1", {"owner": "ana"}, idempotency_key="u2")
    assert result == {"id": "acct-1", "version": 2, "fields": {"tier": "gold", "owner": "ana"}}
    assert (crm.effects_for("acct-1"), crm.effects_for("acct-2"), crm.duplicates) == (2, 0, 0)


def test_closing_a_closed_case_again_without_a_key_is_a_duplicate(crm: FakeCRM) -> None:
    """Without a key a resend re-closes the case: a second effect, counted as a duplicate."""
    crm.close_case("case-1", "refunded")
    crm.close_case("case-1", "refunded")
    assert (crm.effects, crm.duplicates, crm.get_case("case-1")["version"]) == (2, 1, 2)


# --------------------------------------------------------------------------- mail


def test_mail_accepted_is_not_delivered_until_the_delay(clock: FakeClock) -> None:
    """A sent message is 'accepted' and becomes 'delivered' only after delivery_delay."""
    mail = FakeMail(clock=clock, delivery_delay=timedelta(minutes=5))
    sent = mail.send("ana@example.com", "Hi", "body", idempotency_key="m1")
    assert sent == {"message_id": "msg-000001", "status": "accepted"}
    assert mail.delivery_status(sent["message_id"]) == "accepted"
    clock.advance(timedelta(minutes=5))
    assert mail.delivery_status(sent["message_id"]) == "delivered"
    assert mail.delivery_status("msg-999999") is None


def test_mail_never_deliver_fault_and_no_delivery(clock: FakeClock) -> None:
    """NEVER_DELIVER (or delivery_delay=None) leaves a message accepted forever."""
    mail = FakeMail(clock=clock)
    mail.faults.push(Fault.NEVER_DELIVER)
    lost = mail.send("ana@example.com", "Hi", "body")["message_id"]
    fine = mail.send("bob@example.com", "Hi", "body")["message_id"]
    never = FakeMail(clock=clock, delivery_delay=None)
    other = never.send("ana@example.com", "Hi", "body")["message_id"]
    clock.advance(timedelta(days=30))
    assert mail.delivery_status(lost) == "accepted"
    assert mail.delivery_status(fine) == "delivered"
    assert never.delivery_status(other) == "accepted"


def test_mail_search_is_eventually_consistent(clock: FakeClock) -> None:
    """search() misses a sent message until search_delay passed; get_message sees it at once."""
    mail = FakeMail(clock=clock, search_delay=timedelta(seconds=30))
    sent = mail.send("ana@example.com", "Your refund", "body", idempotency_key="m1")
    assert mail.search(to="ana@example.com") == []
    assert mail.get_message(sent["message_id"]) is not None

    clock.advance(30)

    found = mail.search(to="ana@example.com", idempotency_key="m1")
    assert [m["message_id"] for m in found] == [sent["message_id"]]
    assert mail.search(subject="Other") == []
    assert mail.effects_for("ana@example.com") == 1


def test_mail_lost_response_resend_with_key_sends_one_message(clock: FakeClock) -> None:
    """A resend under the key after a lost response returns the same message id."""
    mail = FakeMail(clock=clock)
    mail.faults.push(Fault.LOSE_RESPONSE)
    with pytest.raises(ProviderTimeout):
        mail.send("ana@example.com", "Hi", "body", idempotency_key="m1")
    again = mail.send("ana@example.com", "Hi", "body", idempotency_key="m1")
    assert again["message_id"] == "msg-000001"
    assert (mail.effects, len(mail.search(to="ana@example.com"))) == (1, 1)


# --------------------------------------------------------------------------- ticketing


def test_ticketing_duplicates_on_resend_after_a_lost_response() -> None:
    """Without keys, resending after a lost response creates a second ticket."""
    tickets = FakeTicketing()
    tickets.faults.push(Fault.LOSE_RESPONSE)
    with pytest.raises(ProviderTimeout):
        tickets.create_ticket("Printer on fire", "3rd floor")
    second = tickets.create_ticket("Printer on fire", "3rd floor")
    assert second == {"ticket_id": "T-000002"}
    assert (tickets.effects, tickets.duplicates, tickets.effects_for("Printer on fire")) == (
        2,
        1,
        2,
    )


def test_ticketing_late_answer_lands_after_the_retry_as_a_duplicate(clock: FakeClock) -> None:
    """A late request with no key is not deduplicated: it lands after the retry."""
    tickets = FakeTicketing(clock=clock)
    tickets.faults.push(Fault.LATE, delay=10)
    with pytest.raises(ProviderTimeout):
        tickets.create_ticket("Printer on fire", "3rd floor")
    tickets.create_ticket("Printer on fire", "3rd floor")
    assert tickets.effects == 1
    clock.advance(10)
    assert (tickets.effects, tickets.duplicates) == (2, 1)


# --------------------------------------------------------------------------- concurrency


def test_threads_and_separate_connections_on_one_file_lose_no_effect(tmp_path: Path) -> None:
    """Concurrent calls through two objects (two connections) on one file are all counted."""
    path = tmp_path / "tickets.db"
    a, b = FakeTicketing(path), FakeTicketing(path)

    def work(provider: FakeTicketing, n: int) -> None:
        for i in range(10):
            provider.create_ticket(f"t-{n}-{i}", "body")

    threads = [threading.Thread(target=work, args=(a if n % 2 else b, n)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (a.effects, b.effects, a.duplicates) == (60, 60, 0)
    a.close()
    b.close()


def test_in_memory_provider_refuses_to_cross_processes() -> None:
    """Pickling an in-memory fake fails loudly instead of silently forking its state."""
    with pytest.raises(TypeError, match="give it a path"):
        pickle.dumps(FakeCRM())


def _close_case(crm: FakeCRM, resolution: str) -> dict[str, object]:
    return crm.close_case("case-1", resolution, idempotency_key="k1")


def test_counts_survive_a_process_killed_right_after_applying(tmp_path: Path) -> None:
    """A child killed by CRASH after the close leaves count 1; a fresh process's resend replays."""
    clock = FakeClock(path=tmp_path / "clock.db")
    crm = FakeCRM(tmp_path / "crm.db", clock=clock)
    crm.faults.push(Fault.CRASH)

    died = run_in_child(_close_case, crm, "refunded")

    assert (died.exitcode, died.crashed, died.value) == (CRASH_EXIT_CODE, True, None)
    assert crm.effects == 1
    assert crm.get_case("case-1")["closed_by"] == "k1"

    resumed = run_in_child(_close_case, crm, "refunded")

    assert resumed.ok
    assert resumed.value["version"] == 1
    assert (crm.effects, crm.duplicates, crm.stats().replays) == (1, 0, 1)
    crm.close()
    clock.close()


def _advance(clock: FakeClock, seconds: float) -> str:
    return clock.advance(seconds).isoformat()


def test_file_clock_is_shared_across_processes(tmp_path: Path) -> None:
    """A child advancing a file-backed FakeClock moves the parent's time too."""
    clock = FakeClock(path=tmp_path / "clock.db")
    start = clock.now()
    result = run_in_child(_advance, clock, 90)
    assert result.ok
    assert clock.now() == start + timedelta(seconds=90)
    assert result.value == clock.now().isoformat()
    clock.close()


def _create_many(tickets: FakeTicketing, prefix: str, n: int) -> int:
    for i in range(n):
        tickets.create_ticket(f"{prefix}-{i}", "body")
    return n


def test_two_processes_writing_at_once_lose_no_effect(tmp_path: Path) -> None:
    """Two child processes creating tickets concurrently on one file are all counted."""
    tickets = FakeTicketing(tmp_path / "tickets.db")
    results: list[ChildExit] = []
    threads = [
        threading.Thread(
            target=lambda p=prefix: results.append(run_in_child(_create_many, tickets, p, 25))
        )
        for prefix in ("a", "b")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [(r.ok, r.value) for r in results] == [(True, 25), (True, 25)]
    assert (tickets.effects, tickets.duplicates) == (50, 0)
    tickets.close()
