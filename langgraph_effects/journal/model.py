"""The journal's values: a run's state and transitions, its events and snapshot, its figures."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from langgraph_effects.core.digest import canonical_json

JSON = Any
MAX_EVENT_DATA_BYTES = 4096
STARTED = "started"
RESUMED = "resumed"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RunState(_Frozen):
    """One state of a run and the single action allowed next in it."""

    name: str = Field(min_length=1)
    next_action: str | None = None
    terminal: bool = False
    success: bool = False
    """A terminal state that counts as a successful run (metrics)."""


Guard = Callable[["RunSnapshot", "RunEvent", datetime], bool]


class Transition(_Frozen):
    """An event allowed in ``sources`` that moves the run to ``target`` (None: stays).

    Args:
        event: the event type.
        sources: the states it is allowed in.
        target: the state after it; None keeps the state (a poll, a discard).
        condition: the observable condition that justifies it, in words (docs, errors).
        consumes_attempt: takes one of the run's attempts; refused when none is left.
        accepts_evidence: the event must carry an ``evidence_id``, added to the
            snapshot's accepted evidence ids (never the same id twice).
        guard: an optional pure check ``(snapshot, event, now) -> bool``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    event: str = Field(min_length=1)
    sources: tuple[str, ...]
    target: str | None
    condition: str
    consumes_attempt: bool = False
    accepts_evidence: bool = False
    guard: Guard | None = None


class RunEvent(_Frozen):
    """One fact appended to a run's log. ``event_id`` makes a repeated append harmless."""

    event_id: str = Field(min_length=1, max_length=200)
    type: str = Field(min_length=1, max_length=100)
    evidence_id: str | None = Field(default=None, max_length=200)
    data: dict[str, JSON] = Field(default_factory=dict)
    """Small facts: ids, hashes, counts. Never message bodies (capped at 4 KiB)."""
    lease_expires_at: datetime | None = None
    """Set to extend or set the run's lease with this event."""

    @model_validator(mode="after")
    def _small(self) -> Self:
        if len(canonical_json(self.data)) > MAX_EVENT_DATA_BYTES:
            raise ValueError(
                f"event data is over {MAX_EVENT_DATA_BYTES} bytes: store ids and hashes, not bodies"
            )
        return self


class RunSnapshot(_Frozen):
    """What a resumed worker reads instead of the conversation."""

    run_id: str
    machine: str
    resource: str | None = None
    """The leased resource (a mailbox, an account)."""
    state: str
    next_action: str | None
    attempts_left: int
    lease_expires_at: datetime | None = None
    evidence_ids: tuple[str, ...] = ()
    version: int
    updated_at: datetime

    def lease_expired(self, now: datetime) -> bool:
        return self.lease_expires_at is not None and now >= self.lease_expires_at


class RunMetrics(_Frozen):
    """One run's figures, from its event log and counters."""

    run_id: str
    state: str
    events_by_type: dict[str, int]
    entered_at: dict[str, datetime]
    """When the run first entered each state it visited."""
    stale_version_rejections: int
    resumed: int

    def seconds_between(self, first: str, then: str) -> float | None:
        a, b = self.entered_at.get(first), self.entered_at.get(then)
        return None if a is None or b is None else (b - a).total_seconds()


class JournalStats(_Frozen):
    """Figures over all runs of a journal (the seeds' metrics are derived from these)."""

    runs_by_state: dict[str, int]
    events_by_type: dict[str, int]
    stale_version_rejections: int
    resumed_runs: int
    resumed_runs_succeeded: int
