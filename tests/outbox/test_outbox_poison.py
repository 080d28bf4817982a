"""One poison outbox entry never starves the relay (issue 10, finding 8).

The first entry's receipt is lost, and its reconciler misbehaves: it returns
``None``, returns junk, or raises. That entry goes to review (its operation
``unknown``, with inconclusive evidence naming what came back), and the relay
still delivers the entries after it, each exactly once, counted at the fake
mail provider. On SQLite and PostgreSQL, with the sync and the async relay.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects.core.model import EvidenceKind, Operation, OperationStatus
from langgraph_effects.outbox import Delivery, Outbox, OutboxRelay, OutboxStatus, Receipt
from langgraph_effects.testing.providers import FakeMail, Fault

S = OperationStatus


def _none(op: Operation) -> Any:
    return None


def _junk(op: Operation) -> Any:
    return "yes, it was sent"


def _raises(op: Operation) -> Any:
    raise KeyError("the lookup index is missing")


RECONCILERS: dict[str, Callable[[Operation], Any]] = {
    "returns-none": _none,
    "returns-junk": _junk,
    "raises": _raises,
}


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The application's database (a SQLite file or a PostgreSQL schema) with the outbox."""
    where = (
        request.getfixturevalue("pg_url")
        if request.param == "postgres"
        else str(tmp_path / "app.db")
    )
    conn = _connect(where)
    try:
        Outbox().setup(conn)
        conn.commit()
    finally:
        conn.close()
    return where


@pytest.fixture
def mail(tmp_path: Path) -> Iterator[FakeMail]:
    with FakeMail(tmp_path / "mail.db") as provider:
        yield provider


def _connect(where: str) -> Any:
    if where.startswith("postgresql://"):
        import psycopg

        return psycopg.connect(where)
    return sqlite3.connect(where, timeout=30)


def _enqueue(where: str, keys: list[str]) -> None:
    conn = _connect(where)
    try:
        for key in keys:
            Outbox().enqueue(
                conn,
                topic="case.closed",
                key=key,
                payload={"to": f"{key}@example.com", "subject": key, "body": "closed"},
            )
        conn.commit()
    finally:
        conn.close()


def _deliver(mail: FakeMail) -> Callable[[Delivery], Receipt]:
    def deliver(delivery: Delivery) -> Receipt:
        p = delivery.entry.payload
        answer = mail.send(
            p["to"], p["subject"], p["body"], idempotency_key=delivery.idempotency_key
        )
        return Receipt(message_id=answer["message_id"])

    return deliver


def _ledger(where: str, tmp_path: Path, *, is_async: bool) -> Any:
    if where.startswith("postgresql://"):
        from langgraph_effects.ledger.postgres import AsyncPostgresLedger, PostgresLedger

        return (AsyncPostgresLedger if is_async else PostgresLedger).from_conn_string(where)
    from langgraph_effects.ledger.sqlite import AsyncSQLiteLedger, SQLiteLedger

    path = str(tmp_path / "ledger.db")
    return (AsyncSQLiteLedger if is_async else SQLiteLedger).from_conn_string(path)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("misbehaviour", sorted(RECONCILERS))
def test_poison_entry_goes_to_review_and_the_others_are_delivered(
    target: str, mail: FakeMail, tmp_path: Path, mode: str, misbehaviour: str
) -> None:
    """The first entry's lost receipt meets a misbehaving reconciler: that entry is under
    review with the evidence, the two after it are delivered, each message sent once."""
    _enqueue(target, ["poison", "case-2", "case-3"])
    mail.faults.push(Fault.LOSE_RESPONSE)  # the first delivery (lowest seq) loses its receipt
    reconcile = RECONCILERS[misbehaviour]

    if mode == "sync":
        with _ledger(target, tmp_path, is_async=False) as ledger:
            ledger.setup()
            with OutboxRelay.from_conn_string(
                target, ledger=ledger, deliver=_deliver(mail), reconcile=reconcile
            ) as relay:
                relay.run_until_idle()
            ops = _operations(target, ledger.get, ledger.events)
    else:

        async def scenario() -> tuple[list[Any], ...]:
            async with _ledger(target, tmp_path, is_async=True) as led:
                await led.setup()
                with OutboxRelay.from_conn_string(
                    target, ledger=led, deliver=_deliver(mail), reconcile=reconcile
                ) as relay:
                    await relay.arun_until_idle()
                found = []
                for entry in _entries(target):
                    op = await led.get(entry.tenant_id, entry.operation_id)
                    found.append((entry, op, await led.events(entry.tenant_id, entry.operation_id)))
                return tuple(found)

        ops = list(asyncio.run(scenario()))

    by_key = {entry.key: (entry, op, events) for entry, op, events in ops}
    poison, op, events = by_key["poison"]
    assert poison.status is OutboxStatus.REVIEW
    assert op.status is S.UNKNOWN
    evidence = [e.evidence for e in events if e.evidence is not None]
    assert evidence
    assert evidence[-1].kind is EvidenceKind.INCONCLUSIVE
    assert "reconciler" in evidence[-1].summary
    for key in ("case-2", "case-3"):
        entry, op, _ = by_key[key]
        assert entry.status is OutboxStatus.SENT, (key, entry)
        assert op.status is S.CONFIRMED
    assert mail.effects == 3  # each message once, the poison one included (it was applied)
    assert mail.duplicates == 0


def _entries(where: str) -> list[Any]:
    conn = _connect(where)
    try:
        return Outbox.list(conn)
    finally:
        conn.close()


def _operations(where: str, get: Any, events: Any) -> list[Any]:
    return [
        (e, get(e.tenant_id, e.operation_id), events(e.tenant_id, e.operation_id))
        for e in _entries(where)
    ]
