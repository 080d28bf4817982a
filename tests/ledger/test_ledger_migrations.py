"""Schema v2 and what rides on it: upgrades from v1, key retention, status age, reports.

v1 ledgers are built with the first migration only (as an older release left
them), then ``setup()`` upgrades them in place. The runner records the key
retention its effect's contract promises and reports replays; the ledgers
report stale-token refusals; ``_owners.current_owner`` caches its host per pid.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest
from _graphs import Env, build_graph, call, tool_messages

from langgraph_effects import EffectContext, ProviderContract, _owners, effect
from langgraph_effects._owners import current_owner
from langgraph_effects.core.model import (
    Decision,
    Operation,
    OperationStatus,
    Resolution,
    key_retention_seconds,
)
from langgraph_effects.core.plan import key_expires_at, recorded_contract, retry_allowed
from langgraph_effects.errors import StaleFencingToken
from langgraph_effects.ledger.base import Confirmation
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.contract import OWNER, ManualClock, make_draft
from langgraph_effects.testing.providers import FakeCRM

S = OperationStatus
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)

# -- upgrade from v1 -----------------------------------------------------------------

# A v1 row: unknown since T0 + 2 s, inconclusive evidence at T0 + 3 s moved updated_at.
V1_ROW: dict[str, Any] = {
    "tenant_id": "acme",
    "operation_id": "op-v1",
    "workflow_id": "thread-1",
    "action": "crm.close_case",
    "action_version": 1,
    "target": "case-1",
    "payload_digest": make_draft("op-v1").payload_digest,
    "payload": '{"email": "ada@example.com"}',
    "payload_stored": True,
    "status": "unknown",
    "idempotency_key": "lge-op-v1",
    "attempts": 1,
    "fencing_token": 2,
    "record_version": 4,
    "evidence_checked_at": T0 + 3 * SECOND,
    "created_at": T0,
    "updated_at": T0 + 3 * SECOND,
    "first_dispatched_at": T0 + SECOND,
    "last_dispatched_at": T0 + SECOND,
}
V1_EVENTS = [  # seq, kind, from, to, at
    (1, "prepare", None, "prepared", T0),
    (2, "claim", "prepared", "dispatching", T0 + SECOND),
    (3, "mark_unknown", "dispatching", "unknown", T0 + 2 * SECOND),
    (4, "evidence", "unknown", "unknown", T0 + 3 * SECOND),
]
# A v1 row with no events (bulk-written by another tool): it falls back to updated_at.
V1_BARE = {
    **V1_ROW,
    "operation_id": "op-bare",
    "status": "prepared",
    "attempts": 0,
    "fencing_token": 0,
    "record_version": 1,
    "evidence_checked_at": None,
    "updated_at": T0 + 5 * SECOND,
    "first_dispatched_at": None,
    "last_dispatched_at": None,
}


def _write_v1(
    execute: Callable[[str, dict[str, Any]], Any],
    migrations: tuple[tuple[str, ...], ...],
    version_table: str,
    placeholder: Callable[[str], str],
    dump_ts: Callable[[Any], Any],
) -> None:
    """Create the v1 schema (first migration only) and write V1_ROW, its events and V1_BARE."""
    execute(version_table, {})
    for sql in migrations[0]:
        execute(sql, {})
    execute("INSERT INTO lge_schema_version (version) VALUES (1)", {})
    for row in (V1_ROW, V1_BARE):
        values = {k: dump_ts(v) if isinstance(v, datetime) else v for k, v in row.items()}
        names = ", ".join(values)
        marks = ", ".join(placeholder(k) for k in values)
        execute(f"INSERT INTO lge_operations ({names}) VALUES ({marks})", values)
    for seq, kind, source, to, at in V1_EVENTS:
        execute(
            "INSERT INTO lge_events (tenant_id, operation_id, seq, kind, from_status, to_status,"
            " actor, at) VALUES ("
            + ", ".join(placeholder(k) for k in ("t", "o", "s", "k", "f", "to", "a", "at"))
            + ")",
            {
                "t": "acme",
                "o": "op-v1",
                "s": seq,
                "k": kind,
                "f": source,
                "to": to,
                "a": "v1",
                "at": dump_ts(at),
            },
        )


def _check_upgraded(ledger: Any, clock: ManualClock) -> None:
    op = ledger.get("acme", "op-v1")
    assert op is not None
    assert op.status_changed_at == T0 + 2 * SECOND  # the last status change, not the evidence
    assert op.updated_at == T0 + 3 * SECOND
    assert (op.idempotency_key, op.key_retention_seconds, recorded_contract(op)) == (
        "lge-op-v1",
        None,
        None,
    )
    bare = ledger.get("acme", "op-bare")
    assert bare is not None
    assert bare.status_changed_at == bare.updated_at == T0 + 5 * SECOND
    assert ledger.stats().oldest_unknown_at == T0 + 2 * SECOND
    assert [o.operation_id for o in ledger.list(updated_before=T0 + 3 * SECOND)] == ["op-v1"]
    ledger.setup()  # idempotent at the latest version
    # v3 bound the threads that already had operations to their tenant.
    assert ledger.bind_thread(V1_ROW["workflow_id"], "intruder") == "acme"
    retried = ledger.resolve("acme", "op-v1", Resolution(decision=Decision.RETRY, by="ana"))
    assert (retried.status, retried.status_changed_at) == (S.PREPARED, clock.now)
    new = ledger.prepare(make_draft("op-v2", key_retention_seconds=60.0)).operation
    assert (new.key_retention_seconds, new.status_changed_at) == (60.0, clock.now)


def test_a_v1_sqlite_ledger_upgrades_with_setup(sqlite_path: Path) -> None:
    """setup() migrates a v1 SQLite ledger: rows keep their data, gain the new columns
    (status_changed_at from the event log, else updated_at) and keep working."""
    from langgraph_effects.ledger.sqlite._migrations import MIGRATIONS
    from langgraph_effects.ledger.sqlite._sql import DIALECT, SCHEMA_VERSION_TABLE_SQL

    conn = sqlite3.connect(sqlite_path, check_same_thread=False)
    try:
        with conn:
            _write_v1(
                lambda sql, values: conn.execute(sql, values),
                MIGRATIONS,
                SCHEMA_VERSION_TABLE_SQL,
                lambda name: f":{name}",
                DIALECT.dump_ts,
            )
        clock = ManualClock(T0 + timedelta(hours=1))
        ledger = SQLiteLedger(conn, clock=clock)
        ledger.setup()
        (version,) = conn.execute("SELECT MAX(version) FROM lge_schema_version").fetchone()
        assert version == len(MIGRATIONS) == 3
        _check_upgraded(ledger, clock)
    finally:
        conn.close()


@pytest.mark.postgres
def test_a_v1_postgres_ledger_upgrades_with_setup(pg_url: str) -> None:
    """setup() migrates a v1 PostgreSQL ledger the same way, under its advisory lock."""
    import psycopg
    from psycopg.rows import dict_row

    from langgraph_effects.ledger.postgres import PostgresLedger
    from langgraph_effects.ledger.postgres._migrations import MIGRATIONS
    from langgraph_effects.ledger.postgres._sql import SCHEMA_VERSION_TABLE_SQL

    with psycopg.connect(pg_url, autocommit=True) as conn:
        _write_v1(
            lambda sql, values: conn.execute(sql, values),
            MIGRATIONS,
            SCHEMA_VERSION_TABLE_SQL,
            lambda name: f"%({name})s",
            lambda ts: ts,
        )
    clock = ManualClock(T0 + timedelta(hours=1))
    with PostgresLedger.from_conn_string(pg_url, clock=clock) as ledger:
        ledger.setup()
        with psycopg.connect(pg_url, row_factory=dict_row) as conn:
            row = conn.execute("SELECT MAX(version) AS v FROM lge_schema_version").fetchone()
        assert row is not None
        assert row["v"] == len(MIGRATIONS) == 3
        _check_upgraded(ledger, clock)


# -- the key retention: one computation, record and contract combined ------------------

WINDOW = ProviderContract(idempotency_window=timedelta(hours=24))


def _unknown(**changes: Any) -> Operation:
    base: dict[str, Any] = {
        "tenant_id": "t",
        "operation_id": "op-1",
        "action": "crm.close",
        "payload_digest": "0" * 64,
        "status": S.UNKNOWN,
        "attempts": 1,
        "idempotency_key": "lge-op-1",
        "key_retention_seconds": key_retention_seconds(WINDOW),
        "first_dispatched_at": T0,
        "created_at": T0,
        "updated_at": T0,
    }
    return Operation(**(base | changes))


def test_the_recorded_retention_is_the_window_minus_the_margin() -> None:
    """A key contract records window - margin; no key contract records none."""
    assert key_retention_seconds(WINDOW) == (24 * 60 - 5) * 60
    assert key_retention_seconds(ProviderContract()) is None
    assert key_retention_seconds(None) is None
    recorded = recorded_contract(_unknown())
    assert key_expires_at(_unknown(), recorded) == T0 + timedelta(hours=24) - timedelta(minutes=5)


def test_plan_takes_the_stricter_of_record_and_live_contract() -> None:
    """A retry is safe only while both the record's and the contract's windows are open."""
    short_record = _unknown(key_retention_seconds=3600.0)
    assert key_expires_at(short_record, WINDOW) == T0 + timedelta(hours=1)
    assert retry_allowed(short_record, WINDOW, T0 + timedelta(minutes=59))
    assert not retry_allowed(short_record, WINDOW, T0 + timedelta(hours=2))
    tightened = ProviderContract(idempotency_window=timedelta(minutes=30))
    assert key_expires_at(_unknown(), tightened) == T0 + timedelta(minutes=25)
    assert not retry_allowed(_unknown(), tightened, T0 + timedelta(hours=1))
    assert not retry_allowed(_unknown(), None, T0)  # no live contract: never
    assert not retry_allowed(_unknown(idempotency_key=None), WINDOW, T0)  # no key was given
    legacy = _unknown(key_retention_seconds=None)  # a row from before schema v2
    assert key_expires_at(legacy, WINDOW) == T0 + timedelta(hours=24) - timedelta(minutes=5)
    assert retry_allowed(legacy, WINDOW, T0 + timedelta(hours=1))


# -- the runner: what it records and reports -----------------------------------------


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env("memory", "sync", path=tmp_path / "app.db")
    yield e
    e.close()


def _close_tool(crm: FakeCRM, contract: ProviderContract | None) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"], contract=contract)
    def close_case(case_id: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case."""
        return crm.close_case(case_id, "fixed", idempotency_key=ctx.idempotency_key)

    return close_case


