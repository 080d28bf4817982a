"""``FakeProvider``: the SQLite store every fake keeps, what it applied, and its counts."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, Self

from langgraph_effects.core.digest import canonical_json
from langgraph_effects.errors import EffectRejected, TransientProviderError
from langgraph_effects.testing.providers.clocks import _MICRO, Clock, SystemClock, _from_us, _to_us
from langgraph_effects.testing.providers.faults import (
    _NO_FAULT,
    Fault,
    FaultQueue,
    ProviderTimeout,
    _Scripted,
)
from langgraph_effects.testing.providers.store import _COMMON_SCHEMA, _Database

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
