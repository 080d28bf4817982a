"""The SQLite file a fake keeps its state in, shared by every process that opens it."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# --------------------------------------------------------------------------- storage


class _Database:
    """One SQLite connection per process, guarded by a lock; transactions commit eagerly."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1

    def _connection(self) -> sqlite3.Connection:
        # A forked child must not reuse its parent's file connection; an
        # in-memory database cannot be reopened (it would be empty), so it is kept.
        if self._conn is not None and (self._pid == os.getpid() or self.path is None):
            return self._conn
        conn = sqlite3.connect(
            str(self.path) if self.path else ":memory:",
            isolation_level=None,
            check_same_thread=False,
            timeout=30.0,
        )
        conn.execute("PRAGMA busy_timeout = 30000")
        if self.path is not None:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        self._conn, self._pid = conn, os.getpid()
        return conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None


_COMMON_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS effects (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        method TEXT NOT NULL,
        target TEXT NOT NULL,
        idempotency_key TEXT,
        payload_digest TEXT NOT NULL,
        applied_at INTEGER NOT NULL,
        late INTEGER NOT NULL DEFAULT 0)""",
    """CREATE TABLE IF NOT EXISTS idempotency_keys (
        key TEXT PRIMARY KEY,
        payload_digest TEXT NOT NULL,
        response TEXT NOT NULL,
        stored_at INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS in_flight (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        method TEXT NOT NULL,
        target TEXT NOT NULL,
        payload TEXT NOT NULL,
        payload_digest TEXT NOT NULL,
        idempotency_key TEXT,
        due_at INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS faults (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        fault TEXT NOT NULL,
        on_method TEXT,
        params TEXT NOT NULL,
        consumed INTEGER NOT NULL DEFAULT 0)""",
    "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, n INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
