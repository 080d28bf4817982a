"""Run snapshots: versioned appends, idempotent repeats, declared machines, the e-mail example."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _journal_example import MACHINE

from langgraph_effects.errors import IllegalTransition, InvalidInput, StaleVersion
from langgraph_effects.journal import (
    AsyncRunJournal,
    RunEvent,
    RunJournal,
    RunMachine,
    RunState,
    Transition,
)
from langgraph_effects.testing.faults import scaled
from langgraph_effects.testing.providers import FakeClock
from langgraph_effects.testing.scenario import run_in_forked_child


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def journal(target: str, clock: FakeClock) -> Iterator[RunJournal]:
    with RunJournal.from_conn_string(target, [MACHINE], clock=clock.now) as j:
        j.setup()
        j.setup()
        yield j


def requested(journal: RunJournal, run_id: str = "r1") -> Any:
    journal.start(run_id, MACHINE.name, resource="box@x", attempts=2, lease_for=timedelta(hours=1))
    return journal.append(
        run_id, 1, RunEvent(event_id="request", type="message_requested", evidence_id="req-1")
    )


def test_snapshot_names_the_next_action(journal: RunJournal) -> None:
    """Each append moves the snapshot and its single next action as the machine declares."""
    snap = journal.start("r1", MACHINE.name, resource="box@x", attempts=2)
    assert (snap.state, snap.next_action, snap.version) == ("leased", "request_message", 1)
    snap = requested(journal, "r2")
    assert (snap.state, snap.next_action, snap.evidence_ids) == (
        "requested",
        "poll_inbox",
        ("req-1",),
    )
    snap = journal.append("r2", 2, RunEvent(event_id="p1", type="inbox_polled"))
    assert (snap.state, snap.attempts_left, snap.version) == ("waiting", 1, 3)
    assert journal.get("r2") == snap


def test_the_journal_opens_the_database_any_ledger_url_form_names(
    target: str, clock: FakeClock
) -> None:
    """``from_conn_string`` reads a URL as a ledger URL does (``ledger.connect``):
    ``sqlite:///`` and ``postgresql+psycopg://`` name the database the plain forms name, and
    a run started through one is read through the other; another scheme is refused."""
    if target.startswith("postgresql://"):
        url = target.replace("postgresql://", "postgresql+psycopg://", 1)
    else:
        url = f"sqlite:///{target}"
    with RunJournal.from_conn_string(url, [MACHINE], clock=clock.now) as journal:
        journal.setup()
        started = journal.start("r1", MACHINE.name, resource="box@x", attempts=2)
    with RunJournal.from_conn_string(target, [MACHINE], clock=clock.now) as journal:
        assert journal.get("r1") == started
    with (
        pytest.raises(InvalidInput, match="unsupported ledger URL"),
        RunJournal.from_conn_string("mysql://h/db", [MACHINE]),
    ):
        pass


def test_stale_version_is_refused_and_counted(journal: RunJournal) -> None:
    """An append with an old expected version raises StaleVersion, writes nothing, is counted."""
    requested(journal)
    with pytest.raises(StaleVersion) as info:
        journal.append("r1", 1, RunEvent(event_id="p1", type="inbox_polled"))
    assert (info.value.expected, info.value.current) == (1, 2)
    snap = journal.get("r1")
    assert snap is not None
    assert snap.version == 2
    assert [e.type for e in journal.events("r1")] == ["started", "message_requested"]
    assert journal.stats().stale_version_rejections == 1
    metrics = journal.metrics("r1")
    assert metrics is not None
    assert metrics.stale_version_rejections == 1


def test_repeating_the_same_append_returns_the_same_result(journal: RunJournal) -> None:
    """The same event id appended again returns the first snapshot and consumes nothing twice."""
    requested(journal)
    first = journal.append("r1", 2, RunEvent(event_id="p1", type="inbox_polled"))
    again = journal.append("r1", 2, RunEvent(event_id="p1", type="inbox_polled"))
    assert again == first
    snap = journal.get("r1")
    assert snap is not None
    assert (snap.version, snap.attempts_left) == (3, 1)
    with pytest.raises(InvalidInput, match="other content"):
        journal.append("r1", 3, RunEvent(event_id="p1", type="message_discarded"))


def test_repeating_a_start_with_a_lease_returns_the_existing_run(
    journal: RunJournal, clock: FakeClock
) -> None:
    """A start repeated later with the same arguments (lease_for included) returns the run now."""
    lease = timedelta(minutes=30)
    first = journal.start("r1", MACHINE.name, resource="box@x", attempts=5, lease_for=lease)
    clock.advance(timedelta(seconds=7))
    again = journal.start("r1", MACHINE.name, resource="box@x", attempts=5, lease_for=lease)
    assert again == first
    moved = journal.append(
        "r1", 1, RunEvent(event_id="request", type="message_requested", evidence_id="req-1")
    )
    clock.advance(timedelta(minutes=1))
    restarted = journal.start("r1", MACHINE.name, resource="box@x", attempts=5, lease_for=lease)
    assert restarted == moved
    assert (restarted.version, restarted.lease_expires_at) == (2, first.lease_expires_at)
    assert [e.type for e in journal.events("r1")] == ["started", "message_requested"]


def start_worker(target: str, clock_path: str, request: bool) -> dict[str, Any]:
    """A worker process: start run r1 as the README does, optionally request the message."""
    clock = FakeClock(path=clock_path)
    with RunJournal.from_conn_string(target, [MACHINE], clock=clock.now) as journal:
        snap = journal.start(
            "r1", MACHINE.name, resource="box@x", attempts=5, lease_for=timedelta(minutes=30)
        )
        if request:
            event = RunEvent(event_id="request", type="message_requested", evidence_id="req-1")
            snap = journal.append("r1", snap.version, event)
        return snap.model_dump(mode="json")


def test_a_restarted_worker_starting_again_gets_the_run_as_it_stands(
    target: str, journal: RunJournal, tmp_path: Path
) -> None:
    """After a real process restart the same start returns the run as the first worker left it."""
    clock = FakeClock(path=tmp_path / "clock.db")
    first = run_in_forked_child(start_worker, target, str(tmp_path / "clock.db"), True)
    assert first.error is None, first.error
    clock.advance(timedelta(minutes=5))
    again = run_in_forked_child(start_worker, target, str(tmp_path / "clock.db"), False)
    assert again.error is None, again.error
    assert again.value == first.value
    assert (again.value["version"], again.value["state"]) == (2, "requested")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"attempts": 4}, "attempts=5"),
        ({"resource": "other@x"}, "resource='box@x'"),
        ({"lease_for": timedelta(minutes=31)}, "lease_for=0:30:00"),
        ({"lease_for": None}, "lease_for=0:30:00"),
    ],
)
def test_a_conflicting_start_is_refused_and_changes_nothing(
    journal: RunJournal, clock: FakeClock, change: dict[str, Any], named: str
) -> None:
    """A start of an existing run with other arguments fails naming them; the run is unchanged."""
    args: dict[str, Any] = {"resource": "box@x", "attempts": 5, "lease_for": timedelta(minutes=30)}
    first = journal.start("r1", MACHINE.name, **args)
    clock.advance(timedelta(seconds=1))
    with pytest.raises(InvalidInput, match="already started with") as refused:
        journal.start("r1", MACHINE.name, **{**args, **change})
    assert named in str(refused.value)
    assert journal.get("r1") == first
    assert len(journal.events("r1")) == 1


def test_machine_refuses_undeclared_transitions(journal: RunJournal) -> None:
    """An event the state does not allow, or a poll without attempts left, is refused."""
    requested(journal)
    with pytest.raises(IllegalTransition, match="not allowed"):
        journal.append("r1", 2, RunEvent(event_id="v", type="code_verified"))
    journal.append("r1", 2, RunEvent(event_id="p1", type="inbox_polled"))
    journal.append("r1", 3, RunEvent(event_id="p2", type="inbox_polled"))
    with pytest.raises(IllegalTransition, match="no attempts left"):
        journal.append("r1", 4, RunEvent(event_id="p3", type="inbox_polled"))
    assert journal.next_action("r1") == "expire"
    snap = journal.append("r1", 4, RunEvent(event_id="x", type="expire"))
    assert (snap.state, snap.next_action) == ("expired", None)


def test_expiry_needs_its_observable_condition(journal: RunJournal, clock: FakeClock) -> None:
    """EXPIRED is refused while the lease is alive with attempts left, allowed once it lapses."""
    requested(journal)
    with pytest.raises(IllegalTransition, match="condition not met"):
        journal.append("r1", 2, RunEvent(event_id="x", type="expire"))
    clock.advance(timedelta(hours=2))
    assert journal.next_action("r1") == "expire"
    assert journal.append("r1", 2, RunEvent(event_id="x", type="expire")).state == "expired"


def test_the_same_evidence_is_never_accepted_twice(journal: RunJournal) -> None:
    """An evidence id already accepted cannot be accepted again by another event."""
    journal.start("r1", MACHINE.name, attempts=2)
    journal.append("r1", 1, RunEvent(event_id="a", type="message_requested", evidence_id="m-1"))
    with pytest.raises(IllegalTransition, match="already accepted"):
        journal.append("r1", 2, RunEvent(event_id="b", type="message_received", evidence_id="m-1"))


def test_two_workers_cannot_accept_different_messages_for_one_step(
    target: str, journal: RunJournal, clock: FakeClock
) -> None:
    """Two workers (own connections) waking at the same version: one message accepted, one stale."""
    requested(journal)
    gate = threading.Barrier(2)
    outcomes: dict[str, Any] = {}

    def worker(message_id: str) -> None:
        with RunJournal.from_conn_string(target, [MACHINE], clock=clock.now) as mine:
            snap = mine.get("r1")
            assert snap is not None
            gate.wait()
            try:
                outcomes[message_id] = mine.append(
                    "r1",
                    snap.version,
                    RunEvent(
                        event_id=f"receive:{message_id}",
                        type="message_received",
                        evidence_id=message_id,
                    ),
                )
            except (StaleVersion, IllegalTransition) as exc:
                outcomes[message_id] = exc

    threads = [threading.Thread(target=worker, args=(m,)) for m in ("m-1", "m-2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=scaled(60))
    won = [m for m, v in outcomes.items() if not isinstance(v, Exception)]
    assert len(won) == 1
    assert [type(v) for v in outcomes.values() if isinstance(v, Exception)] == [StaleVersion]
    snap = journal.get("r1")
    assert snap is not None
    assert snap.evidence_ids == ("req-1", won[0])
    assert journal.stats().stale_version_rejections == 1


def test_machine_declaration_is_checked() -> None:
    """A machine naming an unknown state or lacking a next action is refused at declaration."""
    with pytest.raises(InvalidInput, match="unknown"):
        RunMachine(
            "m",
            initial="a",
            states=[RunState(name="a", next_action="go")],
            transitions=[Transition(event="go", sources=("a",), target="b", condition="-")],
        )
    with pytest.raises(InvalidInput, match="next_action"):
        RunMachine("m", initial="a", states=[RunState(name="a")], transitions=[])


def test_event_data_refuses_bodies() -> None:
    """Event data over 4 KiB (a message body) is refused: ids and hashes only."""
    with pytest.raises(ValueError, match="not bodies"):
        RunEvent(event_id="e", type="message_received", data={"body": "x" * 5000})


@pytest.mark.postgres
def test_async_journal_appends_with_the_same_rules(pg_url: str) -> None:
    """The async journal refuses a stale version and replays a repeated append like the sync one."""
    import psycopg

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            journal = AsyncRunJournal(conn, [MACHINE])
            await journal.setup()
            await journal.start("r1", MACHINE.name, attempts=2)
            event = RunEvent(event_id="q", type="message_requested", evidence_id="req-1")
            first = await journal.append("r1", 1, event)
            assert await journal.append("r1", 1, event) == first
            with pytest.raises(StaleVersion):
                await journal.append("r1", 1, RunEvent(event_id="p", type="inbox_polled"))
            assert (await journal.stats()).stale_version_rejections == 1

    asyncio.run(scenario())


@pytest.mark.postgres
def test_async_journal_start_is_idempotent_with_a_lease(pg_url: str) -> None:
    """The async journal returns the existing run for a repeated start and refuses a conflict."""
    import psycopg

    clock = FakeClock()
    lease = timedelta(minutes=30)

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            journal = AsyncRunJournal(conn, [MACHINE], clock=clock.now)
            await journal.setup()
            first = await journal.start("r1", MACHINE.name, attempts=5, lease_for=lease)
            clock.advance(timedelta(seconds=7))
            assert await journal.start("r1", MACHINE.name, attempts=5, lease_for=lease) == first
            with pytest.raises(InvalidInput, match="already started with"):
                await journal.start("r1", MACHINE.name, attempts=4, lease_for=lease)
            assert await journal.get("r1") == first

    asyncio.run(scenario())
