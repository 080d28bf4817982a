"""The public methods of the SQL ledgers, once for sync and once for async.

Each method builds a ``Program`` (``_prepare``, ``_programs``, ``_resolve``,
``_queries``) and hands it to the backend's driver (``_run`` / ``_arun``);
nothing here knows SQL. After the driver has committed, the transitions are
logged; a ``StaleFencingToken`` is counted for ``stats()`` (process-local: a
refusal changes no row) and reported to ``observe.log_stale_token`` (without
the action: the refusal reads no more of the row than it needs).
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from langgraph_effects.core.model import (
    Evidence,
    LeaseOwner,
    Operation,
    OperationDraft,
    OperationEvent,
    OperationStatus,
    Prepared,
    Resolution,
    utcnow,
)
from langgraph_effects.errors import EffectsError, StaleFencingToken
from langgraph_effects.ledger import _prepare, _resolve
from langgraph_effects.ledger import _programs as programs
from langgraph_effects.ledger import _queries as queries
from langgraph_effects.ledger._statements import Dialect, Program, Result, migrate
from langgraph_effects.ledger.base import (
    DEFAULT_LEASE,
    AsyncLedger,
    Confirmation,
    Ledger,
    LedgerStats,
    OpenOperations,
)
from langgraph_effects.observe import log_stale_token, log_transition

__all__ = ["AsyncFace", "SyncFace"]

T = TypeVar("T")


class _Face:
    """State both faces share: the dialect, the clock, the refusal counter, what to close."""

    _dialect: Dialect
    _owned: Callable[[], Any] | None = None
    """Closes what the backend's ``open()`` opened for this ledger (None: nothing is ours)."""

    def __init__(self, *, clock: Callable[[], datetime] = utcnow) -> None:
        self._clock = clock
        self._refusals_lock = threading.Lock()
        self._stale_token_refusals = 0

    def _refused(self, tenant_id: str | None, refusal: StaleFencingToken) -> None:
        """Count and report one stale-token refusal."""
        with self._refusals_lock:
            self._stale_token_refusals += 1
        log_stale_token(
            tenant_id or "",
            refusal.operation_id,
            token=refusal.token,
            current=refusal.current,
        )

    def _counted(
        self,
        confirmations: Sequence[Confirmation],
        outcomes: builtins.list[Operation | EffectsError],
    ) -> builtins.list[Operation | EffectsError]:
        for confirmation, outcome in zip(confirmations, outcomes, strict=True):
            if isinstance(outcome, StaleFencingToken):
                self._refused(confirmation.tenant_id, outcome)
        return outcomes

    @staticmethod
    def _log(result: Result[T]) -> T:
        for operation, event in result.logged:
            log_transition(operation, event)
        return result.value


