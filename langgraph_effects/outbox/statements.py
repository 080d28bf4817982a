"""The outbox table's programs for the statement engine (``ledger.engine``); the SQL of
each backend is in ``ledger/sqlite/_outbox.py`` and ``ledger/postgres/_outbox.py``."""

from __future__ import annotations

import builtins
import json
from datetime import datetime, timedelta
from typing import Any

from langgraph_effects.core.digest import canonical_json
from langgraph_effects.core.model import (
    LeaseOwner,
)
from langgraph_effects.errors import (
    InvalidInput,
    StaleFencingToken,
)
from langgraph_effects.ledger.engine import (
    Dialect,
    Program,
    Result,
    Row,
    Rows,
    Statement,
    Statements,
    single,
)
from langgraph_effects.ledger.engine.tables import Backend
from langgraph_effects.outbox.model import (
    DELIVERED,
    JSON,
    MAX_EVENT_DETAIL_BYTES,
    OutboxEntry,
    OutboxEvent,
    OutboxStatus,
)

_TS_FIELDS = ("available_at", "lease_expires_at", "created_at", "updated_at", "resolved_at")


def _require_open_transaction(conn: Any, backend: Backend) -> None:
    """Refuse to enqueue on a connection that would commit the INSERT on its own."""
    if backend == "sqlite":
        autocommit = getattr(conn, "autocommit", None) is True or conn.isolation_level is None
        if autocommit and not conn.in_transaction:
            raise InvalidInput(
                "enqueue needs the application's open transaction: this sqlite3 connection "
                "is in autocommit mode and no transaction is open (execute BEGIN first)"
            )
        return
    from psycopg.pq import TransactionStatus

    if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        raise InvalidInput(
            "enqueue needs the application's open transaction: this psycopg connection is in "
            "autocommit mode outside a transaction (use `with conn.transaction():`)"
        )


def _entry(dialect: Dialect, row: Row) -> OutboxEntry:
    values = {**row, "payload": json.loads(row["payload"]), "ordered": bool(row["ordered"])}
    for name in _TS_FIELDS:
        values[name] = dialect.load_ts(row[name])
    return OutboxEntry.model_validate(values)


def _entries(dialect: Dialect, rows: Rows) -> builtins.list[OutboxEntry]:
    return [_entry(dialect, r) for r in rows]


def _event(dialect: Dialect, row: Row) -> OutboxEvent:
    detail = None if row["detail"] is None else json.loads(row["detail"])
    return OutboxEvent.model_validate({**row, "detail": detail, "at": dialect.load_ts(row["at"])})


def _delivered(
    dialect: Dialect,
    *,
    entry_id: str | None,
    message_id: str | None,
    evidence_id: str,
    source: str,
    detail: JSON,
    token: int | None,
    now: datetime,
) -> Program[OutboxEntry | None]:
    """Raise the entry's receipt to ``delivered`` and record the evidence, in one transaction.

    The write comes first and is fenced when ``token`` is given, so a stale
    claim changes nothing; the event insert is idempotent per evidence id.
    """
    if entry_id is None and message_id is None:
        raise InvalidInput("mark_delivered needs entry_id or message_id")
    if not evidence_id.strip() or not source.strip():
        raise InvalidInput("mark_delivered needs a non-blank evidence_id and source")
    detail_text = None if detail is None else canonical_json(detail).decode()
    if detail_text is not None and len(detail_text) > MAX_EVENT_DETAIL_BYTES:
        raise InvalidInput(
            f"delivery detail is over {MAX_EVENT_DETAIL_BYTES} bytes: keep ids, not bodies"
        )
    at = dialect.dump_ts(now)

    def statements() -> Statements[Result[OutboxEntry | None]]:
        if entry_id is not None:
            rows = yield Statement("get_entry", {"entry_id": entry_id})
        else:
            rows = yield Statement("get_entry_by_message", {"message_id": message_id})
        if not rows:
            return Result(None)
        if len(rows) > 1:  # a message id two entries were given: marking one would be a guess
            named = ", ".join(repr(_entry(dialect, row).entry_id) for row in rows)
            raise InvalidInput(
                f"message {message_id!r} is the receipt of {len(rows)} entries ({named}): "
                "pass entry_id to say which one was delivered; nothing was recorded"
            )
        entry = _entry(dialect, rows[0])
        if message_id is not None and entry.provider_message_id not in (None, message_id):
            raise InvalidInput(
                f"entry {entry.entry_id!r} was sent as message {entry.provider_message_id!r}, "
                f"not {message_id!r}: this evidence is about another message"
            )
        if token is None:
            rows = yield Statement("mark_delivered", {"seq": entry.seq, "now": at})
        else:
            rows = yield Statement(
                "mark_delivered_fenced", {"seq": entry.seq, "token": token, "now": at}
            )
            if not rows:
                raise StaleFencingToken(entry.entry_id, token=token, current=entry.fencing_token)
        event = {
            "entry_id": entry.entry_id,
            "evidence_id": evidence_id,
            "kind": DELIVERED,
            "source": source,
            "message_id": message_id,
            "detail": detail_text,
        }
        if not (yield Statement("insert_event", {**event, "now": at})):
            (first,) = yield Statement(
                "get_event", {"entry_id": entry.entry_id, "evidence_id": evidence_id}
            )
            if {k: first[k] for k in event} != event:
                raise InvalidInput(
                    f"entry {entry.entry_id!r}: evidence {evidence_id!r} was already recorded "
                    "with other content"
                )
        return Result(_entry(dialect, rows[0]))

    return Program(statements(), writes=True, atomic=True)


