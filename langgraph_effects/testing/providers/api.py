"""``FakeAPI``: a provider that follows a preset's documented idempotency contract."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

from langgraph_effects.core.digest import canonical_json
from langgraph_effects.errors import EffectRejected
from langgraph_effects.testing.providers.base import FakeProvider
from langgraph_effects.testing.providers.clocks import _MICRO, Clock
from langgraph_effects.testing.providers.faults import Fault

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
