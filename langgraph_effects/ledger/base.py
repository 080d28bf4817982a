"""The ledger protocol every backend implements, sync and async.

A ledger holds one row per operation (its current snapshot) and an append-only
event log. Every transition is one conditional write of the row plus one event,
atomically together; a write whose precondition (status, fencing token) no
longer holds changes nothing and raises.

Method contracts (the async twins have the same names and are coroutines):

``setup()``
    Create or migrate the tables; idempotent and safe to call concurrently.
    Any other method before it raises ``LedgerNotSetUp``.
``prepare(draft, *, owner=None, lease_for=...) -> Prepared``
    Write-ahead insert keyed by ``(tenant_id, operation_id)``. If the row
    exists with the same digest it is returned unchanged (``created=False``);
    with another digest ``PayloadMismatch`` is raised and nothing changes.
    With ``owner`` the new row is inserted already claimed (``dispatching``,
    fencing token 1, attempts 1): one commit instead of two.
``prepare_many(drafts, *, owner=None, lease_for=...) -> list[Prepared]``
    The same for several drafts in one transaction (parallel tool calls).
``approve(tenant_id, operation_id, *, payload_digest, by, reason="", answer=None) -> Operation``
    Record a person's approval of a ``prepared`` operation; binds to the digest.
    ``answer`` (also on ``reject`` and ``Resolution``) names the interrupt answer
    the transition applies; it is logged in the event's detail.
``claim(tenant_id, operation_id, *, owner, lease_for, actor=None) -> Operation``
    ``prepared`` or ``unknown`` -> ``dispatching`` with a new lease, the next
    fencing token and ``attempts + 1``. ``LeaseHeld`` if dispatching,
    ``IllegalTransition`` if terminal. Whether a retry from ``unknown`` is safe
    is the caller's decision (``core.plan``), never the ledger's.
``renew(tenant_id, operation_id, *, token, lease_for) -> Operation``
    Extend a live lease; no event. ``StaleFencingToken`` if taken over.
``confirm_many(confirmations) -> list[Operation | EffectsError]``
    Several receipts (``Confirmation``: the arguments of one ``confirm``) in
    one transaction on SQLite and one statement on PostgreSQL: the receipts of
    the parallel calls of one AIMessage. Each is fenced by its own token, and
    one that no longer applies blocks none of the others: the result holds,
    in order, the confirmed ``Operation`` or the exception ``confirm`` would
    have raised for that receipt (``StaleFencingToken``, ``IllegalTransition``,
    ``OperationNotFound``), returned, not raised. Only input errors (a result
    that is not plain JSON, an operation named twice) and database failures
    raise, before anything is written or as ``LedgerUnavailable``.
``confirm / reject / release / mark_unknown(tenant_id, operation_id, *, token, ...)``
    Fenced transitions out of ``dispatching``; a stale token raises
    ``StaleFencingToken`` and changes nothing. ``reject`` with ``token=None``
    rejects a ``prepared`` operation (approval refused, authorization revoked).
    ``mark_unknown`` bumps the fencing token, so whoever held the lease is
    stale from then on.
``resolve(tenant_id, operation_id, resolution) -> Operation``
    ``unknown`` -> ``confirmed`` | ``rejected`` on conclusive evidence or an
    operator; an operator's ``retry`` moves ``unknown`` -> ``prepared`` so the
    next run dispatches again (same key, same pinned payload). Out of band, an
    operator's ``approve`` records the approval of a ``prepared`` operation
    (the next run dispatches it without asking) and ``reject`` moves
    ``prepared`` -> ``rejected`` (the next run replays the refusal); both are
    refused (``IllegalTransition``) once the operation has left ``prepared``.
    The event's detail holds the decision, the reason, and ``claimed_by`` /
    ``verified_by`` when the resolution names them.
``record_evidence(tenant_id, operation_id, evidence, answer=None) -> Operation``
    Log inconclusive evidence and stamp ``evidence_checked_at``; status unchanged
    (so ``status_changed_at`` is unchanged too: an unknown keeps its age).
``bind_thread(workflow_id, tenant_id) -> str``
    Bind a thread (LangGraph's ``thread_id``) to a tenant the first time and
    return the tenant it is bound to, which may be another one: the caller
    refuses to run a thread under a tenant it is not bound to.
``get(tenant_id, operation_id) -> Operation | None``
    ``None`` for an unknown id and for another tenant's operation.
``list(*, tenant_id=None, status=None, action=None, updated_before=None, limit=100,``
``id_prefix=None)``
    Oldest status first: ordered by ``status_changed_at`` (set on every status
    change, never by evidence, approval or lease renewal), then operation id.
    ``updated_before`` keeps the rows whose *status* is unchanged since before
    that instant (the name predates ``status_changed_at``; ``updated_at`` also
    moves on evidence, which would make an inconclusive check look like
    progress). Listing non-terminal statuses is indexed and stays cheap beside
    millions of terminal rows. ``id_prefix`` keeps the operation ids that start
    with it (the CLI's abbreviated ids, as git's).
``events(tenant_id, operation_id) -> list[OperationEvent]``
    The transitions in order.
``feed(*, after_id=0, tenant_id=None, limit=100) -> list[OperationEvent]``
    Events of all operations with ``event_id > after_id``, in order (``events --follow``),
    never skipping one that commits after a larger id became visible: PostgreSQL
    holds back the events above such a gap until the writers in flight have ended.
``stats(*, tenant_id=None) -> LedgerStats``
    ``oldest_unknown_at`` / ``oldest_dispatching_at``: the earliest
    ``status_changed_at`` among rows in that status.

Timestamps of a record: ``updated_at`` moves on every write (evidence and
approval included); ``status_changed_at`` only when the status changes (and
at creation). Stale-token refusals are reported to ``observe.log_stale_token``.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from langgraph_effects.core.model import (
    Evidence,
    LeaseOwner,
    Operation,
    OperationDraft,
    OperationEvent,
    OperationStatus,
    Prepared,
    Resolution,
)
from langgraph_effects.errors import EffectsError

__all__ = ["DEFAULT_LEASE", "AsyncLedger", "Confirmation", "Ledger", "LedgerStats"]

DEFAULT_LEASE = timedelta(seconds=30)


@dataclass(frozen=True, slots=True, kw_only=True)
class Confirmation:
    """One receipt for ``confirm_many``: the arguments of one ``confirm`` call."""

    tenant_id: str
    operation_id: str
    token: int
    result: Any = None
    provider_result_id: str | None = None
    provider_request_id: str | None = None
    evidence: Evidence | None = None


class LedgerStats(BaseModel):
    """Figures for operators and metrics; the same with or without OpenTelemetry."""

    model_config = ConfigDict(frozen=True)

    counts: dict[OperationStatus, int]
    oldest_unknown_at: datetime | None = None
    """The earliest ``status_changed_at`` of an unknown operation: inconclusive
    reconciliations do not make an old unknown look young."""
    oldest_dispatching_at: datetime | None = None
    reconciliation: dict[str, int] = {}
    """Evidence outcomes recorded (``confirmed``, ``rejected``, ``inconclusive``)."""
    operator_resolutions: int = 0
    stale_token_refusals: int = 0
    """Refusals this ledger object saw (process-local; refusals change no row)."""

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@runtime_checkable
class Ledger(Protocol):
    """Synchronous ledger. See the module docstring for each method's contract."""

    def setup(self) -> None: ...

    def prepare(
        self,
        draft: OperationDraft,
        *,
        owner: LeaseOwner | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
    ) -> Prepared: ...

    def prepare_many(
        self,
        drafts: Sequence[OperationDraft],
        *,
        owner: LeaseOwner | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
    ) -> list[Prepared]: ...

    def approve(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        payload_digest: str,
        by: str,
        reason: str = "",
        answer: str | None = None,
    ) -> Operation: ...

    def claim(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        owner: LeaseOwner,
        lease_for: timedelta = DEFAULT_LEASE,
        actor: str | None = None,
    ) -> Operation: ...

    def renew(
        self, tenant_id: str, operation_id: str, *, token: int, lease_for: timedelta = DEFAULT_LEASE
    ) -> Operation: ...

    def confirm(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        token: int,
        result: Any = None,
        provider_result_id: str | None = None,
        provider_request_id: str | None = None,
        evidence: Evidence | None = None,
    ) -> Operation: ...

    def confirm_many(
        self, confirmations: Sequence[Confirmation]
    ) -> builtins.list[Operation | EffectsError]: ...

    def reject(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        token: int | None,
        reason: str,
        evidence: Evidence | None = None,
        actor: str | None = None,
        answer: str | None = None,
    ) -> Operation: ...

    def release(
        self, tenant_id: str, operation_id: str, *, token: int, reason: str
    ) -> Operation: ...

    def mark_unknown(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        token: int,
        reason: str,
        evidence: Evidence | None = None,
        actor: str | None = None,
    ) -> Operation: ...

    def resolve(self, tenant_id: str, operation_id: str, resolution: Resolution) -> Operation: ...

    def record_evidence(
        self, tenant_id: str, operation_id: str, evidence: Evidence, answer: str | None = None
    ) -> Operation: ...

    def bind_thread(self, workflow_id: str, tenant_id: str) -> str: ...

    def get(self, tenant_id: str, operation_id: str) -> Operation | None: ...

    def list(
        self,
        *,
        tenant_id: str | None = None,
        status: OperationStatus | str | None = None,
        action: str | None = None,
        updated_before: datetime | None = None,
        limit: int = 100,
        id_prefix: str | None = None,
    ) -> builtins.list[Operation]: ...

    def events(self, tenant_id: str, operation_id: str) -> builtins.list[OperationEvent]: ...

    def feed(
        self, *, after_id: int = 0, tenant_id: str | None = None, limit: int = 100
    ) -> builtins.list[OperationEvent]: ...

    def stats(self, *, tenant_id: str | None = None) -> LedgerStats: ...


