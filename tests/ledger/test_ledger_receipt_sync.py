"""``receipt_synchronous`` relaxes receipts and thread bindings, nothing else, on both backends.

The default is ``"NORMAL"`` where the receipt's commit is write-ahead logged
(SQLite in WAL mode, PostgreSQL always); ``ledger.base``, "Durability of
receipts", says why a receipt lost with the server is never a duplicate, and
tests/kills/test_receipt_loss.py kills a real process in that window.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from langgraph_effects.core.model import Decision, Evidence, OperationStatus, Resolution
from langgraph_effects.ledger import _programs as ledger_programs
from langgraph_effects.ledger.base import Confirmation
from langgraph_effects.ledger.postgres import PostgresLedger
from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.contract import OWNER, make_draft

T = "tenant-a"


def _traced(path: Path, **kw: object) -> tuple[sqlite3.Connection, SQLiteLedger, list[str]]:
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    ledger = SQLiteLedger(conn, **kw)  # type: ignore[arg-type]
    ledger.setup()
    seen: list[str] = []
    conn.set_trace_callback(lambda sql: seen.append(" ".join(sql.split())))
    return conn, ledger, seen


def _pragmas(seen: list[str]) -> list[str]:
    return [s for s in seen if s.startswith("PRAGMA synchronous")]


def test_normal_receipts_relax_only_the_receipt_commit(sqlite_path: Path) -> None:
    """Under NORMAL receipts only confirm/confirm_many commit NORMAL, then FULL again."""
    conn, ledger, seen = _traced(sqlite_path, receipt_synchronous="NORMAL")
    ops = [ledger.prepare(make_draft(f"op-{i}"), owner=OWNER).operation for i in (1, 2)]
    assert _pragmas(seen) == []  # the write-ahead record keeps FULL
    ledger.confirm(T, "op-1", token=ops[0].fencing_token, result={"ok": 1})
    assert _pragmas(seen) == ["PRAGMA synchronous=NORMAL", "PRAGMA synchronous=FULL"]
    relaxed = seen[seen.index("PRAGMA synchronous=NORMAL") : seen.index("PRAGMA synchronous=FULL")]
    assert relaxed[1] == "BEGIN IMMEDIATE"
    assert relaxed[-1] == "COMMIT"
    ledger.confirm_many([Confirmation(tenant_id=T, operation_id="op-2", token=1)])
    assert len(_pragmas(seen)) == 4
    conn.set_trace_callback(None)
    assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    conn.close()
    with SQLiteLedger.from_conn_string(str(sqlite_path)) as reopened:
        statuses = [op.status for op in reopened.list(tenant_id=T)]
    assert statuses == [OperationStatus.CONFIRMED] * 2


def test_wal_receipts_are_normal_by_default(sqlite_path: Path) -> None:
    """A file in WAL mode: without the option receipts commit NORMAL, the rest FULL."""
    conn, ledger, seen = _traced(sqlite_path)
    op = ledger.prepare(make_draft("op-1"), owner=OWNER).operation
    assert _pragmas(seen) == []
    ledger.confirm(T, "op-1", token=op.fencing_token)
    assert _pragmas(seen) == ["PRAGMA synchronous=NORMAL", "PRAGMA synchronous=FULL"]
    conn.close()


def test_full_receipts_wait_for_their_own_fsync(sqlite_path: Path) -> None:
    """``receipt_synchronous="FULL"``: a receipt commits FULL like every other write."""
    conn, ledger, seen = _traced(sqlite_path, receipt_synchronous="FULL")
    op = ledger.prepare(make_draft("op-1"), owner=OWNER).operation
    ledger.confirm(T, "op-1", token=op.fencing_token)
    ledger.confirm_many([])
    assert _pragmas(seen) == []
    conn.close()


def test_receipts_outside_wal_keep_the_ledgers_durability() -> None:
    """Outside WAL mode (":memory:") NORMAL is not the default: receipts keep ``synchronous``."""
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    ledger = SQLiteLedger(conn)
    ledger.setup()
    seen: list[str] = []
    conn.set_trace_callback(lambda sql: seen.append(" ".join(sql.split())))
    op = ledger.prepare(make_draft("op-1"), owner=OWNER).operation
    ledger.confirm(T, "op-1", token=op.fencing_token)
    assert _pragmas(seen) == []
    conn.close()


def test_receipt_synchronous_must_be_full_or_normal(sqlite_path: Path) -> None:
    """An unknown receipt durability is refused when the ledger is built."""
    conn = sqlite3.connect(sqlite_path, check_same_thread=False, isolation_level=None)
    with pytest.raises(ValueError, match="receipt_synchronous"):
        SQLiteLedger(conn, receipt_synchronous="OFF")  # type: ignore[arg-type]
    conn.close()


def _synchronous_commit(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SHOW synchronous_commit").fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize("receipt_synchronous", [None, "NORMAL", "FULL"])
def test_postgres_relaxes_only_the_receipts_transaction(
    pg_url: str, receipt_synchronous: str | None
) -> None:
    """PostgreSQL: a receipt's transaction commits with ``synchronous_commit = off`` (the
    default, and ``"NORMAL"``); ``prepare``'s keeps the server's; ``"FULL"`` relaxes nothing.

    The ledger's writes run inside a transaction this test holds open (a plain
    connection already in a transaction: the ledger's block is a savepoint), so
    the setting its statement made for its transaction can be read back.
    """
    relaxed = "on" if receipt_synchronous == "FULL" else "off"
    with psycopg.connect(pg_url) as conn:
        kw = {} if receipt_synchronous is None else {"receipt_synchronous": receipt_synchronous}
        ledger = PostgresLedger(conn, **kw)  # type: ignore[arg-type]
        ledger.setup()
        conn.commit()
        conn.execute("SELECT 1")
        ops = [ledger.prepare(make_draft(f"op-{i}"), owner=OWNER).operation for i in (1, 2)]
        assert _synchronous_commit(conn) == "on"
        conn.commit()
        conn.execute("SELECT 1")  # an open transaction, as a user's would be
        ledger.confirm(T, "op-1", token=ops[0].fencing_token, result={"ok": 1})
        assert _synchronous_commit(conn) == relaxed
        conn.commit()
        assert _synchronous_commit(conn) == "on"  # local to the receipt's transaction
        conn.commit()
        conn.execute("SELECT 1")
        done = ledger.confirm_many([Confirmation(tenant_id=T, operation_id="op-2", token=1)])
        assert [getattr(op, "status", op) for op in done] == [OperationStatus.CONFIRMED]
        assert _synchronous_commit(conn) == relaxed
        conn.commit()
    with PostgresLedger.from_conn_string(pg_url) as reopened:
        statuses = [op.status for op in reopened.list(tenant_id=T)]
    assert statuses == [OperationStatus.CONFIRMED] * 2


def test_async_postgres_relaxes_the_receipts_transaction_by_default(pg_url: str) -> None:
    """The async twin runs receipts with the same relaxed statement."""
    from langgraph_effects.ledger.postgres import AsyncPostgresLedger

    async def scenario() -> tuple[str, str]:
        async with await psycopg.AsyncConnection.connect(pg_url) as conn:
            ledger = AsyncPostgresLedger(conn)
            await ledger.setup()
            await conn.commit()
            await conn.execute("SELECT 1")
            op = (await ledger.prepare(make_draft("op-1"), owner=OWNER)).operation
            after_prepare = await (await conn.execute("SHOW synchronous_commit")).fetchone()
            await conn.commit()
            await conn.execute("SELECT 1")
            await ledger.confirm(T, "op-1", token=op.fencing_token)
            after_confirm = await (await conn.execute("SHOW synchronous_commit")).fetchone()
            await conn.commit()
            assert after_prepare is not None
            assert after_confirm is not None
            return str(after_prepare[0]), str(after_confirm[0])

    assert asyncio.run(scenario()) == ("on", "off")


def test_postgres_receipt_synchronous_must_be_full_or_normal(pg_url: str) -> None:
    """The same option, refused the same way, on PostgreSQL."""
    with psycopg.connect(pg_url) as conn, pytest.raises(ValueError, match="receipt_synchronous"):
        PostgresLedger(conn, receipt_synchronous="OFF")  # type: ignore[arg-type]


def test_a_threads_binding_commits_relaxed_and_its_prepare_full(sqlite_path: Path) -> None:
    """The binding is relaxed like a receipt (``ledger.base``): the write-ahead record that
    uses it follows on the same log with FULL, and flushes it before any provider call."""
    conn, ledger, seen = _traced(sqlite_path)
    assert ledger.bind_thread("thread-1", T) == T
    assert _pragmas(seen) == ["PRAGMA synchronous=NORMAL", "PRAGMA synchronous=FULL"]
    ledger.prepare(make_draft("op-1"), owner=OWNER)
    assert len(_pragmas(seen)) == 2  # the prepare commits FULL
    assert ledger.bind_thread("thread-1", "tenant-b") == T  # bound for good
    conn.close()
    with SQLiteLedger.from_conn_string(str(sqlite_path)) as reopened:
        assert reopened.bind_thread("thread-1", "tenant-b") == T


def test_postgres_relaxes_a_threads_binding(pg_url: str) -> None:
    """PostgreSQL: the binding's transaction commits with ``synchronous_commit = off``."""
    with psycopg.connect(pg_url) as conn:
        ledger = PostgresLedger(conn)
        ledger.setup()
        conn.commit()
        conn.execute("SELECT 1")
        assert ledger.bind_thread("thread-1", T) == T
        assert _synchronous_commit(conn) == "off"
        conn.commit()
        assert _synchronous_commit(conn) == "on"
    with PostgresLedger.from_conn_string(pg_url) as reopened:
        assert reopened.bind_thread("thread-1", "tenant-b") == T


