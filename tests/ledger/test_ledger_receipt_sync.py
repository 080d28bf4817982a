"""SQLite: ``receipt_synchronous`` relaxes the receipt's commit and nothing else."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from langgraph_effects.core.model import OperationStatus
from langgraph_effects.ledger.base import Confirmation
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


def test_receipts_keep_the_ledgers_durability_by_default(sqlite_path: Path) -> None:
    """Without the option a receipt commits under synchronous=FULL like every other write."""
    conn, ledger, seen = _traced(sqlite_path)
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
