"""``FakeTicketing``: tickets created."""

from __future__ import annotations

import sqlite3
from typing import Any

from langgraph_effects.testing.providers.base import FakeProvider
from langgraph_effects.testing.providers.faults import Fault

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
