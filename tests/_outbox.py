"""The outbox tests' application, fixtures and relay children: shared by the outbox's room
(tests/outbox/) and the kill room (tests/kills/test_outbox_kills.py).

Each backend runs with its real ledger: a SQLite app database with a ``SQLiteLedger`` on a
file beside it, a PostgreSQL app schema with a ``PostgresLedger`` in the same schema. A test
module that uses the fixtures imports them (``from _outbox import app, clock, ledger, mail``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.core.model import Evidence, Operation, ProviderContract, utcnow
from langgraph_effects.ledger.base import AsyncLedger, Ledger
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.outbox import (
    Delivery,
    Outbox,
    OutboxEntry,
    OutboxRelay,
    Receipt,
    RelayReport,
)
from langgraph_effects.testing.faults import scaled
from langgraph_effects.testing.providers import FakeClock, FakeMail

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
KEY_WINDOW = ProviderContract(idempotency_window=timedelta(hours=24))


class App:
    """The application's own database (a ``cases`` table plus the outbox) and its ledger.

    Plain attributes only: it crosses into spawned relay processes.
    """

    def __init__(self, backend: str, target: str, ledger_target: str) -> None:
        self.backend = backend
        self.target = target  # a SQLite path or a PostgreSQL URL
        self.ledger_target = ledger_target  # a SQLite ledger file, or the same URL

    def connect(self) -> Any:
        if self.backend == "sqlite":
            return sqlite3.connect(self.target, timeout=30)
        import psycopg

        return psycopg.connect(self.target)

    def relay(self, **kwargs: Any) -> AbstractContextManager[OutboxRelay]:
        return OutboxRelay.from_conn_string(self.target, **kwargs)

    def ledger(self, clock: Callable[[], datetime] = utcnow) -> AbstractContextManager[Ledger]:
        """Open this backend's real ledger (its own connection or pool)."""
        if self.backend == "sqlite":
            from langgraph_effects.ledger.sqlite import SQLiteLedger

            return SQLiteLedger.from_conn_string(self.ledger_target, clock=clock)
        from langgraph_effects.ledger.postgres import PostgresLedger

        return PostgresLedger.from_conn_string(self.ledger_target, clock=clock)

    def aledger(
        self, clock: Callable[[], datetime] = utcnow
    ) -> AbstractAsyncContextManager[AsyncLedger]:
        """Open this backend's real async ledger."""
        if self.backend == "sqlite":
            from langgraph_effects.ledger.sqlite import AsyncSQLiteLedger

            return AsyncSQLiteLedger.from_conn_string(self.ledger_target, clock=clock)
        from langgraph_effects.ledger.postgres import AsyncPostgresLedger

        return AsyncPostgresLedger.from_conn_string(self.ledger_target, clock=clock)


@pytest.fixture(params=BACKENDS)
def app(request: pytest.FixtureRequest, tmp_path: Path) -> App:
    if request.param == "sqlite":
        application = App("sqlite", str(tmp_path / "app.db"), str(tmp_path / "ledger.db"))
    else:
        url = request.getfixturevalue("pg_url")
        application = App("postgres", url, url)
    conn = application.connect()
    try:
        Outbox().setup(conn)
        conn.execute("CREATE TABLE cases (id TEXT PRIMARY KEY, status TEXT NOT NULL)")
        conn.commit()
    finally:
        conn.close()
    with application.ledger() as led:
        led.setup()
    return application


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def mail(tmp_path: Path, clock: FakeClock) -> Iterator[FakeMail]:
    with FakeMail(tmp_path / "mail.db", clock=clock) as provider:
        yield provider


@pytest.fixture
def ledger(app: App, clock: FakeClock) -> Iterator[Ledger]:
    """The backend's real ledger, on the test's clock (key windows compare ledger and relay)."""
    with app.ledger(clock.now) as led:
        yield led


@pytest.fixture
def memory_ledger(clock: FakeClock) -> InMemoryLedger:
    led = InMemoryLedger(clock=clock.now)
    led.setup()
    return led


def sender(mail: FakeMail) -> Callable[[Delivery], Receipt]:
    def deliver(delivery: Delivery) -> Receipt:
        p = delivery.entry.payload
        answer = mail.send(
            p["to"], p["subject"], p["body"], idempotency_key=delivery.idempotency_key
        )
        return Receipt(message_id=answer["message_id"])

    return deliver


def sent_search(mail: FakeMail) -> Callable[[Operation], Evidence]:
    """Reconciler: look the idempotency key up in the (eventually consistent) Sent folder."""

    def reconcile(op: Operation) -> Evidence:
        found = mail.search(idempotency_key=op.idempotency_key)
        if found:
            return Evidence.confirmed(
                "found in Sent by idempotency key",
                provider_result_id=found[0]["message_id"],
                result={"message_id": found[0]["message_id"], "state": found[0]["status"]},
            )
        return Evidence.inconclusive("not (yet) in Sent: the search lags")

    return reconcile


def business(app: App, case_id: str, *, commit: bool = True, **kw: Any) -> str:
    """Close ``case_id`` and enqueue its notification in one transaction; commit or roll back."""
    outbox = Outbox()
    conn = app.connect()
    mark = "?" if app.backend == "sqlite" else "%s"
    try:
        conn.execute(f"INSERT INTO cases (id, status) VALUES ({mark}, 'closed')", (case_id,))
        payload = kw.pop(
            "payload", {"to": f"owner-{case_id}@example.com", "subject": case_id, "body": "closed"}
        )
        entry_id = outbox.enqueue(conn, topic="case.closed", key=case_id, payload=payload, **kw)
        if commit:
            conn.commit()
        else:
            conn.rollback()
        return entry_id
    finally:
        conn.close()


def entries(app: App) -> list[OutboxEntry]:
    conn = app.connect()
    try:
        return Outbox.list(conn)
    finally:
        conn.close()


def operations(app: App, ledger: Ledger) -> list[Operation]:
    """The delivery operation of every entry, in entry order."""
    ops = [ledger.get(e.tenant_id, e.operation_id) for e in entries(app)]
    assert all(op is not None for op in ops)
    return [op for op in ops if op is not None]


# --------------------------------------------------------------------------- relay children

# Module level: they run in spawned processes (the module is imported there).


def race_child(app: App, mail: FakeMail, start: Any) -> RelayReport:
    """One of several relay processes: its own connection, ledger pool and relay."""
    with app.ledger() as ledger, app.relay(ledger=ledger, deliver=sender(mail), batch_size=2) as r:
        start.wait(scaled(30))
        return r.run_until_idle()


def crash_child(app: App, mail: FakeMail, clock: FakeClock, scenario: str) -> RelayReport:
    """A relay process on the shared file clock, configured for ``scenario``."""
    options: dict[str, Any] = {
        "reconcile": {"reconcile": sent_search(mail)},
        "review": {},
        "key": {"contract": KEY_WINDOW},
    }[scenario]
    with (
        app.ledger(clock.now) as ledger,
        app.relay(ledger=ledger, deliver=sender(mail), clock=clock.now, **options) as relay,
    ):
        return relay.run_until_idle()
