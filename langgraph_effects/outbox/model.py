"""The outbox's values: an entry and its status, a receipt, an event, a delivery handed to the
provider, and a relay pass's report."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

JSON = Any


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