class SyncFace(_Face, Ledger):
    """``Ledger`` methods over a synchronous driver ``_run(program) -> Result``."""

    def _run(self, program: Program[T]) -> Result[T]:
        raise NotImplementedError

    def _execute(self, program: Program[T]) -> T:
        try:
            result = self._run(program)
        except StaleFencingToken as refusal:
            self._refused(program.tenant_id, refusal)
            raise
        return self._log(result)

    def close(self) -> None:
        """Close the connection or pool ``open()`` opened; idempotent.

        A connection or pool given to the constructor stays the caller's, open. A closed
        ledger raises ``LedgerUnavailable`` when used.
        """
        owned, self._owned = self._owned, None
        if owned is not None:
            owned()

    def setup(self) -> None:
        """Create or migrate the tables: idempotent, safe to call concurrently."""
        self._execute(migrate(self._dialect))

    def prepare(
        self,
        draft: OperationDraft,
        *,
        owner: LeaseOwner | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
    ) -> Prepared:
        return self.prepare_many([draft], owner=owner, lease_for=lease_for)[0]

    def prepare_many(
        self,
        drafts: Sequence[OperationDraft],
        *,
        owner: LeaseOwner | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
    ) -> list[Prepared]:
        return self._execute(
            _prepare.prepare_many(
                self._dialect, self._clock, drafts, owner=owner, lease_for=lease_for
            )
        )

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
        return self._execute(
            programs.approve(
                self._dialect,
                self._clock,
                tenant_id,
                operation_id,
                payload_digest=payload_digest,
                by=by,
                reason=reason,
                answer=answer,
                claimed_by=claimed_by,
                verified_by=verified_by,
            )
        )

    def claim(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        owner: LeaseOwner,
        lease_for: timedelta = DEFAULT_LEASE,
        actor: str | None = None,
    ) -> Operation:
        return self._execute(
            programs.claim(
                self._dialect,
                self._clock,
                tenant_id,
                operation_id,
                owner=owner,
                lease_for=lease_for,
                actor=actor,
            )
        )

    def renew(
        self, tenant_id: str, operation_id: str, *, token: int, lease_for: timedelta = DEFAULT_LEASE
    ) -> Operation:
        return self._execute(
            programs.renew(
                self._dialect,
                self._clock,
                tenant_id,
                operation_id,
                token=token,
                lease_for=lease_for,
            )
        )

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
        return self._execute(
            programs.confirm(
                self._dialect,
                self._clock,
                tenant_id,
                operation_id,
                token=token,
                result=result,
                provider_result_id=provider_result_id,
                provider_request_id=provider_request_id,
                evidence=evidence,
            )
        )

    def confirm_many(
        self, confirmations: Sequence[Confirmation]
    ) -> builtins.list[Operation | EffectsError]:
        return self._counted(
            confirmations,
            self._execute(programs.confirm_many(self._dialect, self._clock, confirmations)),
        )

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
        return self._execute(
            programs.reject(
                self._dialect,
                self._clock,
                tenant_id,
                operation_id,
                token=token,
                reason=reason,
                evidence=evidence,
                actor=actor,
                answer=answer,
                claimed_by=claimed_by,
                verified_by=verified_by,
            )
        )

    def release(self, tenant_id: str, operation_id: str, *, token: int, reason: str) -> Operation:
        return self._execute(
            programs.release(
                self._dialect, self._clock, tenant_id, operation_id, token=token, reason=reason
            )
        )

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
        return self._execute(
            programs.mark_unknown(
                self._dialect,
                self._clock,
                tenant_id,
                operation_id,
                token=token,
                reason=reason,
                evidence=evidence,
                actor=actor,
            )
        )

    def resolve(self, tenant_id: str, operation_id: str, resolution: Resolution) -> Operation:
        return self._execute(
            _resolve.resolve(self._dialect, self._clock, tenant_id, operation_id, resolution)
        )

    def record_evidence(
        self, tenant_id: str, operation_id: str, evidence: Evidence, answer: str | None = None
    ) -> Operation:
        return self._execute(
            programs.record_evidence(
                self._dialect, self._clock, tenant_id, operation_id, evidence, answer
            )
        )

    def bind_thread(self, workflow_id: str, tenant_id: str) -> str:
        return self._execute(
            queries.bind_thread(self._dialect, self._clock, workflow_id, tenant_id)
        )

    def adopt(
        self, tenant_id: str, operation_id: str, *, origin: str, expected: str | None
    ) -> Operation | None:
        return self._execute(
            queries.adopt(self._dialect, tenant_id, operation_id, origin, expected)
        )

    def get(self, tenant_id: str, operation_id: str) -> Operation | None:
        return self._execute(queries.get(self._dialect, tenant_id, operation_id))

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
        return self._execute(
            queries.list_operations(
                self._dialect,
                tenant_id=tenant_id,
                status=status,
                action=action,
                updated_before=updated_before,
                limit=limit,
                id_prefix=id_prefix,
            )
        )

    def open_operations(
        self, tenant_id: str, *, action: str, target: str, limit: int = 10
    ) -> OpenOperations:
        return self._execute(
            queries.open_operations(
                self._dialect, tenant_id, action=action, target=target, limit=limit
            )
        )

    def events(self, tenant_id: str, operation_id: str) -> builtins.list[OperationEvent]:
        return self._execute(queries.events(self._dialect, tenant_id, operation_id))

    def feed(
        self, *, after_id: int = 0, tenant_id: str | None = None, limit: int = 100
    ) -> builtins.list[OperationEvent]:
        return self._execute(
            queries.feed(self._dialect, after_id=after_id, tenant_id=tenant_id, limit=limit)
        )

    def stats(self, *, tenant_id: str | None = None) -> LedgerStats:
        return self._execute(
            queries.stats(
                self._dialect,
                tenant_id=tenant_id,
                stale_token_refusals=self._stale_token_refusals,
            )
        )