@runtime_checkable
class AsyncLedger(Protocol):
    """Asynchronous ledger: the same methods as ``Ledger``, as coroutines."""

    async def setup(self) -> None: ...

    async def prepare(
        self,
        draft: OperationDraft,
        *,
        owner: LeaseOwner | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
    ) -> Prepared: ...

    async def prepare_many(
        self,
        drafts: Sequence[OperationDraft],
        *,
        owner: LeaseOwner | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
    ) -> list[Prepared]: ...

    async def approve(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        payload_digest: str,
        by: str,
        reason: str = "",
        answer: str | None = None,
    ) -> Operation: ...

    async def claim(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        owner: LeaseOwner,
        lease_for: timedelta = DEFAULT_LEASE,
        actor: str | None = None,
    ) -> Operation: ...

    async def renew(
        self, tenant_id: str, operation_id: str, *, token: int, lease_for: timedelta = DEFAULT_LEASE
    ) -> Operation: ...

    async def confirm(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        token: int,
        result: Any = None,
        provider_result_id: str | None = None,
        provider_request_id: str | None = None,
        evidence: Evidence | None = None,
    ) -> Operation: ...

    async def confirm_many(
        self, confirmations: Sequence[Confirmation]
    ) -> builtins.list[Operation | EffectsError]: ...

    async def reject(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        token: int | None,
        reason: str,
        evidence: Evidence | None = None,
        actor: str | None = None,
        answer: str | None = None,
    ) -> Operation: ...

    async def release(
        self, tenant_id: str, operation_id: str, *, token: int, reason: str
    ) -> Operation: ...

    async def mark_unknown(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        token: int,
        reason: str,
        evidence: Evidence | None = None,
        actor: str | None = None,
    ) -> Operation: ...

    async def resolve(
        self, tenant_id: str, operation_id: str, resolution: Resolution
    ) -> Operation: ...

    async def record_evidence(
        self, tenant_id: str, operation_id: str, evidence: Evidence, answer: str | None = None
    ) -> Operation: ...

    async def bind_thread(self, workflow_id: str, tenant_id: str) -> str: ...

    async def get(self, tenant_id: str, operation_id: str) -> Operation | None: ...

    async def list(
        self,
        *,
        tenant_id: str | None = None,
        status: OperationStatus | str | None = None,
        action: str | None = None,
        updated_before: datetime | None = None,
        limit: int = 100,
        id_prefix: str | None = None,
    ) -> builtins.list[Operation]: ...

    async def events(self, tenant_id: str, operation_id: str) -> builtins.list[OperationEvent]: ...

    async def feed(
        self, *, after_id: int = 0, tenant_id: str | None = None, limit: int = 100
    ) -> builtins.list[OperationEvent]: ...

    async def stats(self, *, tenant_id: str | None = None) -> LedgerStats: ...
