"""Ledger URLs and the lazy ledger a server's graph module creates at import time.

``ledger_from_env()`` / ``ledger_from_url()`` must do no I/O when called and never block
the event loop afterwards: checked here in-process with blockbuster (the detector
``langgraph dev`` runs; ``tests/server/test_server.py`` checks it under the real server).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from langgraph_effects import (
    LeaseOwner,
    LedgerNotSetUp,
    OperationStatus,
    SQLiteLedger,
    ledger_from_env,
    ledger_from_url,
)
from langgraph_effects._owners import current_owner
from langgraph_effects.errors import InvalidInput, LedgerUnavailable
from langgraph_effects.ledger.connect import LazyLedger, LedgerLocation, parse_ledger_url
from langgraph_effects.testing import make_draft


def blockbuster() -> Any:
    """LangGraph Server's blocking-call detector (the ``server`` extra installs it)."""
    return pytest.importorskip(
        "blockbuster", reason="blockbuster is not installed: the 'server' extra is missing"
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///effects.db", LedgerLocation("sqlite", "effects.db")),
        ("sqlite:////abs/effects.db", LedgerLocation("sqlite", "/abs/effects.db")),
        ("SQLite:///rel/e.db", LedgerLocation("sqlite", "rel/e.db")),
        ("effects.db", LedgerLocation("sqlite", "effects.db")),
        ("postgresql://u@h:5432/db", LedgerLocation("postgres", "postgresql://u@h:5432/db")),
        ("postgres://u@h/db", LedgerLocation("postgres", "postgres://u@h/db")),
        ("postgresql+psycopg://u@h/db", LedgerLocation("postgres", "postgresql://u@h/db")),
    ],
)
def test_parse_ledger_url(url: str, expected: LedgerLocation) -> None:
    """Every accepted spelling names its backend and target."""
    assert parse_ledger_url(url) == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite:///", "malformed SQLite URL"),
        ("sqlite://effects.db", "malformed SQLite URL"),
        ("mysql://u@h/db", "unsupported ledger URL"),
        ("   ", "unsupported ledger URL"),
        ("postgresql://u:p@ss@h/db", "percent-encode it as %40"),
    ],
)
def test_parse_ledger_url_refuses(url: str, message: str) -> None:
    """A malformed or unsupported URL is refused with what to write instead."""
    with pytest.raises(InvalidInput, match=message):
        parse_ledger_url(url)


@pytest.mark.parametrize("url", ["mysql://ana:s3cr3t@h/db", "sqlite://ana:s3cr3t@effects.db"])
def test_a_refused_url_never_shows_its_password(url: str) -> None:
    """The error names the URL with its password as ``***``."""
    with pytest.raises(InvalidInput) as refused:
        parse_ledger_url(url)
    assert "s3cr3t" not in str(refused.value)
    assert "ana:***@" in str(refused.value)


@pytest.mark.parametrize(
    ("url", "cause"),
    [
        ("postgresql://postgres@127.0.0.1:1/test", "refused"),
        ("postgresql://postgres@no-such-host.invalid:5432/test", "resolve host"),
    ],
)
def test_an_unreachable_postgres_fails_at_once_with_its_cause(url: str, cause: str) -> None:
    """A refused port or an unknown host is reported with the driver's reason when the ledger
    opens (sync, and the lazy ledger's first call), not as a pool's timeout 30 s later."""
    pytest.importorskip("psycopg_pool")
    from langgraph_effects.ledger.postgres import PostgresLedger

    with pytest.raises(LedgerUnavailable, match=cause), PostgresLedger.from_conn_string(url):
        pass

    async def first_call() -> None:
        await ledger_from_url(url).get("default", "op-1")

    with pytest.raises(LedgerUnavailable, match=cause) as refused:
        asyncio.run(first_call())
    assert "couldn't get a connection" not in str(refused.value)