@pytest.mark.parametrize(
    ("contract", "retention"),
    [(WINDOW, (24 * 60 - 5) * 60.0), (None, None)],
    ids=["key-contract", "no-contract"],
)
def test_the_runner_records_the_retention_its_contract_promises(
    env: Env, contract: ProviderContract | None, retention: float | None
) -> None:
    """The record holds the key the tool was given and the contract's retention (None without
    a key contract), so the CLI can judge a resend from the record alone."""
    crm = FakeCRM()
    graph = build_graph(
        [_close_tool(crm, contract)],
        [call("close_case", "call-a", case_id="A")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    env.invoke(graph, {"messages": [("user", "close A")]}, {"configurable": {"thread_id": "t"}})
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert op.idempotency_key is not None
    assert op.key_retention_seconds == retention
    assert crm.effects == 1


def _replays(caplog: pytest.LogCaptureFixture) -> int:
    return sum(getattr(r, "lge_event", None) == "replay" for r in caplog.records)


def test_the_runner_reports_each_replay_of_a_confirmed_record(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """count_replay fires when a confirmed record answers a re-run, not on the first dispatch."""
    caplog.set_level(logging.INFO, logger="langgraph_effects")
    crm = FakeCRM()
    cfg = {"configurable": {"thread_id": "t"}}
    graph = build_graph(
        [_close_tool(crm, WINDOW)],
        [call("close_case", "call-a", case_id="A")],
        ledger=env.ledger,
        checkpointer=env.checkpointer,
    )
    [msg] = tool_messages(env.invoke(graph, {"messages": [("user", "close A")]}, cfg))
    assert msg.status == "success"
    assert _replays(caplog) == 0
    before_tools = next(s for s in graph.get_state_history(cfg) if s.next == ("tools",))
    env.invoke(graph, None, before_tools.config)
    env.invoke(graph, None, before_tools.config)
    assert _replays(caplog) == 2
    assert crm.effects == 1


# -- stale-token refusals are reported -------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger(request: pytest.FixtureRequest, sqlite_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        memory = InMemoryLedger()
        memory.setup()
        yield memory
    elif request.param == "sqlite":
        with SQLiteLedger.from_conn_string(str(sqlite_path)) as opened:
            opened.setup()
            yield opened
    else:
        from langgraph_effects.ledger.postgres import PostgresLedger

        with PostgresLedger.from_conn_string(request.getfixturevalue("pg_url")) as pg:
            pg.setup()
            yield pg


def test_stale_token_refusals_are_logged_with_their_ids(
    ledger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A refused stale write (confirm, and each stale receipt of confirm_many) is counted and
    reported through observe.log_stale_token with tenant, operation and both tokens."""
    caplog.set_level(logging.WARNING, logger="langgraph_effects")
    tenant = "tenant-a"
    for op_id in ("op-1", "op-2"):
        op = ledger.prepare(make_draft(op_id), owner=OWNER).operation
        ledger.mark_unknown(tenant, op_id, token=op.fencing_token, reason="taken over")
    with pytest.raises(StaleFencingToken):
        ledger.confirm(tenant, "op-1", token=1)
    [outcome] = ledger.confirm_many([Confirmation(tenant_id=tenant, operation_id="op-2", token=1)])
    assert isinstance(outcome, StaleFencingToken)
    stale = [r for r in caplog.records if getattr(r, "lge_event", None) == "stale_token"]
    assert [(r.lge_tenant_id, r.lge_operation_id, r.lge_fencing_token) for r in stale] == [  # type: ignore[attr-defined]
        (tenant, "op-1", 1),
        (tenant, "op-2", 1),
    ]
    assert ledger.stats().stale_token_refusals == 2


# -- current_owner -------------------------------------------------------------------


def test_lease_owner_current_caches_host_and_start_per_pid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """current_owner() asks for the host name once per process, and again only under a new pid
    (a forked child), where it reads that process's own start time."""
    calls: list[int] = []
    real = socket.gethostname

    def counting() -> str:
        calls.append(os.getpid())
        return real()

    monkeypatch.setattr(_owners, "_identity", None)
    monkeypatch.setattr(socket, "gethostname", counting)
    owners = [current_owner() for _ in range(3)]
    assert len(calls) == 1
    assert len({o.nonce for o in owners}) == 3
    assert {(o.host, o.pid, o.started_at) for o in owners} == {
        (real(), os.getpid(), round(psutil.Process().create_time(), 2))
    }
    parent = os.getppid()  # stands in for "another pid", as after a fork
    monkeypatch.setattr(os, "getpid", lambda: parent)
    child = current_owner()
    assert len(calls) == 2
    assert (child.pid, child.started_at) == (parent, round(psutil.Process(parent).create_time(), 2))


# -- the reported bug, end to end ------------------------------------------------------


def test_cli_retry_of_a_keyless_support_ticket_is_refused(tmp_path: Path) -> None:
    """bugs.md: examples/support_ticket.py (no key contract) stopped at its review; the CLI's
    retry is refused (exit 4) instead of ordering a resend that creates a second ticket."""
    import json
    import subprocess
    import sys

    example = Path(__file__).resolve().parent.parent / "examples" / "support_ticket.py"
    stopped = subprocess.run(
        [sys.executable, str(example), "--stop-at-review", "--dir", str(tmp_path)],
        capture_output=True, text=True, check=False, timeout=180,
    )  # fmt: skip
    assert stopped.returncode == 2, stopped.stderr
    cli = Path(sys.executable).with_name("langgraph-effects")
    db = f"sqlite:///{tmp_path / 'effects.db'}"
    listed = subprocess.run(
        [str(cli), "list", "--db", db, "--json"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    [op] = json.loads(listed.stdout)["operations"]
    assert (op["status"], op["tenant_id"]) == ("unknown", "acme")
    retried = subprocess.run(
        [str(cli), "retry", op["operation_id"], "--tenant", "acme", "--by", "bob",
         "--reason", "x", "--db", db, "--json"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert retried.returncode == 4, retried.stdout
    assert "promised no deduplication" in json.loads(retried.stderr)["message"]
    with SQLiteLedger.from_conn_string(str(tmp_path / "effects.db")) as ledger:
        ledger.setup()
        record = ledger.get("acme", op["operation_id"])
    assert record is not None
    assert (record.status, record.key_retention_seconds) == (S.UNKNOWN, None)
