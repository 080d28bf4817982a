"""The public methods of the SQL ledgers, sync and async, made from the verbs' programs.

A ledger verb is declared once with its parameters: as the program that runs it
(``_prepare``, ``_programs``, ``_resolve``, ``_queries``), which takes the
dialect and the ledger's clock first, then exactly the verb's parameters.
``sync_verb`` / ``async_verb`` turn it into the method of ``SyncFace`` /
``AsyncFace``: the same parameters (``ParamSpec``, so mypy checks each program
against the ``Ledger`` / ``AsyncLedger`` method it implements, and
``inspect.signature`` shows the verb's), built into a program and handed to the
backend's driver (``_run`` / ``_arun``); nothing here knows SQL.

After the driver has committed, the transitions are logged; a
``StaleFencingToken``, raised or returned (``confirm_many``), is counted for
``stats()`` (process-local: a refusal changes no row) and reported to
``observe.log_stale_token`` (without the action: the refusal reads no more of
the row than it needs).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

from langgraph_effects.core.model import utcnow
from langgraph_effects.errors import StaleFencingToken
from langgraph_effects.ledger import _prepare, _resolve
from langgraph_effects.ledger import _programs as programs
from langgraph_effects.ledger import _queries as queries
from langgraph_effects.ledger.base import AsyncLedger, Ledger, LedgerStats
from langgraph_effects.ledger.engine import Dialect, Program, Result, migrate
from langgraph_effects.observe import log_stale_token, log_transition

__all__ = ["AsyncFace", "SyncFace"]

T = TypeVar("T")
P = ParamSpec("P")
Clock = Callable[[], datetime]
Build = Callable[Concatenate[Dialect, Clock, P], Program[T]]
"""A verb's program: the dialect and the clock, then the verb's own parameters."""


class _Face:
    """State both faces share: the dialect, the clock, the refusal counter, what to close."""

    _dialect: Dialect
    _owned: Callable[[], Any] | None = None
    """Closes what the backend's ``open()`` opened for this ledger (None: nothing is ours)."""

    def __init__(self, *, clock: Clock = utcnow) -> None:
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

    def _log(self, result: Result[T]) -> T:
        for operation, event in result.logged:
            log_transition(operation, event)
        for tenant_id, refusal in result.refused:
            self._refused(tenant_id, refusal)
        return result.value

    def _stats(self, tenant_id: str | None) -> Program[LedgerStats]:
        return queries.stats(
            self._dialect, tenant_id=tenant_id, stale_token_refusals=self._stale_token_refusals
        )


def _signed(method: Callable[..., Any], build: Callable[..., Any]) -> None:
    """Give a made method its verb's signature: ``self``, then the program's after the
    dialect and the clock (``_named`` gives it its name once its class is made)."""
    signature = inspect.signature(build)
    params = list(signature.parameters.values())[2:]
    self = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[self, *params], return_annotation=inspect.Signature.empty
    )
    method.__doc__ = None  # the protocol's contract shows through (``inspect.getdoc``)
    method._verb = True  # type: ignore[attr-defined]


def _named(cls: type) -> None:
    """Name the verbs made in ``cls`` as its methods, so ``help()`` finds their contracts
    on the protocol it implements."""
    for name, method in vars(cls).items():
        if getattr(method, "_verb", False):
            method.__name__ = name
            method.__qualname__ = f"{cls.__qualname__}.{name}"


def sync_verb(build: Build[P, T]) -> Callable[Concatenate[SyncFace, P], T]:
    """The ``SyncFace`` method of the verb ``build`` makes the program of."""

    def verb(self: SyncFace, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._execute(build(self._dialect, self._clock, *args, **kwargs))

    _signed(verb, build)
    return verb


def async_verb(build: Build[P, T]) -> Callable[Concatenate[AsyncFace, P], Coroutine[Any, Any, T]]:
    """The ``AsyncFace`` method of the verb ``build`` makes the program of."""

    async def verb(self: AsyncFace, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._execute(build(self._dialect, self._clock, *args, **kwargs))

    _signed(verb, build)
    return verb


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

    def stats(self, *, tenant_id: str | None = None) -> LedgerStats:
        return self._execute(self._stats(tenant_id))

    prepare = sync_verb(_prepare.prepare)
    prepare_many = sync_verb(_prepare.prepare_many)
    approve = sync_verb(programs.approve)
    claim = sync_verb(programs.claim)
    renew = sync_verb(programs.renew)
    confirm = sync_verb(programs.confirm)
    confirm_many = sync_verb(programs.confirm_many)
    reject = sync_verb(programs.reject)
    release = sync_verb(programs.release)
    mark_unknown = sync_verb(programs.mark_unknown)
    resolve = sync_verb(_resolve.resolve)
    record_evidence = sync_verb(programs.record_evidence)
    bind_thread = sync_verb(queries.bind_thread)
    adopt = sync_verb(queries.adopt)
    get = sync_verb(queries.get)
    list = sync_verb(queries.list_operations)
    open_operations = sync_verb(queries.open_operations)
    events = sync_verb(queries.events)
    feed = sync_verb(queries.feed)


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

    async def stats(self, *, tenant_id: str | None = None) -> LedgerStats:
        return await self._execute(self._stats(tenant_id))

    prepare = async_verb(_prepare.prepare)
    prepare_many = async_verb(_prepare.prepare_many)
    approve = async_verb(programs.approve)
    claim = async_verb(programs.claim)
    renew = async_verb(programs.renew)
    confirm = async_verb(programs.confirm)
    confirm_many = async_verb(programs.confirm_many)
    reject = async_verb(programs.reject)
    release = async_verb(programs.release)
    mark_unknown = async_verb(programs.mark_unknown)
    resolve = async_verb(_resolve.resolve)
    record_evidence = async_verb(programs.record_evidence)
    bind_thread = async_verb(queries.bind_thread)
    adopt = async_verb(queries.adopt)
    get = async_verb(queries.get)
    list = async_verb(queries.list_operations)
    open_operations = async_verb(queries.open_operations)
    events = async_verb(queries.events)
    feed = async_verb(queries.feed)


_named(SyncFace)
_named(AsyncFace)