def test_ledger_from_env_reads_the_url_and_opens_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LGE_LEDGER_URL wins over LGE_DB, which wins over the default; no file is created
    until the first call."""
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    monkeypatch.setenv("LGE_LEDGER_URL", f"sqlite:///{first}")
    monkeypatch.setenv("LGE_DB", f"sqlite:///{second}")
    assert ledger_from_env().location == LedgerLocation("sqlite", str(first))
    monkeypatch.delenv("LGE_LEDGER_URL")
    assert ledger_from_env().location == LedgerLocation("sqlite", str(second))
    monkeypatch.delenv("LGE_DB")
    assert ledger_from_env().location == LedgerLocation("sqlite", "effects.db")
    assert ledger_from_env(f"sqlite:///{first}").location.target == str(first)
    assert not first.exists()
    assert not second.exists()


async def _lifecycle(ledger: LazyLedger, owner: LeaseOwner) -> OperationStatus:
    """Prepare (claimed), confirm, read back: every call under the blocking detector."""
    with blockbuster().blockbuster_ctx():
        prepared = await ledger.prepare(make_draft("op-1"), owner=owner)
        token = prepared.operation.fencing_token
        await ledger.confirm("tenant-a", "op-1", token=token, result={"ok": True})
        [op] = await ledger.list(tenant_id="tenant-a")
        await ledger.aclose()
    return op.status


def test_sqlite_lazy_ledger_never_blocks_the_loop(tmp_path: Path) -> None:
    """Opened, set up and used inside a running loop with blockbuster on: no blocking call;
    the records are in the file."""
    path = tmp_path / "effects.db"
    ledger = ledger_from_url(f"sqlite:///{path}")
    owner = current_owner()  # reads /proc once, outside the loop
    assert asyncio.run(_lifecycle(ledger, owner)) is OperationStatus.CONFIRMED
    with SQLiteLedger.from_conn_string(str(path)) as sync:
        assert sync.get("tenant-a", "op-1").status is OperationStatus.CONFIRMED


@pytest.mark.postgres
def test_postgres_lazy_ledger_never_blocks_the_loop(pg_url: str) -> None:
    """The same on PostgreSQL: the pool opens in the loop, every statement is awaited."""
    ledger = ledger_from_url(pg_url)
    owner = current_owner()
    assert asyncio.run(_lifecycle(ledger, owner)) is OperationStatus.CONFIRMED


def test_a_sync_ledger_in_the_loop_is_what_the_detector_catches(tmp_path: Path) -> None:
    """The control: the README's sync SQLiteLedger called from a coroutine raises BlockingError."""
    conn = sqlite3.connect(tmp_path / "sync.db", check_same_thread=False, isolation_level=None)
    ledger = SQLiteLedger(conn)
    ledger.setup()

    detector = blockbuster()

    async def use() -> Any:
        with detector.blockbuster_ctx():
            return ledger.get("tenant-a", "op-1")

    with pytest.raises(detector.BlockingError, match="sqlite3"):
        asyncio.run(use())
    conn.close()


def test_concurrent_first_calls_open_once_and_each_loop_gets_its_own(tmp_path: Path) -> None:
    """Ten calls racing the first open share one backend; a second event loop (a second
    ``asyncio.run``) opens its own, on the same file."""
    ledger = ledger_from_url(f"sqlite:///{tmp_path / 'effects.db'}")

    async def backends() -> list[Any]:
        return list(await asyncio.gather(*(ledger.opened() for _ in range(10))))

    first = asyncio.run(backends())
    second = asyncio.run(backends())
    assert all(b is first[0] for b in first)
    assert all(b is second[0] for b in second)
    assert first[0] is not second[0]


def test_setup_false_leaves_the_schema_to_a_deploy_step(tmp_path: Path) -> None:
    """With setup=False the ledger is used as it is: a fresh file says it is not set up."""
    ledger = ledger_from_url(f"sqlite:///{tmp_path / 'effects.db'}", setup=False)
    with pytest.raises(LedgerNotSetUp):
        asyncio.run(ledger.get("tenant-a", "op-1"))


def test_the_lazy_ledger_delegates_every_verb_of_the_async_protocol() -> None:
    """A verb added to ``AsyncLedger`` and not to ``LazyLedger`` failed only under the
    server (``'LazyLedger' object has no attribute 'adopt'``): the two lists stay equal."""
    from langgraph_effects.ledger.base import AsyncLedger
    from langgraph_effects.ledger.connect import LazyLedger

    verbs = {name for name in dir(AsyncLedger) if not name.startswith("_")}
    assert verbs - set(dir(LazyLedger)) == set()


@pytest.mark.parametrize("bad", ["on", "FULL", "off", "", 1])
@pytest.mark.parametrize("url", ["sqlite:///effects.db", "postgresql://u@h:5432/db"])
def test_a_bad_prepare_synchronous_is_refused_when_the_url_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: object, url: str
) -> None:
    """``ledger_from_url`` / ``ledger_from_env`` refuse a ``prepare_synchronous`` other than
    ``"ON"`` or ``"SERVER"`` at once (no I/O, not at the first call), naming both and the
    value given, on either backend's URL."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LGE_LEDGER_URL", url)
    refusal = rf"prepare_synchronous must be 'ON' or 'SERVER', not {bad!r}"
    with pytest.raises(InvalidInput, match=refusal):
        ledger_from_url(url, prepare_synchronous=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=refusal):
        ledger_from_env(prepare_synchronous=bad)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []  # nothing opened


@pytest.mark.postgres
@pytest.mark.parametrize("given", [None, "ON", "SERVER"])
def test_ledger_from_url_hands_prepare_synchronous_to_the_postgres_ledger(
    pg_url: str, given: str | None
) -> None:
    """The lazy PostgreSQL ledger opens with the ``prepare_synchronous`` given: decisions
    floored at ``on`` by default and under ``"ON"``, the session's setting under
    ``"SERVER"`` (the statements ``tests/ledger/test_ledger_receipt_sync.py`` reads back)."""
    from langgraph_effects.ledger.postgres._sql import DIALECT, SERVER_DIALECT

    kw = {} if given is None else {"prepare_synchronous": given}
    ledger = ledger_from_url(pg_url, **kw)  # type: ignore[arg-type]
    owner = current_owner()

    async def opened() -> Any:
        backend = await ledger.opened()
        await ledger.prepare(make_draft("op-1"), owner=owner)
        await ledger.reject("tenant-a", "op-1", token=1, reason="refused")
        [op] = await ledger.list(tenant_id="tenant-a")
        await ledger.aclose()
        return backend._write_dialect, op.status

    dialect, status = asyncio.run(opened())
    assert dialect is (SERVER_DIALECT if given == "SERVER" else DIALECT)
    assert status is OperationStatus.REJECTED
