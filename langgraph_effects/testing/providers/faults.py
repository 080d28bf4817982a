"""The faults a fake provider is scripted with, and the queue that hands them out."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from langgraph_effects.testing.faults import CRASH_EXIT_CODE
from langgraph_effects.testing.providers.clocks import _MICRO, _seconds
from langgraph_effects.testing.providers.store import _Database

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
