"""Fake third-party providers that count the effects they actually apply.

They stand for the CRM, the mail service and the ticketing system an effect
tool talks to, and only for those: never fake our own ledger or LangGraph.

Each fake keeps its whole state (records, idempotency keys, scripted faults,
counters) in a small SQLite database of its own: the provider's "database".
Give it a ``path`` and the state is a file shared by every process that opens
it, so a test can kill a child process in the middle of a call, resume in a
fresh process, and count effects from the parent. ``path=None`` keeps the
state in memory for single-process tests.

Guarantees:

* Every call is one ``BEGIN IMMEDIATE`` transaction, committed *before* the
  fake answers (or raises, or kills the process): what it applied survives a
  process kill. Thread-safe (a lock per object) and process-safe (SQLite
  locking with a busy timeout). WAL with ``synchronous=NORMAL``: durable
  across process death, not across power loss; this is a test double.
* Time comes from an injectable :class:`Clock`; :class:`FakeClock` is one you
  advance by hand (optionally stored in a file so processes share it). Nothing
  in the fakes sleeps: late answers, key expiry, delivery and search
  visibility all happen when the clock says so, so tests need no timing.

Counting (the harness view, never touched by faults):

* ``effects``: effects the provider applied (a replayed idempotent resend,
  a rejected, refused or dropped call applies nothing).
* ``effects_for(target, idempotency_key=...)``: the same, for one target
  (CRM: the case or record id; mail: the recipient; ticketing: the ticket
  title) and/or one idempotency key.
* ``duplicates``: applied effects beyond the first per *logical intent*,
  where an intent is ``(method, target, payload)`` (the payload compared by a
  canonical-JSON digest; the idempotency key is deliberately not part of it:
  the same request re-sent under a new key after the window closed is exactly
  the duplicate we hunt). Tests should give genuinely distinct intents
  distinct payloads. ``effects_for`` catches re-closes with another payload.

Faults are scripted per provider and consumed in call order
(``crm.faults.push(Fault.LOSE_RESPONSE)``, ``crm.script([None, Fault.TRANSIENT])``);
since they live in the database, a parent can script a child's calls. By
default a fault applies to the next *effect* call (``close_case``, ``update``,
``send``, ``create_ticket``); pass ``on="get_case"`` (a method name) to aim one
at a lookup instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self

from langgraph_effects.core.digest import canonical_json
from langgraph_effects.errors import EffectRejected, TransientProviderError
from langgraph_effects.testing.faults import CRASH_EXIT_CODE

__all__ = [
    "AppliedEffect",
    "Clock",
    "FakeAPI",
    "FakeCRM",
    "FakeClock",
    "FakeMail",
    "FakeProvider",
    "FakeTicketing",
    "Fault",
    "FaultQueue",
    "ProviderStats",
    "ProviderTimeout",
    "SystemClock",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


def _to_us(when: datetime) -> int:
    if when.tzinfo is None:
        raise ValueError("naive datetime: fakes keep time in aware UTC datetimes")
    return (when - _EPOCH) // _MICRO


def _from_us(us: int) -> datetime:
    return _EPOCH + us * _MICRO


def _seconds(value: timedelta | float) -> timedelta:
    return value if isinstance(value, timedelta) else timedelta(seconds=value)


# --------------------------------------------------------------------------- clocks


class Clock(Protocol):
    """Where the fakes read the time: aware UTC datetimes."""

    def now(self) -> datetime:
        """The current time, timezone-aware."""


class SystemClock:
    """The real time."""

    def now(self) -> datetime:
        """The wall clock, in UTC."""
        return datetime.now(UTC)


class FakeClock:
    """A clock that moves only when a test advances it.

    Share one instance between providers and the code under test (the
    runner too, so it judges idempotency windows and leases on the same time).
    With a ``path`` the current time lives in a SQLite file, so a child process
    that opens ``FakeClock(path=...)`` (or unpickles this one) sees the same time
    and the parent can advance it. An in-memory clock pickles as a *copy*.

    Args:
        start: the initial time (aware). Ignored when ``path`` already holds a time.
        path: optional file to keep the time in, for several processes.
    """

    DEFAULT_START: ClassVar[datetime] = datetime(2030, 1, 1, tzinfo=UTC)

    def __init__(self, start: datetime | None = None, *, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._us = _to_us(start or self.DEFAULT_START)
        self._lock = threading.Lock()
        self._db = _Database(self.path) if self.path is not None else None
        if self._db is not None:
            with self._db.transaction() as conn:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS clock (id INTEGER PRIMARY KEY, us INTEGER)"
                )
                conn.execute("INSERT OR IGNORE INTO clock (id, us) VALUES (1, ?)", (self._us,))

    def now(self) -> datetime:
        """The fake time: from its file if it has one (shared by processes), else in memory."""
        if self._db is None:
            return _from_us(self._us)
        with self._db.transaction() as conn:
            (us,) = conn.execute("SELECT us FROM clock WHERE id = 1").fetchone()
        return _from_us(int(us))

    def advance(self, delta: timedelta | float) -> datetime:
        """Move the time forward by ``delta`` (seconds or a timedelta); return the new time."""
        step = _seconds(delta) // _MICRO
        if step < 0:
            raise ValueError("a clock does not go backwards")
        if self._db is None:
            with self._lock:
                self._us += step
                return _from_us(self._us)
        with self._db.transaction() as conn:
            conn.execute("UPDATE clock SET us = us + ? WHERE id = 1", (step,))
            (us,) = conn.execute("SELECT us FROM clock WHERE id = 1").fetchone()
        return _from_us(int(us))

    def close(self) -> None:
        """Close the clock's file, if it has one."""
        if self._db is not None:
            self._db.close()

    def __reduce__(self) -> tuple[Any, ...]:
        # A file clock travels as its path; an in-memory one as a copy of its time.
        if self.path is not None:
            return (_open_clock, (self.path,))
        return (FakeClock, (self.now(),))

    def __repr__(self) -> str:
        return f"FakeClock({self.now().isoformat()}{', shared' if self.path else ''})"


