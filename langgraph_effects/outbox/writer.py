"""``Outbox``, the write side: enqueue inside the application's transaction, mark delivered,
read entries and events."""

from __future__ import annotations

import builtins
import hashlib
import json
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from langgraph_effects.core.digest import canonical_json, payload_digest
from langgraph_effects.core.ids import intent_operation_id
from langgraph_effects.core.model import (
    utcnow,
)
from langgraph_effects.errors import (
    InvalidInput,
    PayloadMismatch,
)
from langgraph_effects.ledger.engine import (
    Dialect,
    Program,
    Result,
    Statement,
    Statements,
    migrate,
    single,
)
from langgraph_effects.ledger.engine.tables import Tables
from langgraph_effects.outbox.model import JSON, OutboxEntry, OutboxEvent, OutboxStatus, _action
from langgraph_effects.outbox.statements import (
    _delivered,
    _entry,
    _event,
    _require_open_transaction,
)


class Outbox:
    """The write side: enqueue notifications inside the application's transaction.

    Args:
        tenant_id: the default tenant of entries (the ledger scopes operations by it).
        clock: where ``created_at`` comes from (tests inject one).
    """

    def __init__(self, *, tenant_id: str = "default", clock: Callable[[], datetime] = utcnow):
        self.tenant_id = tenant_id
        self._clock = clock

    # -- setup ----------------------------------------------------------------

    def setup(self, conn: Any) -> None:
        """Create or migrate ``lge_outbox`` (idempotent, safe to run concurrently).

        Commits on ``conn``: call it outside your own transaction (sqlite3), or
        on a connection without an open transaction block (psycopg).
        """
        tables = Tables.on(conn, "outbox")
        if tables.backend == "sqlite" and conn.in_transaction:
            raise InvalidInput("Outbox.setup commits: call it outside an open transaction")
        tables.run(migrate(tables.dialect))  # BEGIN IMMEDIATE: one writer migrates at a time

    async def asetup(self, conn: Any) -> None:
        """``setup`` on a psycopg ``AsyncConnection``."""
        tables = Tables.on(conn, "outbox")
        await tables.arun(migrate(tables.dialect))

    # -- enqueue --------------------------------------------------------------

    def _enqueue(
        self,
        dialect: Dialect,
        *,
        topic: str,
        payload: JSON,
        key: str | None,
        dedupe_key: str | None,
        ordered: bool,
        tenant_id: str | None,
    ) -> Program[str]:
        """One INSERT (plus a read on a repeated dedupe key), run in the caller's transaction."""
        tenant = tenant_id or self.tenant_id
        if not topic.strip():
            raise InvalidInput("an outbox entry needs a topic")
        if ordered and key is None:
            raise InvalidInput("ordered=True needs a key: ordering is per key")
        if dedupe_key is None:
            entry_id = f"ob-{uuid.uuid4().hex}"
        else:
            # The same (tenant, topic, dedupe key) is the same entry, in any process.
            raw = hashlib.sha256(canonical_json([tenant, topic, dedupe_key])).hexdigest()
            entry_id = f"ob-{raw[:32]}"
        action = _action(topic)
        digest = payload_digest(action, 1, key, payload)
        values = {
            "entry_id": entry_id,
            "tenant_id": tenant,
            "topic": topic,
            "key": key,
            "ordered": ordered,
            "payload": json.dumps(payload),
            "payload_digest": digest,
            "operation_id": intent_operation_id(
                tenant_id=tenant, action=action, intent_key=entry_id
            ),
            "now": dialect.dump_ts(self._clock()),
        }

        def statements() -> Statements[Result[str]]:
            if not (yield Statement("insert_entry", values)):
                existing = yield Statement("get_entry", {"entry_id": entry_id})
                if existing[0]["payload_digest"] != digest:
                    raise PayloadMismatch(
                        entry_id, expected=existing[0]["payload_digest"], actual=digest
                    )
            return Result(entry_id)

        # Not atomic: it runs in the caller's open transaction and never commits.
        return Program(statements(), writes=True)

    def enqueue(
        self,
        conn: Any,
        *,
        topic: str,
        payload: JSON,
        key: str | None = None,
        dedupe_key: str | None = None,
        ordered: bool = False,
        tenant_id: str | None = None,
    ) -> str:
        """Add a notification inside the caller's open transaction; return its entry id.

        Executes one INSERT (plus a SELECT on a repeated ``dedupe_key``) on
        ``conn`` and never commits: the entry exists exactly when the caller's
        transaction commits.

        Args:
            conn: the application's ``sqlite3.Connection`` or ``psycopg.Connection``,
                inside the transaction that carries the business change.
            topic: what kind of notification (the operation's action is ``outbox.<topic>``).
            payload: JSON value given to the delivery function.
            key: the ordering key and the operation's target (the case, the recipient).
            dedupe_key: the same (tenant, topic, dedupe_key) enqueued again is the
                same entry; with another payload ``PayloadMismatch`` is raised.
            ordered: deliver after every earlier open entry of the same topic and key.
            tenant_id: overrides the outbox's default tenant.

        Raises:
            InvalidInput: the connection would commit the INSERT on its own
                (autocommit outside a transaction), or bad arguments.
            PayloadMismatch: ``dedupe_key`` reused with another payload.
        """
        tables = Tables.on(conn, "outbox")
        _require_open_transaction(conn, tables.backend)
        program = self._enqueue(
            tables.dialect,
            topic=topic,
            payload=payload,
            key=key,
            dedupe_key=dedupe_key,
            ordered=ordered,
            tenant_id=tenant_id,
        )
        return tables.run(program)

    async def aenqueue(
        self,
        conn: Any,
        *,
        topic: str,
        payload: JSON,
        key: str | None = None,
        dedupe_key: str | None = None,
        ordered: bool = False,
        tenant_id: str | None = None,
    ) -> str:
        """``enqueue`` on a psycopg ``AsyncConnection`` (inside its open transaction)."""
        tables = Tables.on(conn, "outbox")
        _require_open_transaction(conn, "postgres")
        program = self._enqueue(
            tables.dialect,
            topic=topic,
            payload=payload,
            key=key,
            dedupe_key=dedupe_key,
            ordered=ordered,
            tenant_id=tenant_id,
        )
        return await tables.arun(program)

    # -- queries --------------------------------------------------------------

    @staticmethod
    def get(conn: Any, entry_id: str) -> OutboxEntry | None:
        """Read one entry (any connection; no commit)."""
        tables = Tables.on(conn, "outbox")
        rows = tables.run(single("get_entry", {"entry_id": entry_id}))
        return _entry(tables.dialect, rows[0]) if rows else None

    @staticmethod
    def list(
        conn: Any,
        *,
        status: OutboxStatus | str | None = None,
        tenant_id: str | None = None,
        limit: int = 100,
    ) -> list[OutboxEntry]:
        """Entries in ``seq`` order, optionally of one status or tenant."""
        params = {
            "status": None if status is None else OutboxStatus(status).value,
            "tenant_id": tenant_id,
            "limit": limit,
        }
        tables = Tables.on(conn, "outbox")
        rows = tables.run(single("list_entries", params))
        return [_entry(tables.dialect, r) for r in rows]

    # -- delivery evidence ------------------------------------------------------

    def mark_delivered(
        self,
        conn: Any,
        *,
        evidence_id: str,
        entry_id: str | None = None,
        message_id: str | None = None,
        source: str = "webhook",
        detail: JSON = None,
        token: int | None = None,
    ) -> OutboxEntry | None:
        """Record the provider's word that an entry was delivered (a webhook, a status check).

        Idempotent per ``evidence_id`` (use the provider's event id): repeating it
        records nothing new; the same id with other content raises
        ``InvalidInput``. Out of order is fine: a webhook that arrives before
        the relay saved the receipt is kept, and the receipt never turns the
        entry back into ``accepted``. One transaction on ``conn``: the caller's
        if one is open, else its own, committed here.

        Args:
            conn: a ``sqlite3`` or psycopg connection to the application's database.
            evidence_id: the provider's id for this piece of evidence.
            entry_id: the entry (the application may pass it to the provider as
                metadata); or
            message_id: the provider's message id from the receipt (one entry's only:
                an id the receipts of several entries share raises ``InvalidInput``
                naming them, and nothing is recorded; pass ``entry_id`` then).
            source: where the evidence comes from.
            detail: small JSON facts (at most 4 KiB), never message bodies.
            token: the entry's fencing token when the caller claimed it (a
                status check): a stale token raises ``StaleFencingToken`` and
                nothing is written. Webhooks hold no claim and pass None.

        Returns:
            The entry as now recorded, or None when no entry matches (yet): a
            webhook naming a message id whose receipt is not saved yet; answer
            it so the provider retries, or identify entries by ``entry_id``.
        """
        tables = Tables.on(conn, "outbox")
        return tables.run(
            _delivered(
                tables.dialect,
                entry_id=entry_id,
                message_id=message_id,
                evidence_id=evidence_id,
                source=source,
                detail=detail,
                token=token,
                now=self._clock(),
            )
        )

    async def amark_delivered(
        self,
        conn: Any,
        *,
        evidence_id: str,
        entry_id: str | None = None,
        message_id: str | None = None,
        source: str = "webhook",
        detail: JSON = None,
        token: int | None = None,
    ) -> OutboxEntry | None:
        """``mark_delivered`` on a psycopg ``AsyncConnection``."""
        tables = Tables.on(conn, "outbox")
        return await tables.arun(
            _delivered(
                tables.dialect,
                entry_id=entry_id,
                message_id=message_id,
                evidence_id=evidence_id,
                source=source,
                detail=detail,
                token=token,
                now=self._clock(),
            )
        )

    @staticmethod
    def events(conn: Any, entry_id: str) -> builtins.list[OutboxEvent]:
        """The delivery evidence recorded for an entry, oldest first (any connection; no commit)."""
        tables = Tables.on(conn, "outbox")
        rows = tables.run(single("entry_events", {"entry_id": entry_id}))
        return [_event(tables.dialect, r) for r in rows]