def _with_setting(pg_url: str, setting: str) -> str:
    """``pg_url`` whose sessions set ``synchronous_commit`` (as a role's or a database's
    setting would), beside its own options (the test's schema): the shared server's
    config is never touched."""
    options = conninfo_to_dict(pg_url).get("options") or ""
    return make_conninfo(pg_url, options=f"{options} -c synchronous_commit={setting}".strip())


def _session(pg_url: str, setting: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(_with_setting(pg_url, setting))
    assert _synchronous_commit(conn) == setting
    conn.commit()
    return conn


@pytest.mark.parametrize(
    ("session", "floor", "expected"),
    [
        ("off", None, "on"),
        ("local", None, "on"),
        ("off", "ON", "on"),
        ("remote_apply", None, "remote_apply"),  # stricter: kept
        ("remote_write", None, "remote_write"),
        ("off", "SERVER", "off"),  # the explicit opt-out: the session's, however weak
        ("local", "SERVER", "local"),
    ],
)
def test_postgres_write_ahead_commits_at_least_synchronous_commit_on(
    pg_url: str, session: str, floor: str | None, expected: str
) -> None:
    """``prepare`` (one draft, a batch, claimed at once or not) and ``claim`` commit with at
    least ``synchronous_commit = on`` whatever the session's setting (``off`` loses an
    acknowledged record to a server crash, ``local`` to a failover; tests/kills/
    test_failover.py); a stricter one stays. Read back inside the transaction the ledger's
    statement ran in (held open by the test, as in the receipt tests above); the receipt
    keeps its own relaxed commit."""
    with _session(pg_url, session) as conn:
        kw = {} if floor is None else {"prepare_synchronous": floor}
        ledger = PostgresLedger(conn, **kw)  # type: ignore[arg-type]
        ledger.setup()
        conn.commit()
        seen: list[str] = []
        writes = [
            lambda: ledger.prepare(make_draft("op-1"), owner=OWNER),
            lambda: ledger.prepare(make_draft("op-2")),
            lambda: ledger.claim(T, "op-2", owner=OWNER),
            lambda: ledger.prepare_many([make_draft("op-3"), make_draft("op-4")], owner=OWNER),
        ]
        for write in writes:
            conn.execute("SELECT 1")
            write()
            seen.append(_synchronous_commit(conn))
            conn.commit()
            assert _synchronous_commit(conn) == session  # local to the write's transaction
        assert seen == [expected] * len(writes)
        conn.execute("SELECT 1")
        ledger.prepare(make_draft("op-1"), owner=OWNER)  # a replay writes nothing
        assert _synchronous_commit(conn) == session
        conn.commit()
        conn.execute("SELECT 1")
        ledger.confirm(T, "op-1", token=1)
        assert _synchronous_commit(conn) == "off"  # the receipt is relaxed, as before
        conn.commit()


def test_postgres_write_ahead_floor_on_the_ledgers_own_pool(pg_url: str) -> None:
    """The same statements on the ledger's own autocommit, pipelined connections (where
    the setting cannot be read back): a session ``off`` prepares and claims as usual."""
    with PostgresLedger.from_conn_string(_with_setting(pg_url, "off")) as ledger:
        ledger.setup()
        ledger.prepare(make_draft("op-1"), owner=OWNER)
        ledger.prepare(make_draft("op-2"))
        ledger.claim(T, "op-2", owner=OWNER)
        ledger.prepare_many([make_draft("op-3"), make_draft("op-4")], owner=OWNER)
        statuses = [op.status for op in ledger.list(tenant_id=T)]
    assert statuses == [OperationStatus.DISPATCHING] * 4


def _decisions(ledger: Any) -> dict[str, Callable[[], Any]]:
    """One call of each decision (``ledger.DURABLE``), by the statement it writes with, in
    an order each can follow the one before (a sync ledger's, or an async one's coroutines)."""
    digest = make_draft("op-1").payload_digest
    return {
        ledger_programs.PREPARE: lambda: ledger.prepare(make_draft("op-1")),
        ledger_programs.APPROVE: lambda: ledger.approve(
            T, "op-1", payload_digest=digest, by="alice"
        ),
        ledger_programs.CLAIM: lambda: ledger.claim(T, "op-1", owner=OWNER),
        ledger_programs.RELEASE: lambda: ledger.release(T, "op-1", token=1, reason="not sent"),
        # The rejection a person gives before dispatch: lost, the next run would send.
        ledger_programs.REJECT: lambda: ledger.reject(T, "op-1", token=None, reason="refused"),
        ledger_programs.MARK_UNKNOWN: lambda: ledger.mark_unknown(
            T, "op-2", token=1, reason="no receipt"
        ),
        ledger_programs.RECORD_EVIDENCE: lambda: ledger.record_evidence(
            T, "op-2", Evidence.inconclusive("nothing seen yet")
        ),
        ledger_programs.RESOLVE: lambda: ledger.resolve(
            T, "op-2", Resolution(decision=Decision.CONFIRM, by="alice", reason="seen")
        ),
    }


@pytest.mark.parametrize(
    ("session", "floor", "expected"),
    [
        ("off", None, "on"),
        ("local", None, "on"),
        ("remote_apply", None, "remote_apply"),  # stricter: kept
        ("off", "SERVER", "off"),  # the opt-out: every decision keeps the session's
        ("local", "SERVER", "local"),
    ],
)
def test_postgres_every_decision_commits_at_least_synchronous_commit_on(
    pg_url: str, session: str, floor: str | None, expected: str
) -> None:
    """Every decision (``ledger.DURABLE``: the write-ahead record, and each write that stops
    or changes a call: approve, reject, release, mark_unknown, resolve, record_evidence)
    commits with at least ``synchronous_commit = on`` under a session ``off`` or ``local``:
    a reject acknowledged before dispatch and lost to a crash or a failover would let the
    next run send the call. Read back inside the transaction the verb ran in (the test
    holds it open: the ledger's block is a savepoint of it); each verb of the set is
    called, so a decision added to it is tested here too."""
    with _session(pg_url, session) as conn:
        kw = {} if floor is None else {"prepare_synchronous": floor}
        ledger = PostgresLedger(conn, **kw)  # type: ignore[arg-type]
        ledger.setup()
        ledger.prepare(make_draft("op-2"), owner=OWNER)  # dispatching, for mark_unknown
        conn.commit()
        decisions = _decisions(ledger)
        assert set(decisions) == ledger_programs.DURABLE
        seen: dict[str, str] = {}
        for name, decide in decisions.items():
            conn.execute("SELECT 1")
            decide()
            seen[name] = _synchronous_commit(conn)
            conn.commit()
            assert _synchronous_commit(conn) == session  # local to the verb's transaction
        assert seen == dict.fromkeys(decisions, expected)
        statuses = {op.operation_id: op.status for op in ledger.list(tenant_id=T)}
        assert statuses == {"op-1": OperationStatus.REJECTED, "op-2": OperationStatus.CONFIRMED}
        conn.commit()


def test_async_postgres_every_decision_commits_at_least_synchronous_commit_on(
    pg_url: str,
) -> None:
    """The async twin: the same decisions under a session ``local``, each raised to ``on``."""
    from langgraph_effects.ledger.postgres import AsyncPostgresLedger

    async def scenario() -> dict[str, str]:
        url = _with_setting(pg_url, "local")
        async with await psycopg.AsyncConnection.connect(url) as conn:
            ledger = AsyncPostgresLedger(conn)
            await ledger.setup()
            await ledger.prepare(make_draft("op-2"), owner=OWNER)
            await conn.commit()
            seen: dict[str, str] = {}
            for name, decide in _decisions(ledger).items():
                await conn.execute("SELECT 1")
                await decide()
                row = await (await conn.execute("SHOW synchronous_commit")).fetchone()
                assert row is not None
                seen[name] = str(row[0])
                await conn.commit()
            return seen

    assert asyncio.run(scenario()) == dict.fromkeys(ledger_programs.DURABLE, "on")


@pytest.mark.parametrize("bad", ["on", "FULL", "off", "", None])
def test_postgres_prepare_synchronous_must_be_on_or_server(pg_url: str, bad: object) -> None:
    """A bad ``prepare_synchronous`` is refused at construction, naming the two values
    (``None`` is the default, ``"ON"``)."""
    with psycopg.connect(pg_url) as conn:
        if bad is None:
            PostgresLedger(conn, prepare_synchronous=None)
            return
        with pytest.raises(ValueError, match=r"prepare_synchronous must be 'ON' or 'SERVER'"):
            PostgresLedger(conn, prepare_synchronous=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("floor", "expected"), [(None, "on"), ("SERVER", "local")])
def test_async_postgres_write_ahead_commits_at_least_synchronous_commit_on(
    pg_url: str, floor: str | None, expected: str
) -> None:
    """The async twin runs the write-ahead record with the same statements: a session
    ``local`` is raised to ``on`` for ``prepare`` and ``claim``, kept under ``"SERVER"``."""
    from langgraph_effects.ledger.postgres import AsyncPostgresLedger

    async def scenario() -> list[str]:
        url = _with_setting(pg_url, "local")
        async with await psycopg.AsyncConnection.connect(url) as conn:
            kw = {} if floor is None else {"prepare_synchronous": floor}
            ledger = AsyncPostgresLedger(conn, **kw)  # type: ignore[arg-type]
            await ledger.setup()
            await conn.commit()
            seen: list[str] = []
            for write in (
                lambda: ledger.prepare(make_draft("op-1"), owner=OWNER),
                lambda: ledger.prepare(make_draft("op-2")),
                lambda: ledger.claim(T, "op-2", owner=OWNER),
            ):
                await conn.execute("SELECT 1")
                await write()
                row = await (await conn.execute("SHOW synchronous_commit")).fetchone()
                assert row is not None
                seen.append(str(row[0]))
                await conn.commit()
            return seen

    assert asyncio.run(scenario()) == [expected] * 3


def test_async_postgres_prepare_synchronous_is_checked(pg_url: str) -> None:
    """The async twin refuses a bad ``prepare_synchronous`` the same way."""
    from langgraph_effects.ledger.postgres import AsyncPostgresLedger

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(pg_url) as conn:
            with pytest.raises(ValueError, match="prepare_synchronous must be 'ON' or 'SERVER'"):
                AsyncPostgresLedger(conn, prepare_synchronous="local")  # type: ignore[arg-type]

    asyncio.run(scenario())