def _open_clock(path: Path) -> FakeClock:
    return FakeClock(path=path)


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


# --------------------------------------------------------------------------- faults


class Fault(StrEnum):
    """What the provider does wrong on one call.

    * ``NONE``: behave normally (a placeholder in a script).
    * ``LOSE_RESPONSE``: apply and commit, then raise :class:`ProviderTimeout`
      (the response was lost on the way back).
    * ``LOSE_REQUEST``: apply nothing, raise :class:`ProviderTimeout`
      (the request never arrived; to the caller it looks like ``LOSE_RESPONSE``).
    * ``TRANSIENT``: refuse before acting with
      :class:`~langgraph_effects.errors.TransientProviderError` (``retry_after``).
    * ``REJECT``: refuse definitively with
      :class:`~langgraph_effects.errors.EffectRejected` (``reason``, ``code``).
    * ``LATE``: raise :class:`ProviderTimeout` now (the caller gave up) and apply
      the request once the clock passes ``delay``. Until then a resend under
      the same idempotency key gets ``TransientProviderError`` ("key in use",
      like Stripe's 409); after it, a resend replays the late response.
    * ``CRASH``: apply and commit, then kill the *calling* process with
      ``os._exit(exit_code)``: for real process-kill tests in a child.
    * ``NEVER_DELIVER``: mail only: accept the message but never deliver it
      (on other providers it behaves like ``NONE``).
    """

    NONE = "none"
    LOSE_RESPONSE = "lose_response"
    LOSE_REQUEST = "lose_request"
    TRANSIENT = "transient"
    REJECT = "reject"
    LATE = "late"
    CRASH = "crash"
    NEVER_DELIVER = "never_deliver"


@dataclass(frozen=True, slots=True)
class _Scripted:
    fault: Fault
    params: dict[str, Any]


_NO_FAULT = _Scripted(Fault.NONE, {})


class FaultQueue:
    """The scripted faults of one provider, stored in its database, consumed in call order."""

    def __init__(self, db: _Database) -> None:
        self._db = db

    def push(
        self,
        fault: Fault,
        *,
        on: str | None = None,
        times: int = 1,
        retry_after: float | None = 1.0,
        delay: timedelta | float = timedelta(seconds=30),
        exit_code: int = CRASH_EXIT_CODE,
        reason: str = "rejected by the provider",
        code: str = "rejected",
    ) -> None:
        """Append ``fault`` for the next ``times`` matching calls.

        Args:
            fault: what to do wrong.
            on: a method name (``"get_case"``, ``"search"``...) to aim the fault at
                that method; ``None`` aims it at the next effect call.
            times: how many consecutive matching calls get it.
            retry_after: ``TRANSIENT``: the seconds carried by the error.
            delay: ``LATE``: how long after the call the effect lands.
            exit_code: ``CRASH``: the status the killed process exits with.
            reason: ``REJECT``: the message of ``EffectRejected``.
            code: ``REJECT``: the code of ``EffectRejected``.
        """
        if times < 1:
            raise ValueError("times must be at least 1")
        params = {
            "retry_after": retry_after,
            "delay_us": _seconds(delay) // _MICRO,
            "exit_code": exit_code,
            "reason": reason,
            "code": code,
        }
        with self._db.transaction() as conn:
            conn.executemany(
                "INSERT INTO faults (fault, on_method, params) VALUES (?, ?, ?)",
                [(Fault(fault).value, on, json.dumps(params))] * times,
            )

    def script(self, faults: Iterable[Fault | None], *, on: str | None = None) -> None:
        """Replace the pending faults aimed like ``on`` with ``faults``, one per call.

        ``None`` in ``faults`` means "behave normally" for that call. Faults aimed
        elsewhere (another ``on``) are kept.
        """
        with self._db.transaction() as conn:
            conn.execute("DELETE FROM faults WHERE consumed = 0 AND on_method IS ?", (on,))
        for fault in faults:
            self.push(Fault.NONE if fault is None else fault, on=on)

    def clear(self) -> None:
        """Drop every pending fault."""
        with self._db.transaction() as conn:
            conn.execute("DELETE FROM faults WHERE consumed = 0")

    def pending(self) -> list[Fault]:
        """The faults not yet consumed, in order."""
        with self._db.transaction() as conn:
            rows = conn.execute("SELECT fault FROM faults WHERE consumed = 0 ORDER BY seq")
            return [Fault(row[0]) for row in rows]

    @staticmethod
    def _pop(conn: sqlite3.Connection, method: str, *, effect: bool) -> _Scripted:
        row = conn.execute(
            "SELECT seq, fault, params FROM faults WHERE consumed = 0"
            " AND (on_method = ? OR (on_method IS NULL AND ?)) ORDER BY seq LIMIT 1",
            (method, effect),
        ).fetchone()
        if row is None:
            return _NO_FAULT
        conn.execute("UPDATE faults SET consumed = 1 WHERE seq = ?", (row[0],))
        return _Scripted(Fault(row[1]), json.loads(row[2]))


