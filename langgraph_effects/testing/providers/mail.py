"""``FakeMail``: messages sent, accepted and delivered."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

from langgraph_effects.testing.providers.base import FakeProvider
from langgraph_effects.testing.providers.clocks import _MICRO, Clock
from langgraph_effects.testing.providers.faults import Fault

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
