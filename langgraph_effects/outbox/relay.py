"""``OutboxRelay``: deliver the entries, each as its own ledger operation decided by the
decision loop (``decide``), and check deliveries."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Generator, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from langgraph_effects._owners import current_owner, provably_dead
from langgraph_effects.core.ids import idempotency_key
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
    StaleFencingToken,
)
from langgraph_effects.ledger.base import AsyncLedger, Ledger
from langgraph_effects.ledger.connect import table_connection
from langgraph_effects.ledger.engine import (
    Program,
)
from langgraph_effects.ledger.engine.tables import Tables
from langgraph_effects.outbox.model import (
    DELIVERED,
    Delivery,
    OutboxEntry,
    OutboxStatus,
    Receipt,
    RelayReport,
)
from langgraph_effects.outbox.statements import (
    _RESOLVED,
    _claim_batch,
    _delivered,
    _fenced_write,
    _leased,
    _take_over,
)

logger = logging.getLogger("langgraph_effects.outbox")
T = TypeVar("T")

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
        (``ledger.connect.table_connection``: a SQLite path or ``sqlite:///`` URL, or a
        ``postgresql://`` URL).

        Raises:
            InvalidInput: the URL is malformed or names an unsupported scheme.
        """
        with table_connection(conn_string) as conn:
            yield cls(conn, **kwargs)

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