class ProviderTimeout(TimeoutError):
    """The provider did not answer in time: it may or may not have acted.

    Deliberately *not* a :class:`~langgraph_effects.errors.ProviderError`: an
    ambiguous outcome is "anything else", and the runner must treat it so.
    """

    def __init__(self, provider: str, method: str) -> None:
        self.provider = provider
        self.method = method
        super().__init__(f"{provider}.{method}: no response (timed out); the outcome is unknown")


# --------------------------------------------------------------------------- harness view


@dataclass(frozen=True, slots=True, kw_only=True)
class AppliedEffect:
    """One effect the provider applied (the harness view)."""

    seq: int
    method: str
    target: str
    idempotency_key: str | None
    payload_digest: str
    applied_at: datetime
    late: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderStats:
    """What a provider saw. ``effects`` and ``duplicates`` are defined in the module docstring.

    Attributes:
        requests: calls received (effects and lookups, faulted or not).
        effects: effects applied.
        duplicates: applied effects beyond the first per (method, target, payload).
        replays: resends answered from a stored idempotency key, applying nothing.
        rejections: calls refused definitively (``EffectRejected``).
        transient_errors: calls refused with ``TransientProviderError``.
        timeouts: calls answered with ``ProviderTimeout`` (acted or not).
        in_flight: late requests not yet applied.
    """

    requests: int
    effects: int
    duplicates: int
    replays: int
    rejections: int
    transient_errors: int
    timeouts: int
    in_flight: int


# --------------------------------------------------------------------------- base