def _claim_batch(
    dialect: Dialect,
    name: str,
    *,
    owner: LeaseOwner,
    now: datetime,
    lease_for: timedelta,
    tenant_id: str | None,
    limit: int,
    since: datetime | None = None,
) -> Program[builtins.list[OutboxEntry]]:
    """One conditional write leasing a batch (``claim``: due entries; ``claim_check``:
    sent entries still only accepted), each with a new fencing token; by ``seq``."""
    params = {
        "owner": owner.encode(),
        "lease_expires_at": dialect.dump_ts(now + lease_for),
        "now": dialect.dump_ts(now),
        "tenant_id": tenant_id,
        "limit": limit,
    }
    if since is not None:
        params["since"] = dialect.dump_ts(since)

    def statements() -> Statements[Result[builtins.list[OutboxEntry]]]:
        rows = yield Statement(name, params)
        return Result(sorted(_entries(dialect, rows), key=lambda e: e.seq))

    return Program(statements(), writes=True)


def _leased(dialect: Dialect, now: datetime, limit: int) -> Program[Rows]:
    """Entries whose lease is still running: ``seq``, ``lease_owner``, ``fencing_token``."""
    return single("leased", {"now": dialect.dump_ts(now), "limit": limit})


def _take_over(
    dialect: Dialect,
    *,
    seq: int,
    token: int,
    owner: LeaseOwner,
    now: datetime,
    lease_for: timedelta,
) -> Program[builtins.list[OutboxEntry]]:
    """Lease one entry from a dead owner, fenced by the token it was seen with."""
    params = {
        "owner": owner.encode(),
        "lease_expires_at": dialect.dump_ts(now + lease_for),
        "now": dialect.dump_ts(now),
        "seq": seq,
        "token": token,
    }

    def statements() -> Statements[Result[builtins.list[OutboxEntry]]]:
        rows = yield Statement("take_over", params)
        return Result(_entries(dialect, rows))

    return Program(statements(), writes=True)


_RESOLVED = frozenset({OutboxStatus.SENT, OutboxStatus.DEAD})
"""Settled into one of these, an entry gets ``resolved_at``."""


def _fenced_write(dialect: Dialect, name: str, values: dict[str, Any]) -> Program[bool]:
    """One write fenced by the entry's token (``settle``, ``release_check``): did it apply?
    Datetime values are stored in the dialect's format."""
    params = {k: dialect.dump_ts(v) if isinstance(v, datetime) else v for k, v in values.items()}

    def statements() -> Statements[Result[bool]]:
        rows = yield Statement(name, params)
        return Result(bool(rows))

    return Program(statements(), writes=True)
