"""The ledger protocol every backend implements, sync and async.

A ledger holds one row per operation (its current snapshot) and an append-only
event log. Every transition is one conditional write of the row plus one event,
atomically together; a write whose precondition (status, fencing token) no
longer holds changes nothing and raises.

Each method's contract is its docstring on ``Ledger``; ``AsyncLedger``'s
coroutines keep the same contracts. The backends subclass the protocol they
implement, so ``help()`` and IDEs show these contracts on their methods too.

Timestamps of a record: ``updated_at`` moves on every write (evidence and
approval included); ``status_changed_at`` only when the status changes (and
at creation). Stale-token refusals are reported to ``observe.log_stale_token``.

Durability of receipts (``receipt_synchronous``, the same option and meaning on
the SQLite and PostgreSQL ledgers): only the write-ahead record waits for the
disk. ``prepare`` and ``claim`` always commit synchronously: the record must be
on disk before the provider is called; so does every other decision (``approve``,
``reject``, ``release``, ``mark_unknown``, ``resolve``, ``record_evidence``:
``ledger._programs.DURABLE``), acted on as soon as it is acknowledged (on PostgreSQL
each with at least ``synchronous_commit = on`` whatever the session, role or database
sets, unless ``prepare_synchronous="SERVER"``). A receipt (``confirm``,
``confirm_many``) commits with ``"NORMAL"`` by default where its commit is
write-ahead logged (SQLite in WAL mode; PostgreSQL always, with
``synchronous_commit = off`` set inside the receipt's own statement): it
survives any crash of the process, and on a crash of the server or the OS it
is durable once the next synchronous commit to the same log has flushed it,
since a log is flushed in order. Where the saver shares the ledger's database
(one PostgreSQL server, or one SQLite file) that next commit is the
checkpoint write that records the tool's result, so a checkpoint that
survived implies a receipt that survived; without it the next ``prepare`` of
the ledger flushes it (and PostgreSQL's WAL writer within
``3 * wal_writer_delay``, 0.6 s by default).

A thread's binding (``bind_thread``) commits the same way: the first write-ahead
record that uses it follows on the same log and is flushed before the provider
is called, so no operation ever depends on a binding the disk lost.

A receipt lost that way is never a duplicate: the record is still
``dispatching`` under a lease nobody renews (its owner dead, or alive and done),
exactly as after a crash between the provider's answer and ``confirm``, and is
settled the same way: taken over once the owner is provably dead or the lease
has expired, ``unknown``, reconciled (or retried under the same key inside its
window, or reviewed). That holds where the ledger shares the saver's database: a
lost receipt comes with a lost checkpoint, so the thread's next run meets the
record. When the ledger is elsewhere (another server, another file) the
checkpoint may survive the receipt: the thread has moved on, and the record
stays ``dispatching`` until ``langgraph-effects stuck`` (``ledger.sweep``) shows
it and an operator settles it (``stuck --mark-unknown``, then ``resolve``):
still never re-sent, but a person's work after a crash of the ledger's server or
OS. Choose ``"FULL"`` there if that is not acceptable. Elsewhere (SQLite outside
WAL mode: ``":memory:"``, or a file WAL is refused on) the default is the
ledger's own ``synchronous``.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, runtime_checkable

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
from langgraph_effects.errors import EffectsError, InvalidInput

__all__ = [
    "DEFAULT_LEASE",
    "AsyncLedger",
    "Confirmation",
    "Ledger",
    "LedgerStats",
    "OpenOperations",
    "PrepareSynchronous",
    "Synchronous",
    "check_prepare_synchronous",
    "check_synchronous",
]

DEFAULT_LEASE = timedelta(seconds=30)

Synchronous = Literal["FULL", "NORMAL"]
"""How a commit waits for the disk. ``FULL``: before the commit returns, so it
survives a power loss; ``NORMAL``: it survives a crash of the process, and a crash
of the server or the OS once a later synchronous commit has flushed the log past
it (see "Durability of receipts" above)."""


def check_synchronous(name: str, value: object) -> None:
    """Refuse a durability other than ``"FULL"`` or ``"NORMAL"`` (``ValueError``)."""
    if value not in ("FULL", "NORMAL"):
        raise ValueError(f"{name} must be 'FULL' or 'NORMAL', not {value!r}")


PrepareSynchronous = Literal["ON", "SERVER"]
"""How the write-ahead record (``prepare``, ``claim``) and every other decision
(``ledger._programs.DURABLE``: ``approve``, ``reject``, ``release``, ``mark_unknown``,
``resolve``, ``record_evidence``) commit on PostgreSQL. ``"ON"`` (default): with at
least ``synchronous_commit = on``: a session, role or database ``off`` or ``local`` is
raised to ``on`` for that transaction, ``remote_write`` and ``remote_apply`` are kept.
``"SERVER"``: with the session's setting as it is; ``off`` can lose an acknowledged
record to a server crash, ``local`` to a failover, and the call is then sent again (or
a rejection, and the call is sent though a person refused it). A SQLite ledger commits
every decision with its own ``synchronous`` whichever is given."""


def check_prepare_synchronous(value: object) -> None:
    """Refuse a ``prepare_synchronous`` other than ``"ON"`` or ``"SERVER"`` (``InvalidInput``,
    a ``ValueError``), naming both; None (the default, ``"ON"``) passes."""
    if value is not None and value not in ("ON", "SERVER"):
        raise InvalidInput(f"prepare_synchronous must be 'ON' or 'SERVER', not {value!r}")


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


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenOperations:
    """The unresolved operations on one target: the oldest first, and how many there are."""

    operations: builtins.list[Operation]
    """At most the ``limit`` asked for, the oldest status first."""
    total: int
    """How many there are in all (``operations`` may show only the first of them)."""


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
        """The number of operations counted, all statuses together."""
        return sum(self.counts.values())


@runtime_checkable
class Ledger(Protocol):
    """Synchronous ledger: the durable store of operation records and their event log.

    Every transition is one conditional write of the row plus one event; a
    write whose precondition (status, fencing token) no longer holds changes
    nothing and raises. Implementations subclass this protocol so they inherit
    these contracts as their methods' docstrings.
    """

    def setup(self) -> None:
        """Create or migrate the tables; idempotent and safe to call concurrently.

        Any other method before it raises ``LedgerNotSetUp``.
        """

    def prepare(
        self,
        draft: OperationDraft,
        *,
        owner: LeaseOwner | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
    ) -> Prepared:
        """Write the record of an operation ahead of its dispatch (write-ahead).

        Keyed by ``(tenant_id, operation_id)``. If the row exists with the same
        digest it is returned unchanged (``created=False``); with another digest
        ``PayloadMismatch`` is raised and nothing changes. With ``owner`` a new row
        is inserted already claimed (``dispatching``, fencing token 1, attempts 1):
        one commit instead of two; an existing row is returned as it is.

        Returns:
            The record, and whether this call created it.
        """

    def prepare_many(
        self,
        drafts: Sequence[OperationDraft],
        *,
        owner: LeaseOwner | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
    ) -> list[Prepared]:
        """``prepare`` for several drafts in one transaction (the parallel calls of one AIMessage).

        Returns:
            One ``Prepared`` per draft, in order.
        """

    def approve(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        payload_digest: str,
        by: str,
        reason: str = "",
        answer: str | None = None,
        claimed_by: str | None = None,
        verified_by: str | None = None,
    ) -> Operation:
        """Record a person's approval of a ``prepared`` operation; it binds to the digest.

        ``payload_digest`` must be the record's (an approval can never be
        consumed by another call: ``PayloadMismatch`` otherwise). ``answer``
        names the interrupt answer the approval applies; it is logged in the
        event's detail so the same answer is recognised, never re-applied.
        ``by`` is the event's actor; ``claimed_by`` (the name the answer gave)
        and ``verified_by`` (the identity a server or tool verified) are kept
        in the detail when given.

        Raises:
            IllegalTransition: the operation has left ``prepared``.
        """

    def claim(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        owner: LeaseOwner,
        lease_for: timedelta = DEFAULT_LEASE,
        actor: str | None = None,
    ) -> Operation:
        """Take a lease: ``prepared`` or ``unknown`` -> ``dispatching``.

        Sets a new lease for ``owner`` until ``now + lease_for``, the next
        fencing token and ``attempts + 1``. Whether a retry from ``unknown`` is
        safe is the caller's decision (``core.plan``), never the ledger's.

        Raises:
            LeaseHeld: the operation is dispatching under another lease.
            IllegalTransition: the operation is terminal.
        """

    def renew(
        self, tenant_id: str, operation_id: str, *, token: int, lease_for: timedelta = DEFAULT_LEASE
    ) -> Operation:
        """Extend a live lease by ``lease_for`` from now; no event is logged.

        Raises:
            StaleFencingToken: ``token`` is no longer current (taken over) or
                the operation is no longer dispatching.
        """

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
    ) -> Operation:
        """Record the provider's receipt: ``dispatching`` -> ``confirmed``, fenced by ``token``.

        ``result`` (plain JSON) is what later runs replay; the provider ids and
        ``evidence`` are kept with it.

        Raises:
            StaleFencingToken: a newer lease owns the operation; nothing changes.
        """

    def confirm_many(
        self, confirmations: Sequence[Confirmation]
    ) -> builtins.list[Operation | EffectsError]:
        """Several receipts in one transaction on SQLite and one statement on PostgreSQL.

        Each ``Confirmation`` holds the arguments of one ``confirm`` and is
        fenced by its own token; one that no longer applies blocks none of the
        others.

        Returns:
            In order, the confirmed ``Operation`` or the exception ``confirm``
            would have raised for that receipt (``StaleFencingToken``,
            ``IllegalTransition``, ``OperationNotFound``), returned, not raised.

        Raises:
            InvalidInput: a result that is not plain JSON, or an operation named
                twice; nothing is written.
            LedgerUnavailable: the database failed.
        """

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
        claimed_by: str | None = None,
        verified_by: str | None = None,
    ) -> Operation:
        """Record a rejection: ``dispatching`` (fenced) or ``prepared`` -> ``rejected``.

        With ``token=None`` a ``prepared`` operation is rejected (approval
        refused, authorization revoked); ``answer`` names the interrupt answer
        applied, ``claimed_by`` / ``verified_by`` who refused (as for
        ``approve``), all in the event's detail. The evidence is kept.

        Raises:
            StaleFencingToken: a newer lease owns the operation; nothing changes.
        """

    def release(self, tenant_id: str, operation_id: str, *, token: int, reason: str) -> Operation:
        """Give a lease back: ``dispatching`` -> ``prepared``, fenced by ``token``.

        For a dispatch that provably did not reach the provider (transient
        refusals spent): a later run sends it again under the same key.

        Raises:
            StaleFencingToken: a newer lease owns the operation; nothing changes.
        """

    def mark_unknown(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        token: int,
        reason: str,
        evidence: Evidence | None = None,
        actor: str | None = None,
    ) -> Operation:
        """Record an unclear outcome: ``dispatching`` -> ``unknown``, fenced by ``token``.

        Bumps the fencing token, so whoever held the lease is stale from then
        on (a takeover of a dead lease passes the current token).

        Raises:
            StaleFencingToken: a newer lease owns the operation; nothing changes.
        """

    def resolve(self, tenant_id: str, operation_id: str, resolution: Resolution) -> Operation:
        """Apply conclusive evidence or an operator's decision.

        ``confirm`` / ``reject`` move ``unknown`` -> ``confirmed`` | ``rejected``;
        ``retry`` moves ``unknown`` -> ``prepared`` so the next run dispatches
        again (same key, same pinned payload). Out of band, ``approve`` records
        the approval of a ``prepared`` operation (the next run dispatches it
        without asking) and ``reject`` moves ``prepared`` -> ``rejected`` (the
        next run replays the refusal). The event's detail holds the decision,
        the reason, and ``claimed_by`` / ``verified_by`` when given.

        Raises:
            IllegalTransition: the decision does not apply to the current status.
        """

    def record_evidence(
        self, tenant_id: str, operation_id: str, evidence: Evidence, answer: str | None = None
    ) -> Operation:
        """Log inconclusive evidence and stamp ``evidence_checked_at``; the status is unchanged.

        So ``status_changed_at`` is unchanged too: an unknown keeps its age. On a final
        record (``confirmed``, ``rejected``) the evidence is only logged: a note (an answer
        that came too late, a receipt the fence refused) that checks nothing; the record
        keeps every field but its version (and ``updated_at``), which move with the event.
        """

    def bind_thread(self, workflow_id: str, tenant_id: str) -> str:
        """Bind a thread (LangGraph's ``thread_id``) to a tenant the first time.

        Returns:
            The tenant the thread is bound to, which may be another one: the
            caller refuses to run a thread under a tenant it is not bound to.
        """

    def adopt(
        self, tenant_id: str, operation_id: str, *, origin: str, expected: str | None
    ) -> Operation | None:
        """Replace an operation's ``origin`` (``core.identity``) if it is still ``expected``.

        One conditional write; nothing else of the record changes (no status, no
        version, no event). Returns the record as written, or None when the origin
        moved meanwhile (or there is no such operation): re-read and judge again.
        """

    def get(self, tenant_id: str, operation_id: str) -> Operation | None:
        """The record of one operation; None for an unknown id or another tenant's operation."""

    def list(
        self,
        *,
        tenant_id: str | None = None,
        status: OperationStatus | str | None = None,
        action: str | None = None,
        updated_before: datetime | None = None,
        limit: int = 100,
        id_prefix: str | None = None,
    ) -> builtins.list[Operation]:
        """Records, the oldest status first (by ``status_changed_at``, then operation id).

        Args:
            tenant_id, status, action: keep the rows that match.
            updated_before: keep the rows whose *status* is unchanged since
                before that instant (``status_changed_at``; evidence would make
                ``updated_at`` look like progress).
            limit: at most this many rows.
            id_prefix: keep the operation ids that start with it, literally
                (the CLI's abbreviated ids, as git's).

        Listing non-terminal statuses is indexed and stays cheap beside
        millions of terminal rows.
        """

    def open_operations(
        self, tenant_id: str, *, action: str, target: str, limit: int = 10
    ) -> OpenOperations:
        """The unresolved operations of one tenant on one action and target.

        Unresolved: ``prepared``, ``dispatching`` or ``unknown`` (an operation a
        lost thread left behind stays so until someone decides it). Shown to a
        person deciding another operation on the same target, so a second refund
        of an order is never approved in ignorance of the first.

        Returns:
            The first ``limit`` of them, the oldest status first (by
            ``status_changed_at``, then operation id), and how many there are.
            Served by the open-status index: cheap beside millions of terminal
            rows.

        Raises:
            InvalidInput: a negative ``limit``.
        """

    def events(self, tenant_id: str, operation_id: str) -> builtins.list[OperationEvent]:
        """The transitions of one operation, in order."""

    def feed(
        self, *, after_id: int = 0, tenant_id: str | None = None, limit: int = 100
    ) -> builtins.list[OperationEvent]:
        """Events of all operations with ``event_id > after_id``, in order (``events --follow``).

        Never skips an event that commits after a larger id became visible:
        PostgreSQL holds back the events above such a gap until the writers in
        flight have ended.
        """

    def stats(self, *, tenant_id: str | None = None) -> LedgerStats:
        """Figures for operators and metrics (``LedgerStats``).

        ``oldest_unknown_at`` / ``oldest_dispatching_at`` are the earliest
        ``status_changed_at`` among rows in that status.
        """


@runtime_checkable
class AsyncLedger(Protocol):
    """Asynchronous ledger: the same methods and contracts as ``Ledger``, as coroutines.

    Each method's docstring here points at its ``Ledger`` twin, whose contract
    is appended at import (``_share_contracts``), so ``help()`` shows it whole.
    """

    async def setup(self) -> None:
        """Coroutine twin of ``Ledger.setup``; the same contract."""

    async def prepare(
        self,
        draft: OperationDraft,
        *,
        owner: LeaseOwner | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
    ) -> Prepared:
        """Coroutine twin of ``Ledger.prepare``; the same contract."""

    async def prepare_many(
        self,
        drafts: Sequence[OperationDraft],
        *,
        owner: LeaseOwner | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
    ) -> list[Prepared]:
        """Coroutine twin of ``Ledger.prepare_many``; the same contract."""

    async def approve(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        payload_digest: str,
        by: str,
        reason: str = "",
        answer: str | None = None,
        claimed_by: str | None = None,
        verified_by: str | None = None,
    ) -> Operation:
        """Coroutine twin of ``Ledger.approve``; the same contract."""

    async def claim(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        owner: LeaseOwner,
        lease_for: timedelta = DEFAULT_LEASE,
        actor: str | None = None,
    ) -> Operation:
        """Coroutine twin of ``Ledger.claim``; the same contract."""

    async def renew(
        self, tenant_id: str, operation_id: str, *, token: int, lease_for: timedelta = DEFAULT_LEASE
    ) -> Operation:
        """Coroutine twin of ``Ledger.renew``; the same contract."""

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
    ) -> Operation:
        """Coroutine twin of ``Ledger.confirm``; the same contract."""

    async def confirm_many(
        self, confirmations: Sequence[Confirmation]
    ) -> builtins.list[Operation | EffectsError]:
        """Coroutine twin of ``Ledger.confirm_many``; the same contract."""

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
        claimed_by: str | None = None,
        verified_by: str | None = None,
    ) -> Operation:
        """Coroutine twin of ``Ledger.reject``; the same contract."""

    async def release(
        self, tenant_id: str, operation_id: str, *, token: int, reason: str
    ) -> Operation:
        """Coroutine twin of ``Ledger.release``; the same contract."""

    async def mark_unknown(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        token: int,
        reason: str,
        evidence: Evidence | None = None,
        actor: str | None = None,
    ) -> Operation:
        """Coroutine twin of ``Ledger.mark_unknown``; the same contract."""

    async def resolve(self, tenant_id: str, operation_id: str, resolution: Resolution) -> Operation:
        """Coroutine twin of ``Ledger.resolve``; the same contract."""

    async def record_evidence(
        self, tenant_id: str, operation_id: str, evidence: Evidence, answer: str | None = None
    ) -> Operation:
        """Coroutine twin of ``Ledger.record_evidence``; the same contract."""

    async def bind_thread(self, workflow_id: str, tenant_id: str) -> str:
        """Coroutine twin of ``Ledger.bind_thread``; the same contract."""

    async def adopt(
        self, tenant_id: str, operation_id: str, *, origin: str, expected: str | None
    ) -> Operation | None:
        """Coroutine twin of ``Ledger.adopt``; the same contract."""

    async def get(self, tenant_id: str, operation_id: str) -> Operation | None:
        """Coroutine twin of ``Ledger.get``; the same contract."""

    async def list(
        self,
        *,
        tenant_id: str | None = None,
        status: OperationStatus | str | None = None,
        action: str | None = None,
        updated_before: datetime | None = None,
        limit: int = 100,
        id_prefix: str | None = None,
    ) -> builtins.list[Operation]:
        """Coroutine twin of ``Ledger.list``; the same contract."""

    async def open_operations(
        self, tenant_id: str, *, action: str, target: str, limit: int = 10
    ) -> OpenOperations:
        """Coroutine twin of ``Ledger.open_operations``; the same contract."""

    async def events(self, tenant_id: str, operation_id: str) -> builtins.list[OperationEvent]:
        """Coroutine twin of ``Ledger.events``; the same contract."""

    async def feed(
        self, *, after_id: int = 0, tenant_id: str | None = None, limit: int = 100
    ) -> builtins.list[OperationEvent]:
        """Coroutine twin of ``Ledger.feed``; the same contract."""

    async def stats(self, *, tenant_id: str | None = None) -> LedgerStats:
        """Coroutine twin of ``Ledger.stats``; the same contract."""


def _share_contracts() -> None:
    """Append each ``Ledger`` method's contract to its ``AsyncLedger`` twin's docstring."""
    for name, twin in vars(AsyncLedger).items():
        sync = vars(Ledger).get(name)
        if callable(twin) and sync is not None and sync.__doc__ and twin.__doc__:
            twin.__doc__ = f"{twin.__doc__}\n\n{inspect.cleandoc(sync.__doc__)}"


_share_contracts()