class FakeProvider:
    """The base of every fake: transactions, faults, idempotency keys, late requests, counting."""

    name: ClassVar[str] = "provider"
    _SCHEMA: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        clock: Clock | None = None,
        retention: timedelta = timedelta(hours=24),
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.retention = retention
        self._db = _Database(self.path)
        self.faults = FaultQueue(self._db)
        with self._db.transaction() as conn:
            for ddl in _COMMON_SCHEMA + self._SCHEMA:
                conn.execute(ddl)

    # -- lifecycle ------------------------------------------------------------

    def close(self) -> None:
        """Close this process's connection (the file and its state stay)."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _init_kwargs(self) -> dict[str, Any]:
        return {"clock": self.clock, "retention": self.retention}

    def __reduce__(self) -> tuple[Any, ...]:
        # Crossing a process boundary (multiprocessing spawn) reopens the same file.
        if self.path is None:
            raise TypeError(
                f"an in-memory {type(self).__name__} cannot cross processes: give it a path"
            )
        return (_rebuild, (type(self), self.path, self._init_kwargs()))

    # -- scripting ------------------------------------------------------------

    def script(self, faults: Iterable[Fault | None], *, on: str | None = None) -> None:
        """Shorthand for ``self.faults.script(...)``."""
        self.faults.script(faults, on=on)

    def revoke_authorization(self) -> None:
        """Refuse every call from now on: ``EffectRejected(code="authorization_revoked")``."""
        with self._db.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO settings VALUES ('revoked', '1')")

    def restore_authorization(self) -> None:
        """Undo :meth:`revoke_authorization`."""
        with self._db.transaction() as conn:
            conn.execute("DELETE FROM settings WHERE name = 'revoked'")

    # -- harness view ---------------------------------------------------------

    @property
    def effects(self) -> int:
        """Effects applied so far (late requests whose time has come included)."""
        return self.stats().effects

    @property
    def duplicates(self) -> int:
        """Applied effects beyond the first per (method, target, payload digest)."""
        return self.stats().duplicates

    def effects_for(self, target: str | None = None, *, idempotency_key: str | None = None) -> int:
        """Effects applied to ``target`` and/or under ``idempotency_key`` (all given must match)."""
        with self._session() as (conn, _):
            (n,) = conn.execute(
                "SELECT COUNT(*) FROM effects WHERE (? IS NULL OR target = ?)"
                " AND (? IS NULL OR idempotency_key = ?)",
                (target, target, idempotency_key, idempotency_key),
            ).fetchone()
        return int(n)

    def effect_log(self) -> list[AppliedEffect]:
        """Every applied effect, in order."""
        with self._session() as (conn, _):
            rows = conn.execute(
                "SELECT seq, method, target, idempotency_key, payload_digest, applied_at, late"
                " FROM effects ORDER BY seq"
            ).fetchall()
        return [
            AppliedEffect(
                seq=r[0],
                method=r[1],
                target=r[2],
                idempotency_key=r[3],
                payload_digest=r[4],
                applied_at=_from_us(r[5]),
                late=bool(r[6]),
            )
            for r in rows
        ]

    def stats(self) -> ProviderStats:
        """All counters at once, read in one transaction."""
        with self._session() as (conn, _):
            (effects,) = conn.execute("SELECT COUNT(*) FROM effects").fetchone()
            (dups,) = conn.execute(
                "SELECT COALESCE(SUM(n - 1), 0) FROM (SELECT COUNT(*) AS n FROM effects"
                " GROUP BY method, target, payload_digest)"
            ).fetchone()
            (in_flight,) = conn.execute("SELECT COUNT(*) FROM in_flight").fetchone()
            counters = dict(conn.execute("SELECT name, n FROM counters").fetchall())
        return ProviderStats(
            requests=counters.get("requests", 0),
            effects=int(effects),
            duplicates=int(dups),
            replays=counters.get("replays", 0),
            rejections=counters.get("rejections", 0),
            transient_errors=counters.get("transient_errors", 0),
            timeouts=counters.get("timeouts", 0),
            in_flight=int(in_flight),
        )

    # -- machinery ------------------------------------------------------------

    @contextmanager
    def _session(self) -> Iterator[tuple[sqlite3.Connection, int]]:
        """A transaction at the current time, after landing every late request that is due."""
        now = _to_us(self.clock.now())
        with self._db.transaction() as conn:
            due = conn.execute(
                "SELECT seq, method, target, payload, payload_digest, idempotency_key, due_at"
                " FROM in_flight WHERE due_at <= ? ORDER BY seq",
                (now,),
            ).fetchall()
            for seq, method, target, payload, digest, key, due_at in due:
                conn.execute("DELETE FROM in_flight WHERE seq = ?", (seq,))
                # A resend under the same key may have been applied meanwhile:
                # then the late copy is deduplicated, as a real provider would.
                if key is None or self._stored(conn, key, due_at) is None:
                    self._apply(
                        conn, method, target, json.loads(payload), digest, key, due_at, late=True
                    )
            yield conn, now

    @staticmethod
    def _bump(conn: sqlite3.Connection, counter: str) -> None:
        conn.execute(
            "INSERT INTO counters (name, n) VALUES (?, 1)"
            " ON CONFLICT (name) DO UPDATE SET n = n + 1",
            (counter,),
        )

    def _stored(self, conn: sqlite3.Connection, key: str, now: int) -> tuple[str, str] | None:
        """The (payload digest, response) stored under ``key``, if still retained."""
        row = conn.execute(
            "SELECT payload_digest, response FROM idempotency_keys WHERE key = ? AND stored_at > ?",
            (key, now - self.retention // _MICRO),
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def _apply(
        self,
        conn: sqlite3.Connection,
        method: str,
        target: str,
        payload: dict[str, Any],
        digest: str,
        key: str | None,
        now: int,
        *,
        late: bool = False,
        fault: Fault = Fault.NONE,
    ) -> dict[str, Any]:
        response = self._act(conn, method, payload, key, now, fault)
        conn.execute(
            "INSERT INTO effects"
            " (method, target, idempotency_key, payload_digest, applied_at, late)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (method, target, key, digest, now, late),
        )
        if key is not None:
            # Like Stripe: the first response is stored and replayed for the window.
            conn.execute(
                "INSERT OR REPLACE INTO idempotency_keys (key, payload_digest, response, stored_at)"
                " VALUES (?, ?, ?, ?)",
                (key, digest, json.dumps(response), now),
            )
        return response

    def _act(
        self,
        conn: sqlite3.Connection,
        method: str,
        payload: dict[str, Any],
        key: str | None,
        now: int,
        fault: Fault,
    ) -> dict[str, Any]:
        """Apply one effect to the provider's records; return the response body."""
        raise NotImplementedError

    def _admit(
        self, conn: sqlite3.Connection, method: str, *, effect: bool
    ) -> tuple[_Scripted, Exception | None]:
        """Check authorization, take the next scripted fault; return it and any refusal.

        The refusal is raised only after commit, so the consumed fault and the
        counters persist.
        """
        if conn.execute("SELECT 1 FROM settings WHERE name = 'revoked'").fetchone():
            self._bump(conn, "rejections")
            reason = f"{self.name}: the authorization was revoked"
            return _NO_FAULT, EffectRejected(reason, code="authorization_revoked")
        scripted = FaultQueue._pop(conn, method, effect=effect)
        p = scripted.params
        if scripted.fault is Fault.TRANSIENT:
            self._bump(conn, "transient_errors")
            reason = f"{self.name}.{method}: service unavailable"
            return scripted, TransientProviderError(reason, retry_after=p["retry_after"])
        if scripted.fault is Fault.REJECT:
            self._bump(conn, "rejections")
            return scripted, EffectRejected(p["reason"], code=p["code"])
        if scripted.fault in (Fault.LOSE_REQUEST, Fault.LATE, Fault.LOSE_RESPONSE):
            # LOSE_RESPONSE still acts; the timeout is raised after commit (_answer).
            self._bump(conn, "timeouts")
        if scripted.fault in (Fault.LOSE_REQUEST, Fault.LATE):
            return scripted, ProviderTimeout(self.name, method)
        return scripted, None

    def _check_key(
        self, conn: sqlite3.Connection, method: str, key: str, digest: str, now: int
    ) -> tuple[dict[str, Any] | None, Exception | None]:
        """Stripe's rules: replay the stored response, refuse another payload, or 409."""
        stored = self._stored(conn, key, now)
        if stored is not None and stored[0] != digest:
            self._bump(conn, "rejections")
            return None, self._key_reused(method, key)
        if stored is not None:
            self._bump(conn, "replays")
            return json.loads(stored[1]), None
        if conn.execute("SELECT 1 FROM in_flight WHERE idempotency_key = ?", (key,)).fetchone():
            self._bump(conn, "transient_errors")
            reason = f"{self.name}.{method}: a request with this key is still in progress (409)"
            return None, TransientProviderError(reason, retry_after=1.0)
        return None, None

    def _key_reused(self, method: str, key: str) -> EffectRejected:
        """The refusal of another payload under a stored key (Stripe's 422)."""
        reason = f"{self.name}.{method}: idempotency key {key!r} was used with another payload"
        return EffectRejected(reason, code="idempotency_key_reused", detail={"status": 422})

    def _answer(self, method: str, scripted: _Scripted, error: Exception | None) -> None:
        """After commit: kill the process, lose the response (whatever it was), or refuse."""
        if scripted.fault is Fault.CRASH:
            os._exit(int(scripted.params["exit_code"]))
        if scripted.fault is Fault.LOSE_RESPONSE:
            raise ProviderTimeout(self.name, method)
        if error is not None:
            raise error

    def _effect_call(
        self,
        method: str,
        *,
        target: str,
        payload: dict[str, Any],
        idempotency_key: str | None,
    ) -> dict[str, Any]:
        """One effect call: admit, late or key check, apply; commit; then answer."""
        digest = hashlib.sha256(canonical_json([method, target, payload])).hexdigest()
        response: dict[str, Any] | None = None
        with self._session() as (conn, now):
            self._bump(conn, "requests")
            scripted, error = self._admit(conn, method, effect=True)
            if scripted.fault is Fault.LATE:
                # Received but not processed yet: it lands when the clock reaches due_at.
                conn.execute(
                    "INSERT INTO in_flight"
                    " (method, target, payload, payload_digest, idempotency_key, due_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        method,
                        target,
                        json.dumps(payload),
                        digest,
                        idempotency_key,
                        now + scripted.params["delay_us"],
                    ),
                )
            if error is None and idempotency_key is not None:
                response, error = self._check_key(conn, method, idempotency_key, digest, now)
            if error is None and response is None:
                response = self._apply(
                    conn,
                    method,
                    target,
                    payload,
                    digest,
                    idempotency_key,
                    now,
                    fault=scripted.fault,
                )
        self._answer(method, scripted, error)
        assert response is not None
        return response

    def _lookup(self, method: str, read: Callable[[sqlite3.Connection, int], Any]) -> Any:
        """One read-only call: authorization and the faults aimed at ``method`` apply."""
        with self._session() as (conn, now):
            self._bump(conn, "requests")
            scripted, error = self._admit(conn, method, effect=False)
            result = read(conn, now) if error is None else None
        self._answer(method, scripted, error)
        return result

    def _unknown_method(self, method: str) -> AssertionError:
        return AssertionError(f"{type(self).__name__} has no effect method {method!r}")


