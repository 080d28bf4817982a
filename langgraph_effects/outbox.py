"""Notifications through a transactional outbox (ARCHITECTURE.md, "Where each rule lives").

Where the application owns its database, the business change and the
intention to notify commit together, in the application's own transaction::

    with conn:                                    # the application's transaction
        conn.execute("UPDATE cases SET status = 'closed' WHERE id = ?", (case_id,))
        outbox.enqueue(conn, topic="case.closed", key=case_id, payload={...})
    # rolled back -> no notification; committed -> exactly one, later

``Outbox.enqueue`` only executes an INSERT on the caller's connection: it
never commits, never opens a second transaction, never touches the ledger.

A relay (``OutboxRelay``) delivers the entries later, from its own connection.
Each entry becomes an operation of its own in the ledger (operation id
derived from the entry id, its own idempotency key, its own evidence), decided
by the decision engine that decides every tool call (``decide``), so the same
rules apply: a receipt is saved at once; a lost receipt makes the operation
``unknown``, then it is reconciled, retried under the provider's idempotency
key while that is safe, or left for review; a receipt that arrives after a
takeover is kept and settles what it may. The relay's policy
(``decide.Policy.returning``) is never to hold: where a graph would ask a
person, wait for another worker's lease or sleep before a resend, the relay
settles the entry and looks again later. Accepted by the provider is not
delivered: the record keeps which one it knows. A pass is one generator of the
engine's actions (the relay's table work is a ``Hook``, each delivery the
decision loop itself), driven by the engine's own drivers: ``run_once`` (a
sync ``Ledger``) or ``arun_once`` (an ``AsyncLedger``).

Two fences, two purposes::

    relay A  claim entry (token 4) ─ prepare+claim op (fence 1) ─ send ─ confirm ─ settle(4)
    relay B      claim entry after A's entry lease expired (token 5) ─ op dispatching,
                 its lease alive -> wait, never send

The entry lease keeps relays from working on the same entry (efficiency);
the ledger's lease and fencing token decide who may dispatch (correctness).
A relay that lost its entry lease cannot settle the entry (token mismatch);
the next relay reads the ledger and settles it from there.

Entry states: ``pending`` (work to do), ``review`` (its operation is
``unknown`` and nothing resolved it: reconciled again every
``review_recheck``, and an operator's resolution in the ledger is picked up
there), ``sent`` (the provider acknowledged it: ``receipt_state`` says
``accepted`` or ``delivered``), ``dead`` (a definitive rejection, conclusive
evidence that it was not sent, or ``max_failures`` failures that provably did
not deliver). Nothing is compensated automatically: a dead entry stays dead
until a person enqueues something else.

After "accepted": the provider's later word that a message was delivered
arrives as a webhook (``Outbox.mark_delivered``) or from a status check
(``OutboxRelay.check_deliveries``, fenced like a delivery pass). Each is an
event in ``lge_outbox_events``, idempotent per evidence id, and raises the
entry's ``receipt_state`` to ``delivered``, never back.

Ordering (``ordered=True`` at enqueue): an entry is not claimed while an
earlier entry (lower ``seq``) of the same tenant, topic and key is still
``pending`` or ``review``; ``sent`` and ``dead`` entries do not block. ``seq``
is allocation order: when two transactions enqueue for one key concurrently
without a lock in common, PostgreSQL may commit them out of ``seq`` order.
Lock the business row (the usual case: both update the same case) to keep
commit order and ``seq`` order the same.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import inspect
import json
import logging
import sqlite3
import threading
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from langgraph_effects._owners import current_owner, provably_dead
from langgraph_effects.core.digest import canonical_json, payload_digest
from langgraph_effects.core.ids import idempotency_key, intent_operation_id
from langgraph_effects.core.model import (
    Evidence,
    LeaseOwner,
    Operation,
    OperationDraft,
    OperationStatus,
    ProviderContract,
    key_retention_seconds,
    utcnow,
)
from langgraph_effects.core.plan import Outcome, backoff_delay, classify
from langgraph_effects.core.storable import storable_text
from langgraph_effects.decide import EffectCall, EffectRunner, Policy, ProviderResult
from langgraph_effects.decide.actions import Action, Hook, Reject, ledger
from langgraph_effects.effects import EffectContext, EffectSpec, arun_body, run_body
from langgraph_effects.errors import (
    InvalidInput,
    LedgerNotSetUp,
    LedgerUnavailable,
    PayloadMismatch,
    StaleFencingToken,
)
from langgraph_effects.ledger._statements import (
    Dialect,
    Program,
    Result,
    Row,
    Rows,
    Statement,
    Statements,
    migrate,
    single,
)
from langgraph_effects.ledger._tables import Backend, Tables
from langgraph_effects.ledger.base import AsyncLedger, Ledger
from langgraph_effects.ledger.connect import parse_ledger_url

__all__ = [
    "Delivery",
    "Outbox",
    "OutboxEntry",
    "OutboxEvent",
    "OutboxRelay",
    "OutboxStatus",
    "Receipt",
    "RelayReport",
]

logger = logging.getLogger("langgraph_effects.outbox")

JSON = Any
T = TypeVar("T")


class OutboxStatus(StrEnum):
    """Where an outbox entry stands (the ledger's operation holds the evidence)."""

    PENDING = "pending"
    REVIEW = "review"
    SENT = "sent"
    DEAD = "dead"


class OutboxEntry(BaseModel):
    """One row of ``lge_outbox``."""

    model_config = ConfigDict(frozen=True)

    seq: int
    entry_id: str
    tenant_id: str
    topic: str
    key: str | None
    ordered: bool
    payload: JSON
    payload_digest: str
    operation_id: str
    status: OutboxStatus
    failures: int
    available_at: datetime
    lease_owner: str | None
    lease_expires_at: datetime | None
    fencing_token: int
    receipt_state: str | None
    """``accepted`` or ``delivered``: what the provider's receipt (or evidence) said."""
    provider_message_id: str | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    resolved_at: datetime | None

    @property
    def action(self) -> str:
        return _action(self.topic)


def _action(topic: str) -> str:
    """The ledger action of an entry's delivery operation."""
    return f"outbox.{topic}"


class Receipt(BaseModel):
    """What a delivery function returns: the provider's acknowledgement.

    ``delivered=False`` (the default) means *accepted*: the provider took the
    message, which does not prove it reached an inbox.
    """

    model_config = ConfigDict(frozen=True)

    message_id: str
    delivered: bool = False
    detail: JSON = None

    @property
    def state(self) -> str:
        return "delivered" if self.delivered else "accepted"


class OutboxEvent(BaseModel):
    """Delivery evidence recorded for an entry after the provider accepted it.

    One row per (entry, ``evidence_id``): the same webhook delivered twice is
    one event. ``source`` says where it came from (``"webhook"``,
    ``"status_check"``); ``detail`` holds small facts (ids, timestamps), never bodies.
    """

    model_config = ConfigDict(frozen=True)

    entry_id: str
    evidence_id: str
    kind: str
    """``delivered``: the provider says the message reached its destination."""
    source: str
    message_id: str | None
    detail: JSON
    at: datetime


MAX_EVENT_DETAIL_BYTES = 4096
DELIVERED = "delivered"


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """What the delivery function is given: the entry and the stable key to send with it."""

    entry: OutboxEntry
    operation_id: str
    idempotency_key: str
    """Send this to the provider: stable across retries, relays and processes."""
    attempt: int


@dataclass(slots=True)
class RelayReport:
    """What one relay pass did (counts of entries)."""

    claimed: int = 0
    sent: int = 0
    review: int = 0
    dead: int = 0
    deferred: int = 0
    """Left pending: another live relay is dispatching it, or a transient failure backs off."""
    lost_lease: int = 0
    """Settles refused because another relay took the entry over (the ledger still decides)."""
    delivered: int = 0
    """Entries whose delivery a status check recorded (``check_deliveries``)."""

    def add(self, other: RelayReport) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def __str__(self) -> str:
        """For a person: the counts that are not zero, ``1 claimed, 1 sent``."""
        said = [f"{getattr(self, name)} {words}" for name, words in _REPORTED.items()]
        return ", ".join(s for s in said if not s.startswith("0 ")) or "nothing to relay"


_REPORTED = {
    "claimed": "claimed",
    "sent": "sent",
    "review": "left for review",
    "dead": "given up (dead)",
    "deferred": "deferred",
    "lost_lease": "taken over by another relay",
    "delivered": "delivery confirmed",
}
"""``RelayReport``'s counts in the words its ``str`` uses."""


# --------------------------------------------------------------------------- statements
# Programs of the statement engine (``ledger._statements``); the SQL of each
# backend is in ``ledger/sqlite/_outbox.py`` and ``ledger/postgres/_outbox.py``.

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


# --------------------------------------------------------------------------- Outbox


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


# --------------------------------------------------------------------------- relay

Deliver = Callable[[Delivery], "Receipt | str | Awaitable[Receipt | str]"]
Reconcile = Callable[[Operation], "Evidence | Awaitable[Evidence]"]
CheckDelivery = Callable[[OutboxEntry], "bool | Awaitable[bool]"]
"""Given a sent entry, True when the provider says its message was delivered."""

_ACTOR = "outbox-relay"

# A relay pass is a generator of the decision engine's actions, driven by the
# engine's own drivers (``EffectRunner.drive`` / ``adrive``): the relay's table
# work is a ``Hook`` (``_exec``), each delivery ``yield from`` the decision loop.
_Steps = Generator[Action, Any, T]


class _AwaitableDelivery(BaseException):
    """A sync pass's ``deliver`` returned an awaitable: stop before anything reads it.

    Not an ``Exception``: the engine records nothing and throws nothing back into
    the loop, so the operation stays ``dispatching``, as after a crash (a later
    run takes it over and reconciles). ``run_once`` raises ``InvalidInput``.
    """


def _received(answer: Receipt | str) -> ProviderResult:
    """A delivery's answer as the engine records it: the receipt, and the message id."""
    receipt = answer if isinstance(answer, Receipt) else Receipt(message_id=str(answer))
    result = {"message_id": receipt.message_id, "state": receipt.state, "detail": receipt.detail}
    return ProviderResult(result, provider_result_id=receipt.message_id)


def _backoff(contract: ProviderContract | None, failures: int, retry_after: float | None) -> float:
    """Seconds an entry waits after its ``failures``-th transient refusal.

    The engine's exponential (``core.plan.backoff_delay``), but not
    ``core.plan.backoff``'s limits: that one gives up when the wait would hold a
    worker; an entry waits in the table for free, so the provider's
    retry-after is always honoured and ``max_failures`` alone ends retries.
    """
    return max(backoff_delay(contract, failures - 1), retry_after or 0.0)


class OutboxRelay:
    """Deliver outbox entries, each as its own ledger operation. Run once, in a loop or a thread.

    Each entry's delivery is decided by the decision engine (``decide``), with
    the rules every effect follows; the relay's policy is never to hold: an
    unknown outcome nothing resolves settles the entry ``review``, another
    relay's live lease ``pending`` until it ends, a transient refusal
    ``pending`` with backoff (``dead`` after ``max_failures``).

    ``run_once`` / ``run_until_idle`` / ``run`` take a sync ``Ledger`` and sync
    callables; ``arun_once`` / ``arun_until_idle`` take an ``AsyncLedger`` (or a
    sync one) and sync or async callables. Both follow the same steps; the
    async driver runs the relay's own short outbox statements, a sync ledger
    and sync callables in a worker thread (``asyncio.to_thread``).

    Args:
        conn: a connection to the application's database that this relay owns
            (``sqlite3`` in autocommit mode, ``isolation_level=None``, and
            ``check_same_thread=False`` for the async driver; or psycopg with
            ``autocommit=True``); each claim and settle is one statement,
            committed at once. ``from_conn_string`` opens one.
        ledger: where delivery operations are recorded (may live elsewhere).
        deliver: the provider call. Given a ``Delivery``; returns a ``Receipt``
            (or a message id, read as *accepted*). Raise ``EffectRejected`` for a
            definitive refusal, ``TransientProviderError`` when provably nothing
            was sent; anything else is ambiguous and makes the operation unknown.
        reconcile: given the ``Operation``, return conclusive or inconclusive
            ``Evidence`` of what the provider did (look the idempotency key up).
        contract: the provider's idempotency contract: while its window is open
            an unknown delivery is resent under the same key.
        tenant_id: only this tenant's entries (None: all).
        provider: recorded on each operation.
        lease_for: entry lease and ledger lease length.
        batch_size: entries claimed per pass.
        max_failures: failures that provably did not deliver (transient
            refusals) before an entry goes to ``dead``.
        review_recheck: how often an entry under review is reconciled again.
        clock: the time source (tests inject one).
    """

    def __init__(
        self,
        conn: Any,
        *,
        ledger: Ledger | AsyncLedger,
        deliver: Deliver,
        reconcile: Reconcile | None = None,
        contract: ProviderContract | None = None,
        tenant_id: str | None = None,
        provider: str | None = None,
        lease_for: timedelta = timedelta(seconds=30),
        batch_size: int = 20,
        max_failures: int = 5,
        review_recheck: timedelta = timedelta(minutes=1),
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        if max_failures < 1:
            raise InvalidInput("max_failures must be at least 1")
        self.conn = conn
        self._tables = Tables.on(conn, "outbox")
        self.ledger = ledger
        self.deliver = deliver
        self.reconcile = reconcile
        self.contract = contract
        self.tenant_id = tenant_id
        self.provider = provider
        self.lease_for = lease_for
        self.batch_size = batch_size
        self.max_failures = max_failures
        self.review_recheck = review_recheck
        self.clock = clock
        self.owner = current_owner()
        self.totals = RelayReport()
        self._runner = EffectRunner(
            ledger, lease_for=lease_for, clock=clock, policy=Policy.returning()
        )
        self._working: dict[str, OutboxEntry] = {}
        """The entry being delivered, by operation id (what ``deliver`` is given)."""
        self._refusals: dict[str, Exception] = {}
        """This pass's refusals that provably sent nothing, by operation id."""

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str | Path, **kwargs: Any) -> Iterator[OutboxRelay]:
        """Open the relay's own connection on the database a ledger URL names
        (``ledger.connect.parse_ledger_url``: a SQLite path or ``sqlite:///`` URL, or a
        ``postgresql://`` URL).

        Raises:
            InvalidInput: the URL is malformed or names an unsupported scheme.
        """
        location = parse_ledger_url(str(conn_string))
        if location.backend == "postgres":
            import psycopg

            with psycopg.connect(location.target, autocommit=True) as pg:
                yield cls(pg, **kwargs)
            return
        conn = sqlite3.connect(
            location.target, isolation_level=None, timeout=30.0, check_same_thread=False
        )
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            yield cls(conn, **kwargs)
        finally:
            conn.close()

    # -- drivers (the engine's) -------------------------------------------------

    def run_once(self) -> RelayReport:
        """Claim a batch of due entries and take each as far as it can go now."""
        return self._drive(self._passes(1))

    def run_until_idle(self, *, max_passes: int = 1000) -> RelayReport:
        """Run passes until one claims nothing (entries backing off are not due)."""
        return self._drive(self._passes(max_passes))

    def run(self, stop: threading.Event, *, interval: float = 1.0) -> None:
        """Loop until ``stop`` is set, sleeping ``interval`` s when idle (run it in a thread)."""
        while not stop.is_set():
            if self.run_once().claimed == 0:
                stop.wait(interval)

    async def arun_once(self) -> RelayReport:
        """``run_once`` for an async ledger and async ``deliver`` / ``reconcile``."""
        return await self._runner.adrive(self._passes(1), self._aexecute)

    async def arun_until_idle(self, *, max_passes: int = 1000) -> RelayReport:
        """``run_until_idle`` for an async ledger and async ``deliver`` / ``reconcile``."""
        return await self._runner.adrive(self._passes(max_passes), self._aexecute)

    def _drive(self, steps: _Steps[T]) -> T:
        if inspect.iscoroutinefunction(getattr(self.ledger, "prepare", None)) or any(
            inspect.iscoroutinefunction(fn) for fn in (self.deliver, self.reconcile)
        ):
            raise InvalidInput("this relay has an async ledger or callable: use arun_once")
        try:
            return self._runner.drive(steps, self._execute)
        except _AwaitableDelivery:
            raise InvalidInput("a callable returned an awaitable: use arun_once") from None

    # -- database -------------------------------------------------------------

    def _exec(self, program: Program[T]) -> T:
        # commit: a no-op in autocommit mode; ends a legacy implicit transaction.
        return self._tables.run(program, commit=True)

    # -- passes ---------------------------------------------------------------

    def _passes(self, max_passes: int) -> _Steps[RelayReport]:
        """Up to ``max_passes`` passes, stopping after one that claims nothing."""
        total = RelayReport()
        for _ in range(max_passes):
            report = RelayReport()
            entries = yield from self._claim(self.clock())
            report.claimed = len(entries)
            for entry in entries:
                try:
                    yield from self._work(entry, report)
                except (LedgerUnavailable, LedgerNotSetUp):
                    raise  # no entry can move: the pass stops, nothing is misfiled
                except Exception as exc:
                    # A poison entry (a hook or a value that fails every time) goes to
                    # review with the error, and never starves the entries after it.
                    logger.warning("outbox entry %s sent to review", entry.seq, exc_info=True)
                    yield from self._settle(
                        entry,
                        OutboxStatus.REVIEW,
                        report,
                        available_at=self.clock() + self.review_recheck,
                        error=storable_text(
                            f"the relay failed on this entry: {type(exc).__name__}: {exc}"[:2000]
                        ),
                    )
            self.totals.add(report)
            total.add(report)
            if report.claimed == 0:
                break
        return total

    def _claim(self, now: datetime) -> _Steps[list[OutboxEntry]]:
        claimed: list[OutboxEntry] = yield Hook(
            self._exec,
            _claim_batch(
                self._tables.dialect,
                "claim",
                owner=self.owner,
                now=now,
                lease_for=self.lease_for,
                tenant_id=self.tenant_id,
                limit=self.batch_size,
            ),
        )
        claimed += yield from self._take_over_dead(now, self.batch_size - len(claimed))
        return sorted(claimed, key=lambda e: e.seq)

    def _take_over_dead(self, now: datetime, limit: int) -> _Steps[list[OutboxEntry]]:
        """Claim entries whose lease owner is provably dead, without waiting for expiry."""
        if limit <= 0:
            return []
        taken: list[OutboxEntry] = []
        for row in (yield Hook(self._exec, _leased(self._tables.dialect, now, limit))):
            owner = LeaseOwner.decode(row["lease_owner"]) if row["lease_owner"] else None
            if owner is None or owner == self.owner or not provably_dead(owner):
                continue
            taken += yield Hook(
                self._exec,
                _take_over(
                    self._tables.dialect,
                    seq=row["seq"],
                    token=row["fencing_token"],
                    owner=self.owner,
                    now=now,
                    lease_for=self.lease_for,
                ),
            )
        return taken

    def _settle(
        self,
        entry: OutboxEntry,
        status: OutboxStatus,
        report: RelayReport,
        *,
        failures: int | None = None,
        available_at: datetime | None = None,
        error: str | None = None,
        op: Operation | None = None,
    ) -> _Steps[None]:
        now = self.clock()
        receipt_state = message_id = None
        if status is OutboxStatus.SENT and op is not None:
            result = op.result if isinstance(op.result, dict) else {}
            receipt_state = DELIVERED if result.get("state") == DELIVERED else "accepted"
            message_id = op.provider_result_id
        settled = yield Hook(
            self._exec,
            _fenced_write(
                self._tables.dialect,
                "settle",
                {
                    "status": status.value,
                    "failures": entry.failures if failures is None else failures,
                    "available_at": available_at or now,
                    "receipt_state": receipt_state,
                    "provider_message_id": message_id,
                    "last_error": error if error is not None else (op.error if op else None),
                    "now": now,
                    "resolved_at": now if status in _RESOLVED else None,
                    "seq": entry.seq,
                    "token": entry.fencing_token,
                },
            ),
        )
        if not settled:
            report.lost_lease += 1
            return
        match status:
            case OutboxStatus.SENT:
                report.sent += 1
            case OutboxStatus.DEAD:
                report.dead += 1
            case OutboxStatus.REVIEW:
                report.review += 1
            case OutboxStatus.PENDING:
                report.deferred += 1

    # -- one entry: the engine decides, the entry follows the record --------------

    def _call(self, entry: OutboxEntry) -> EffectCall:
        """The entry as one call of the decision engine: its own operation and key."""
        draft = OperationDraft(
            tenant_id=entry.tenant_id,
            operation_id=entry.operation_id,
            workflow_id=f"outbox:{entry.entry_id}",
            action=entry.action,
            target=entry.key,
            payload_digest=entry.payload_digest,
            payload=entry.payload,
            provider=self.provider,
            idempotency_key=idempotency_key(entry.operation_id),
            key_retention_seconds=key_retention_seconds(self.contract),
        )
        spec = EffectSpec(action=entry.action, contract=self.contract, reconcile=self.reconcile)
        payload = entry.payload
        return EffectCall.of_draft(
            spec, draft, args=payload if isinstance(payload, dict) else {"payload": payload}
        )

    def _work(self, entry: OutboxEntry, report: RelayReport) -> _Steps[None]:
        """Decide the entry's operation with the engine, then settle the entry from the record."""
        op_id = entry.operation_id
        self._working[op_id] = entry
        try:
            op = yield from self._runner.loop.decide(self._call(entry), None, self.owner)
        finally:
            del self._working[op_id]
            refusal = self._refusals.pop(op_id, None)
        now = self.clock()
        match op.status:
            case OperationStatus.CONFIRMED:
                yield from self._settle(entry, OutboxStatus.SENT, report, op=op)
            case OperationStatus.REJECTED:
                failures = entry.failures + (refusal is not None)
                yield from self._settle(entry, OutboxStatus.DEAD, report, failures=failures, op=op)
            case OperationStatus.UNKNOWN:
                # Nothing resolved it: reconciled again later; an operator may resolve it.
                yield from self._settle(
                    entry,
                    OutboxStatus.REVIEW,
                    report,
                    available_at=now + self.review_recheck,
                    error=op.error,
                )
            case OperationStatus.DISPATCHING:
                # Another relay's live lease: never send; look again after it ends.
                until = op.lease_expires_at or now + self.lease_for
                yield from self._settle(entry, OutboxStatus.PENDING, report, available_at=until)
            case OperationStatus.PREPARED:
                yield from self._transient(entry, op, refusal, report)

    def _transient(
        self, entry: OutboxEntry, op: Operation, refusal: Exception | None, report: RelayReport
    ) -> _Steps[None]:
        """A transient refusal released the operation: back off, or dead after ``max_failures``."""
        reason = f"{type(refusal).__name__}: {refusal}" if refusal else (op.error or "refused")
        failures = entry.failures + 1
        if failures >= self.max_failures:
            op = yield from ledger(
                Reject(
                    op.key,
                    token=None,
                    reason=f"dead-lettered after {failures} failures that provably sent "
                    f"nothing (last: {reason})",
                    actor=_ACTOR,
                )
            )
            yield from self._settle(entry, OutboxStatus.DEAD, report, failures=failures, op=op)
            return
        delay = _backoff(self.contract, failures, getattr(refusal, "retry_after", None))
        yield from self._settle(
            entry,
            OutboxStatus.PENDING,
            report,
            failures=failures,
            available_at=self.clock() + timedelta(seconds=delay),
            error=reason,
        )

    # -- the delivery, as the engine dispatches it ---------------------------------

    def _delivery(self, ctx: EffectContext) -> Delivery:
        return Delivery(
            entry=self._working[ctx.operation_id],
            operation_id=ctx.operation_id,
            idempotency_key=ctx.idempotency_key,
            attempt=ctx.attempt,
        )

    def _refused(self, ctx: EffectContext, exc: Exception) -> None:
        if classify(exc) is not Outcome.AMBIGUOUS:
            self._refusals[ctx.operation_id] = exc

    def _execute(self, args: dict[str, Any]) -> Any:
        return run_body(self._send)

    def _send(self, ctx: EffectContext) -> ProviderResult:
        try:
            answer = self.deliver(self._delivery(ctx))
        except Exception as exc:
            self._refused(ctx, exc)
            raise
        if inspect.isawaitable(answer):  # never read an unrun coroutine as a receipt
            getattr(answer, "close", lambda: None)()
            raise _AwaitableDelivery
        return _received(answer)

    async def _aexecute(self, args: dict[str, Any]) -> Any:
        return await arun_body(self._asend)

    async def _asend(self, ctx: EffectContext) -> ProviderResult:
        delivery = self._delivery(ctx)
        deliver: Callable[[Delivery], Any] = self.deliver
        try:
            if inspect.iscoroutinefunction(deliver):
                answer = deliver(delivery)
            else:  # a sync provider call never blocks the event loop
                answer = await asyncio.to_thread(deliver, delivery)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:
            self._refused(ctx, exc)
            raise
        return _received(answer)

    # -- after "accepted": delivery status checks --------------------------------

    def check_deliveries(
        self,
        check: CheckDelivery,
        *,
        recheck: timedelta = timedelta(minutes=5),
        give_up_after: timedelta = timedelta(days=3),
    ) -> RelayReport:
        """Ask the provider about sent entries still only *accepted*; record deliveries.

        Claims a batch of due entries (a lease and a new fencing token, as a
        delivery pass does), asks ``check(entry)`` for each, and records a
        ``delivered`` event (``source="status_check"``) where it answers True;
        otherwise the entry is checked again ``recheck`` later, until
        ``give_up_after`` past its sending. Every write is fenced: a relay whose
        claim was taken over records nothing (``lost_lease``). A failing check
        is no evidence either way. Webhooks use ``Outbox.mark_delivered``.

        Returns:
            ``claimed`` (entries checked), ``delivered``, ``deferred`` (still
            accepted) and ``lost_lease``.
        """
        return self._drive(self._check_pass(check, recheck, give_up_after))

    async def acheck_deliveries(
        self,
        check: CheckDelivery,
        *,
        recheck: timedelta = timedelta(minutes=5),
        give_up_after: timedelta = timedelta(days=3),
    ) -> RelayReport:
        """``check_deliveries`` with a sync or async ``check``."""
        return await self._runner.adrive(
            self._check_pass(check, recheck, give_up_after), self._aexecute
        )

    def _check_pass(
        self, check: CheckDelivery, recheck: timedelta, give_up_after: timedelta
    ) -> _Steps[RelayReport]:
        report = RelayReport()
        now = self.clock()
        dialect = self._tables.dialect
        claimed: list[OutboxEntry] = yield Hook(
            self._exec,
            _claim_batch(
                dialect,
                "claim_check",
                owner=self.owner,
                now=now,
                lease_for=self.lease_for,
                tenant_id=self.tenant_id,
                limit=self.batch_size,
                since=now - give_up_after,
            ),
        )
        report.claimed = len(claimed)
        for entry in claimed:
            try:
                delivered = bool((yield Hook(check, entry)))
            except Exception:  # a failed lookup is no evidence either way
                logger.warning("delivery check of %s failed", entry.entry_id, exc_info=True)
                delivered = False
            if delivered:
                program = _delivered(
                    dialect,
                    entry_id=entry.entry_id,
                    message_id=entry.provider_message_id,
                    evidence_id=f"status_check:{entry.provider_message_id or entry.entry_id}",
                    source="status_check",
                    detail=None,
                    token=entry.fencing_token,
                    now=self.clock(),
                )
                try:
                    yield Hook(self._exec, program)
                    report.delivered += 1
                except StaleFencingToken:
                    report.lost_lease += 1
                continue
            later = self.clock()
            released = yield Hook(
                self._exec,
                _fenced_write(
                    dialect,
                    "release_check",
                    {
                        "available_at": later + recheck,
                        "now": later,
                        "seq": entry.seq,
                        "token": entry.fencing_token,
                    },
                ),
            )
            if released:
                report.deferred += 1
            else:
                report.lost_lease += 1
        self.totals.add(report)
        return report
