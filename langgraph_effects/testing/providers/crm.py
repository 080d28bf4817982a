"""``FakeCRM``: cases closed and updated, under an idempotency key or not."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from langgraph_effects.testing.providers.base import FakeProvider
from langgraph_effects.testing.providers.clocks import _from_us
from langgraph_effects.testing.providers.faults import Fault

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