def _rebuild(cls: type[FakeProvider], path: Path, kwargs: dict[str, Any]) -> FakeProvider:
    return cls(path, **kwargs)


# --------------------------------------------------------------------------- CRM


class FakeCRM(FakeProvider):
    """A CRM with idempotency keys (Stripe-like) and a status lookup.

    Any case id exists and is open until closed. ``close_case`` on a closed case
    closes it again (a new version, a new ``closed_by``): that is a second
    effect, which is how duplicates show. The target of an effect is the case
    (or record) id.

    Idempotency: a resend under the same key within ``retention`` returns the
    first stored response and applies nothing; the same key with another
    payload raises ``EffectRejected(code="idempotency_key_reused")`` (Stripe's
    422); after ``retention`` the key is forgotten and the resend applies again.
    Refusals (``TRANSIENT``, ``REJECT``, revoked) store nothing under the key.
    """

    name = "crm"
    _SCHEMA = (
        """CREATE TABLE IF NOT EXISTS records (
            id TEXT PRIMARY KEY,
            status TEXT NOT NULL,
            resolution TEXT,
            fields TEXT NOT NULL,
            version INTEGER NOT NULL,
            closed_by TEXT,
            closed_at INTEGER,
            updated_by TEXT)""",
    )

    def close_case(
        self, case_id: str, resolution: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Close a case. Returns ``{"case_id", "status", "resolution", "version", "closed_by"}``.

        Raises:
            ProviderTimeout: ambiguous: the case may or may not be closed.
            TransientProviderError: refused before acting; retry after ``retry_after``.
            EffectRejected: refused definitively (rejected, revoked, key reused).
        """
        return self._effect_call(
            "close_case",
            target=case_id,
            payload={"case_id": case_id, "resolution": resolution},
            idempotency_key=idempotency_key,
        )

    def update(
        self, target: str, fields: dict[str, Any], *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Merge ``fields`` (JSON values) into a record. Returns ``{"id", "version", "fields"}``."""
        return self._effect_call(
            "update",
            target=target,
            payload={"id": target, "fields": fields},
            idempotency_key=idempotency_key,
        )

    def get_case(self, case_id: str) -> dict[str, Any]:
        """Status lookup (strongly consistent): who closed the case, and at which version.

        Returns ``{"case_id", "status": "open" | "closed", "resolution", "version",
        "closed_by" (the idempotency key of the last close, or None), "closed_at"
        (ISO 8601 or None), "fields"}``: JSON values only, so it can serve as evidence.
        A case never touched is open at version 0.
        """

        def read(conn: sqlite3.Connection, now: int) -> dict[str, Any]:
            row = conn.execute(
                "SELECT status, resolution, fields, version, closed_by, closed_at"
                " FROM records WHERE id = ?",
                (case_id,),
            ).fetchone()
            if row is None:
                row = ("open", None, "{}", 0, None, None)
            return {
                "case_id": case_id,
                "status": row[0],
                "resolution": row[1],
                "version": row[3],
                "closed_by": row[4],
                "closed_at": None if row[5] is None else _from_us(row[5]).isoformat(),
                "fields": json.loads(row[2]),
            }

        result: dict[str, Any] = self._lookup("get_case", read)
        return result

    def _act(
        self,
        conn: sqlite3.Connection,
        method: str,
        payload: dict[str, Any],
        key: str | None,
        now: int,
        fault: Fault,
    ) -> dict[str, Any]:
        record_id = payload["case_id"] if method == "close_case" else payload["id"]
        conn.execute(
            "INSERT OR IGNORE INTO records (id, status, fields, version)"
            " VALUES (?, 'open', '{}', 0)",
            (record_id,),
        )
        if method == "close_case":
            conn.execute(
                "UPDATE records SET status = 'closed', resolution = ?, closed_by = ?,"
                " closed_at = ?, version = version + 1, updated_by = ? WHERE id = ?",
                (payload["resolution"], key, now, key, record_id),
            )
            version = conn.execute("SELECT version FROM records WHERE id = ?", (record_id,))
            return {
                "case_id": record_id,
                "status": "closed",
                "resolution": payload["resolution"],
                "version": version.fetchone()[0],
                "closed_by": key,
            }
        if method == "update":
            (fields_json,) = conn.execute(
                "SELECT fields FROM records WHERE id = ?", (record_id,)
            ).fetchone()
            fields = {**json.loads(fields_json), **payload["fields"]}
            conn.execute(
                "UPDATE records SET fields = ?, version = version + 1, updated_by = ? WHERE id = ?",
                (json.dumps(fields), key, record_id),
            )
            version = conn.execute("SELECT version FROM records WHERE id = ?", (record_id,))
            return {"id": record_id, "version": version.fetchone()[0], "fields": fields}
        raise self._unknown_method(method)


# --------------------------------------------------------------------------- mail


class FakeMail(FakeProvider):
    """A mail service: accepted is not delivered, and its Sent search lags.

    ``send`` answers ``{"message_id", "status": "accepted"}``. The message is
    delivered ``delivery_delay`` later on the clock (``None``: never;
    ``Fault.NEVER_DELIVER``: never, for one message). ``search`` sees a message
    only ``search_delay`` after it was accepted (eventually consistent); an
    empty search therefore proves nothing. ``get_message`` by id is strongly
    consistent. Idempotency keys behave as in :class:`FakeCRM`. The target of
    an effect is the recipient.

    Args:
        path: the provider's database file (``None``: in memory).
        clock: where time comes from.
        retention: how long idempotency keys are remembered.
        search_delay: how long after acceptance a message appears in ``search``.
        delivery_delay: how long after acceptance a message becomes ``delivered``.
    """

    name = "mail"
    _SCHEMA = (
        """CREATE TABLE IF NOT EXISTS messages (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            message_id TEXT UNIQUE,
            recipient TEXT NOT NULL,
            subject TEXT NOT NULL,
            body TEXT NOT NULL,
            idempotency_key TEXT,
            accepted_at INTEGER NOT NULL,
            visible_at INTEGER NOT NULL,
            delivered_at INTEGER)""",
    )

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        clock: Clock | None = None,
        retention: timedelta = timedelta(hours=24),
        search_delay: timedelta = timedelta(0),
        delivery_delay: timedelta | None = timedelta(0),
    ) -> None:
        super().__init__(path, clock=clock, retention=retention)
        self.search_delay = search_delay
        self.delivery_delay = delivery_delay

    def _init_kwargs(self) -> dict[str, Any]:
        return {
            **super()._init_kwargs(),
            "search_delay": self.search_delay,
            "delivery_delay": self.delivery_delay,
        }

    def send(
        self, to: str, subject: str, body: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Accept a message for delivery. Returns ``{"message_id", "status": "accepted"}``.

        Raises:
            ProviderTimeout: ambiguous: the message may or may not have been accepted.
            TransientProviderError: refused before acting.
            EffectRejected: refused definitively (rejected, revoked, key reused).
        """
        return self._effect_call(
            "send",
            target=to,
            payload={"to": to, "subject": subject, "body": body},
            idempotency_key=idempotency_key,
        )

    def get_message(self, message_id: str) -> dict[str, Any] | None:
        """Lookup by id: ``{"message_id", "to", "subject", "status", "idempotency_key"}`` or None.

        ``status`` is ``"accepted"`` until delivered, then ``"delivered"``.
        """
        rows = self._lookup("get_message", lambda conn, now: self._read(conn, now, message_id))
        return rows[0] if rows else None

    def delivery_status(self, message_id: str) -> str | None:
        """``"accepted"``, ``"delivered"``, or None for an unknown id."""
        message = self.get_message(message_id)
        return None if message is None else str(message["status"])

    def search(
        self,
        *,
        to: str | None = None,
        subject: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """The Sent folder: messages matching every given filter, *if already visible*."""
        rows: list[dict[str, Any]] = self._lookup(
            "search", lambda conn, now: self._read(conn, now, None, visible_only=True)
        )
        return [
            m
            for m in rows
            if (to is None or m["to"] == to)
            and (subject is None or m["subject"] == subject)
            and (idempotency_key is None or m["idempotency_key"] == idempotency_key)
        ]

    def _read(
        self,
        conn: sqlite3.Connection,
        now: int,
        message_id: str | None,
        *,
        visible_only: bool = False,
    ) -> list[dict[str, Any]]:
        rows = conn.execute(
            "SELECT message_id, recipient, subject, idempotency_key, delivered_at, visible_at"
            " FROM messages WHERE (? IS NULL OR message_id = ?) ORDER BY seq",
            (message_id, message_id),
        ).fetchall()
        return [
            {
                "message_id": r[0],
                "to": r[1],
                "subject": r[2],
                "idempotency_key": r[3],
                "status": "delivered" if r[4] is not None and r[4] <= now else "accepted",
            }
            for r in rows
            if not visible_only or r[5] <= now
        ]

    def _act(
        self,
        conn: sqlite3.Connection,
        method: str,
        payload: dict[str, Any],
        key: str | None,
        now: int,
        fault: Fault,
    ) -> dict[str, Any]:
        if method != "send":
            raise self._unknown_method(method)
        delivered_at = (
            None
            if self.delivery_delay is None or fault is Fault.NEVER_DELIVER
            else now + self.delivery_delay // _MICRO
        )
        cur = conn.execute(
            "INSERT INTO messages (recipient, subject, body, idempotency_key, accepted_at,"
            " visible_at, delivered_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                payload["to"],
                payload["subject"],
                payload["body"],
                key,
                now,
                now + self.search_delay // _MICRO,
                delivered_at,
            ),
        )
        message_id = f"msg-{cur.lastrowid:06d}"
        conn.execute(
            "UPDATE messages SET message_id = ? WHERE seq = ?", (message_id, cur.lastrowid)
        )
        return {"message_id": message_id, "status": "accepted"}


# --------------------------------------------------------------------------- ticketing


class FakeTicketing(FakeProvider):
    """A ticketing system with NO idempotency key and NO lookup: the dangerous case.

    Every ``create_ticket`` that reaches it creates a ticket, resends included;
    after a lost response nothing can tell the caller whether it acted. The
    target of an effect is the ticket title.
    """

    name = "ticketing"
    _SCHEMA = (
        """CREATE TABLE IF NOT EXISTS tickets (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            title TEXT NOT NULL,
            body TEXT NOT NULL,
            created_at INTEGER NOT NULL)""",
    )

    def create_ticket(self, title: str, body: str) -> dict[str, Any]:
        """Create a ticket. Returns ``{"ticket_id"}``.

        Raises:
            ProviderTimeout: ambiguous, and nothing can resolve it but a person.
            TransientProviderError: refused before acting.
            EffectRejected: refused definitively.
        """
        return self._effect_call(
            "create_ticket",
            target=title,
            payload={"title": title, "body": body},
            idempotency_key=None,
        )

    def _act(
        self,
        conn: sqlite3.Connection,
        method: str,
        payload: dict[str, Any],
        key: str | None,
        now: int,
        fault: Fault,
    ) -> dict[str, Any]:
        if method != "create_ticket":
            raise self._unknown_method(method)
        cur = conn.execute(
            "INSERT INTO tickets (title, body, created_at) VALUES (?, ?, ?)",
            (payload["title"], payload["body"], now),
        )
        return {"ticket_id": f"T-{cur.lastrowid:06d}"}


# --------------------------------------------------------------------------- presets


_KEY_REUSED = {
    # developer.zendesk.com/api-reference/ticketing/introduction/#idempotency: "Request
    # parameters don't match the given idempotency key" (zendesk-java-client: a 400).
    "zendesk": (400, "IdempotentRequestError"),
}
"""The HTTP status and error name of another payload under a key, where it is not Stripe's 422."""


class FakeAPI(FakeProvider):
    """The API a ``langgraph_effects.presets.Preset`` describes, as its documentation says.

    * Keyed presets (Stripe, PayPal, Adyen, Square, Zendesk): ``create`` deduplicates by
      ``idempotency_key`` for ``retention`` (default: the preset's window): the first
      response is replayed, and a definitive error too (``Fault.REJECT``, Stripe's
      "errors included"); another payload under the key is
      ``EffectRejected(code="idempotency_key_reused")`` (its ``detail`` the API's status:
      Zendesk's 400 ``IdempotentRequestError``, else 422); a resend while the first
      request is in flight (``Fault.LATE``) is a ``TransientProviderError`` (409); after
      the window the key is forgotten and a resend acts again.
    * Convergent presets (Salesforce, HubSpot): ``upsert(natural_key, fields)`` with the
      fields already stored changes nothing (no effect, a replay); other fields act.
    * Presets without a key (mail, GitHub, Slack): every ``create`` that arrives acts,
      resends included; a key given is ignored, as those APIs ignore it.

    ``search(marker)`` returns the objects whose payload carries ``marker``, each only
    ``search_delay`` after it was created (search indexes lag); ``get(id)`` is
    consistent. The target of an effect is the ``target`` (or natural key) given.
    """

    name = "api"
    _SCHEMA = (
        """CREATE TABLE IF NOT EXISTS objects (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            object_id TEXT UNIQUE,
            target TEXT NOT NULL,
            payload TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            visible_at INTEGER NOT NULL)""",
        """CREATE TABLE IF NOT EXISTS key_errors (
            key TEXT PRIMARY KEY,
            payload_digest TEXT NOT NULL,
            reason TEXT NOT NULL,
            code TEXT NOT NULL,
            stored_at INTEGER NOT NULL)""",
    )

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        preset: Any,
        clock: Clock | None = None,
        retention: timedelta | None = None,
        search_delay: timedelta = timedelta(0),
    ) -> None:
        window = None if preset.contract is None else preset.contract.idempotency_window
        super().__init__(path, clock=clock, retention=retention or window or timedelta(hours=3))
        self.preset = preset
        self.name = preset.name  # type: ignore[misc]
        self.search_delay = search_delay

    def _init_kwargs(self) -> dict[str, Any]:
        return {**super()._init_kwargs(), "preset": self.preset, "search_delay": self.search_delay}

    def _key_reused(self, method: str, key: str) -> EffectRejected:
        """The refusal of another payload under a stored key, as the preset's API answers it."""
        refused = super()._key_reused(method, key)
        answer = _KEY_REUSED.get(self.preset.name)
        if answer is not None:
            refused.detail = {"status": answer[0], "error": answer[1]}
        return refused

    def create(
        self, target: str, payload: dict[str, Any], *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Create an object. Returns ``{"id", "target", "status": "created"}``.

        Raises:
            ProviderTimeout: ambiguous: the object may or may not exist.
            TransientProviderError: refused before acting (or the key is in flight: 409).
            EffectRejected: refused definitively (replayed under its key when keyed).
        """
        key = idempotency_key if self.preset.key is not None else None
        body = {"target": target, **payload}
        digest = hashlib.sha256(canonical_json(["create", target, body])).hexdigest()
        if key is not None:
            self._replay_error(key, digest)
        try:
            return self._effect_call("create", target=target, payload=body, idempotency_key=key)
        except EffectRejected as exc:
            if key is not None and exc.code not in (
                "idempotency_key_reused",
                "authorization_revoked",
            ):
                with self._session() as (conn, now):
                    conn.execute(
                        "INSERT OR REPLACE INTO key_errors VALUES (?, ?, ?, ?, ?)",
                        (key, digest, str(exc), exc.code or "rejected", now),
                    )
            raise

    def upsert(self, natural_key: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Create or update the record ``natural_key``. Returns ``{"id", "target", "status"}``.

        The same fields again change nothing (``status: "unchanged"``, no effect).
        """
        with self._session() as (conn, _):
            row = conn.execute(
                "SELECT object_id, payload FROM objects WHERE target = ? ORDER BY seq DESC",
                (natural_key,),
            ).fetchone()
            if row is not None and json.loads(row[1]) == {"target": natural_key, **fields}:
                self._bump(conn, "requests")
                self._bump(conn, "replays")
                return {"id": row[0], "target": natural_key, "status": "unchanged"}
        return self._effect_call(
            "upsert",
            target=natural_key,
            payload={"target": natural_key, **fields},
            idempotency_key=None,
        )

    def search(self, marker: str) -> list[dict[str, Any]]:
        """The objects carrying ``marker`` in their payload, once visible (``search_delay``)."""
        rows: list[dict[str, Any]] = self._lookup(
            "search", lambda conn, now: self._objects(conn, now, visible_only=True)
        )
        return [o for o in rows if marker in json.dumps(o["payload"])]

    def get(self, object_id: str) -> dict[str, Any] | None:
        """The object ``object_id`` (consistent), or None."""
        rows: list[dict[str, Any]] = self._lookup(
            "get", lambda conn, now: self._objects(conn, now, visible_only=False)
        )
        return next((o for o in rows if o["id"] == object_id), None)

    def _replay_error(self, key: str, digest: str) -> None:
        with self._session() as (conn, now):
            row = conn.execute(
                "SELECT payload_digest, reason, code FROM key_errors"
                " WHERE key = ? AND stored_at > ?",
                (key, now - self.retention // _MICRO),
            ).fetchone()
            if row is not None and row[0] == digest:
                self._bump(conn, "requests")
                self._bump(conn, "replays")
        if row is not None and row[0] == digest:
            raise EffectRejected(row[1], code=row[2])

    def _objects(
        self, conn: sqlite3.Connection, now: int, *, visible_only: bool
    ) -> list[dict[str, Any]]:
        rows = conn.execute(
            "SELECT object_id, target, payload, visible_at FROM objects ORDER BY seq"
        ).fetchall()
        return [
            {"id": r[0], "target": r[1], "payload": json.loads(r[2])}
            for r in rows
            if not visible_only or r[3] <= now
        ]

    def _act(
        self,
        conn: sqlite3.Connection,
        method: str,
        payload: dict[str, Any],
        key: str | None,
        now: int,
        fault: Fault,
    ) -> dict[str, Any]:
        if method not in ("create", "upsert"):
            raise self._unknown_method(method)
        target = payload["target"]
        if method == "upsert":
            row = conn.execute(
                "SELECT object_id FROM objects WHERE target = ?", (target,)
            ).fetchone()
            if row is not None:
                conn.execute(
                    "UPDATE objects SET payload = ? WHERE object_id = ?",
                    (json.dumps(payload), row[0]),
                )
                return {"id": row[0], "target": target, "status": "updated"}
        cur = conn.execute(
            "INSERT INTO objects (target, payload, created_at, visible_at) VALUES (?, ?, ?, ?)",
            (target, json.dumps(payload), now, now + self.search_delay // _MICRO),
        )
        object_id = f"{self.preset.name}-{cur.lastrowid:06d}"
        conn.execute("UPDATE objects SET object_id = ? WHERE seq = ?", (object_id, cur.lastrowid))
        return {"id": object_id, "target": target, "status": "created"}