class AsyncFace(_Face, AsyncLedger):
    """``AsyncLedger`` methods over an asynchronous driver ``_arun(program) -> Result``."""

    async def _arun(self, program: Program[T]) -> Result[T]:
        raise NotImplementedError

    async def _execute(self, program: Program[T]) -> T:
        try:
            result = await self._arun(program)
        except StaleFencingToken as refusal:
            self._refused(program.tenant_id, refusal)
            raise
        return self._log(result)

    async def close(self) -> None:
        """Close the connection or pool ``open()`` opened; idempotent.

        A connection or pool given to the constructor stays the caller's, open. A closed
        ledger raises ``LedgerUnavailable`` when used.
        """
        owned, self._owned = self._owned, None
        if owned is not None:
            await owned()

    async def setup(self) -> None:
        """Create or migrate the tables: idempotent, safe to call concurrently."""
        await self._execute(migrate(self._dialect))

    async def prepare(
        self,
        draft: OperationDraft,
        *,
        owner: LeaseOwner | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
    ) -> Prepared:
        return (await self.prepare_many([draft], owner=owner, lease_for=lease_for))[0]

    async def prepare_many(
        self,
        drafts: Sequence[OperationDraft],
        *,
        owner: LeaseOwner | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
    ) -> list[Prepared]:
        return await self._execute(
            _prepare.prepare_many(
                self._dialect, self._clock, drafts, owner=owner, lease_for=lease_for
            )
        )

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
        return await self._execute(
            programs.approve(
                self._dialect,
                self._clock,
                tenant_id,
                operation_id,
                payload_digest=payload_digest,
                by=by,
                reason=reason,
                answer=answer,
                claimed_by=claimed_by,
                verified_by=verified_by,
            )
        )

    async def claim(
        self,
        tenant_id: str,
        operation_id: str,
        *,
        owner: LeaseOwner,
        lease_for: timedelta = DEFAULT_LEASE,
        actor: str | None = None,
    ) -> Operation:
        return await self._execute(
            programs.claim(
                self._dialect,
                self._clock,
                tenant_id,
                operation_id,
                owner=owner,
                lease_for=lease_for,
                actor=actor,
            )
        )

    async def renew(
        self, tenant_id: str, operation_id: str, *, token: int, lease_for: timedelta = DEFAULT_LEASE
    ) -> Operation:
        return await self._execute(
            programs.renew(
                self._dialect,
                self._clock,
                tenant_id,
                operation_id,
                token=token,
                lease_for=lease_for,
            )
        )

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
        return await self._execute(
            programs.confirm(
                self._dialect,
                self._clock,
                tenant_id,
                operation_id,
                token=token,
                result=result,
                provider_result_id=provider_result_id,
                provider_request_id=provider_request_id,
                evidence=evidence,
            )
        )

    async def confirm_many(
        self, confirmations: Sequence[Confirmation]
    ) -> builtins.list[Operation | EffectsError]:
        return self._counted(
            confirmations,
            await self._execute(programs.confirm_many(self._dialect, self._clock, confirmations)),
        )

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
        return await self._execute(
            programs.reject(
                self._dialect,
                self._clock,
                tenant_id,
                operation_id,
                token=token,
                reason=reason,
                evidence=evidence,
                actor=actor,
                answer=answer,
                claimed_by=claimed_by,
                verified_by=verified_by,
            )
        )

    async def release(
        self, tenant_id: str, operation_id: str, *, token: int, reason: str
    ) -> Operation:
        return await self._execute(
            programs.release(
                self._dialect, self._clock, tenant_id, operation_id, token=token, reason=reason
            )
        )

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
        return await self._execute(
            programs.mark_unknown(
                self._dialect,
                self._clock,
                tenant_id,
                operation_id,
                token=token,
                reason=reason,
                evidence=evidence,
                actor=actor,
            )
        )

    async def resolve(self, tenant_id: str, operation_id: str, resolution: Resolution) -> Operation:
        return await self._execute(
            _resolve.resolve(self._dialect, self._clock, tenant_id, operation_id, resolution)
        )

    async def record_evidence(
        self, tenant_id: str, operation_id: str, evidence: Evidence, answer: str | None = None
    ) -> Operation:
        return await self._execute(
            programs.record_evidence(
                self._dialect, self._clock, tenant_id, operation_id, evidence, answer
            )
        )

    async def bind_thread(self, workflow_id: str, tenant_id: str) -> str:
        return await self._execute(
            queries.bind_thread(self._dialect, self._clock, workflow_id, tenant_id)
        )

    async def adopt(
        self, tenant_id: str, operation_id: str, *, origin: str, expected: str | None
    ) -> Operation | None:
        return await self._execute(
            queries.adopt(self._dialect, tenant_id, operation_id, origin, expected)
        )

    async def get(self, tenant_id: str, operation_id: str) -> Operation | None:
        return await self._execute(queries.get(self._dialect, tenant_id, operation_id))

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
        return await self._execute(
            queries.list_operations(
                self._dialect,
                tenant_id=tenant_id,
                status=status,
                action=action,
                updated_before=updated_before,
                limit=limit,
                id_prefix=id_prefix,
            )
        )

    async def open_operations(
        self, tenant_id: str, *, action: str, target: str, limit: int = 10
    ) -> OpenOperations:
        return await self._execute(
            queries.open_operations(
                self._dialect, tenant_id, action=action, target=target, limit=limit
            )
        )

    async def events(self, tenant_id: str, operation_id: str) -> builtins.list[OperationEvent]:
        return await self._execute(queries.events(self._dialect, tenant_id, operation_id))

    async def feed(
        self, *, after_id: int = 0, tenant_id: str | None = None, limit: int = 100
    ) -> builtins.list[OperationEvent]:
        return await self._execute(
            queries.feed(self._dialect, after_id=after_id, tenant_id=tenant_id, limit=limit)
        )

    async def stats(self, *, tenant_id: str | None = None) -> LedgerStats:
        return await self._execute(
            queries.stats(
                self._dialect,
                tenant_id=tenant_id,
                stale_token_refusals=self._stale_token_refusals,
            )
        )
