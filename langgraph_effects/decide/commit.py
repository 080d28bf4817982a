"""When a decision's writes commit: the one commit path of every face.

A decision (``decide.loop``) yields two writes that matter for "exactly once",
and this module alone decides how each reaches the ledger (``Commits``, one per
runner; the drivers of ``decide.drive`` hand it every ledger action):

==================  =================================================================
write               committed
==================  =================================================================
write-ahead         ``Prepare`` with an owner (inserted already ``dispatching``):
                    synchronously, on disk before the provider hears of the call.
                    Alone; or grouped with the claimed write-aheads of concurrent
                    calls (below); or, for the parallel calls of one task
                    (``tools_condition``), with the task's siblings in one
                    ``prepare_many`` before the fan-out (``together``,
                    ``EffectRunner.prepare_siblings``). A write-ahead asked first
                    (approval, ``authorize``) is prepared unclaimed, alone.
receipt             ``Confirm``: as soon as the provider answers, alone when no
                    commit is in flight, else with the receipts that arrived during
                    it: within two commits of the answer, never held for a sibling.
                    The call answers only after that commit, so LangGraph saves no
                    answer the ledger does not hold. A commit that lost its
                    connection is tried again on a fresh one (``decide.loop``,
                    ``Loop._receipt``).
everything else     alone, at once (``bind_thread`` is shared by callers asking
                    together: ``InFlight``).
==================  =================================================================

Faces: ``EffectToolNode`` and ``EffectMiddleware`` group (``Commits(grouped=True)``);
``run_effect`` and the ``OutboxRelay`` write alone.

**When is a receipt durable?** Committed, within milliseconds of the provider's
answer as above, with the ledger's ``receipt_synchronous`` (``ledger.base``,
"Durability of receipts"): by default relaxed where write-ahead logged, so it
survives a crash of the process at once, and a crash of the server or the OS once
the next synchronous commit to the same log has flushed it (where the saver shares
the ledger's database, the checkpoint write recording the tool's result). A
receipt lost that way is the crash-before-confirm window: the record stays
``dispatching``, is taken over and reconciled, never sent again blindly
(``tests/kills/test_receipt_loss.py``).

Group commit. The calls of one superstep run at the same time: ToolNode's threads for the
calls of one task (``tools_condition``), LangGraph's tasks for one call each
(``route_tool_calls``, ``create_agent``), asyncio tasks under ``ainvoke``.
Each decision loop yields its own write-ahead ``Prepare`` and its own receipt
``Confirm``; a ``GroupCommit`` per runner (one runner per ledger and face) turns
those arriving together into one ``prepare_many`` / ``confirm_many``::

    idle      a write commits at once, alone (it waits for nobody)
    busy      a write arriving during a commit queues; when the commit ends,
              the first queued write leads the next commit, with every write
              queued by then (one transaction for all of them)

So no thread waits longer than the commit in flight plus its own, whatever
its siblings do (run, raise, interrupt, are cancelled, or wait for a free
thread under ``max_concurrency``): nobody waits for a sibling's tool, only for
a commit already under way. That is the bound on a receipt: it is committed
within two commits of the provider's answer (milliseconds: receipts commit
relaxed, ``ledger.base``, "Durability of receipts"), never held for a sibling,
so a process killed while a sibling is still at work loses no finished call's
receipt, only those of the calls still in flight.

Nothing is traded for it:

- a write's outcome is what its own commit returned: a receipt is final only
  after the commit that holds it, and its call answers only then; each item of
  ``confirm_many`` is fenced by its own token (a stale one is that call's
  ``StaleFencingToken``, blocking no other), and each write gets its own
  outcome back;
- a group whose batch write raises (``prepare_many`` is all or nothing: one
  ``PayloadMismatch`` refuses all; ``confirm_many`` refuses an operation named
  twice) falls back: each call makes its own write and meets its own outcome;
- a crash while queued is the window between a provider's answer and a single
  ``confirm`` (the record stays ``dispatching``: take over, unknown, reconcile);
- a commit started always finishes: an async caller cancelled while its write
  is queued or in flight waits for it, and the driver raises the cancellation
  once the decision is recorded (as for a dispatch in flight).

Writes group with writes of their own kind: the sync driver's (threads) with
each other, the async driver's with those of the same event loop. A waiting
thread then only ever depends on another thread's ledger call, and a waiting
task on a task of its own loop: never on a loop it could be blocking, nor on a
worker thread it could be holding.

``InFlight`` is the same idea for a call whose answer does not depend on who
asks first (a thread's binding): callers asking together make it once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, Generic, TypeVar, cast

from langgraph_effects._owners import current_owner
from langgraph_effects.decide.actions import (
    Confirm,
    ConfirmMany,
    LedgerAction,
    Prepare,
    PrepareMany,
)
from langgraph_effects.decide.call import EffectCall
from langgraph_effects.decide.recognise import keyed_unknown_check

__all__ = [
    "Commits",
    "GroupCommit",
    "InFlight",
    "confirm_group",
    "finish",
    "prepare_group",
    "together",
]

A = TypeVar("A", bound=LedgerAction[Any])
L = TypeVar("L", bound=LedgerAction[Any])
T = TypeVar("T")

Perform = Callable[[LedgerAction[Any]], Any]
APerform = Callable[[LedgerAction[Any], list[bool]], Awaitable[Any]]
Lane = asyncio.AbstractEventLoop | None
"""Who groups together: None for threads (the sync driver), else one event loop."""

_PENDING: Any = object()
_LEAD: Any = object()
"""A queued write's turn to lead the next commit."""
_ALONE: Any = object()
"""The group's batch write failed: make your own write."""


class _Waiter:
    """One queued write and how to wake its caller: a thread, or a task of the lane's loop."""

    __slots__ = ("action", "future", "lock", "outcome")

    def __init__(self, action: LedgerAction[Any], loop: Lane) -> None:
        self.action: Any = action
        self.outcome: Any = _PENDING
        self.lock: threading.Lock | None = None
        self.future: asyncio.Future[None] | None = None
        if loop is None:
            self.lock = threading.Lock()
            self.lock.acquire()
        else:
            self.future = loop.create_future()

    def wake(self, outcome: Any) -> None:
        """Hand the caller its outcome, or its turn to lead (from its own lane)."""
        self.outcome = outcome
        if self.lock is not None:
            self.lock.release()
        elif self.future is not None and not self.future.done():
            self.future.set_result(None)


class GroupCommit(Generic[A]):
    """Coalesces writes of one kind (``A``) arriving together into one batch write.

    Args:
        many: the batch write of several actions; it answers one outcome per action,
            in order (an outcome may be the exception that action's own write would
            have raised).
    """

    def __init__(self, many: Callable[[Sequence[A]], LedgerAction[Any]]) -> None:
        self._many = many
        self._lock = threading.Lock()  # never held across I/O
        self._lanes: dict[Lane, list[_Waiter]] = {}
        """The lanes with a commit in flight, and the writes queued behind it."""

    @property
    def waiting(self) -> int:
        """Writes queued behind the commits in flight."""
        with self._lock:
            return sum(len(queue) for queue in self._lanes.values())

    # -- sync -------------------------------------------------------------------

    def write(self, action: A, perform: Perform) -> Any:
        """Make ``action`` with ``perform`` (a sync ledger call), grouped with its neighbours."""
        batch: list[_Waiter] = []
        if not self._enter(None):
            me = _Waiter(action, None)
            if self._join(None, me):
                assert me.lock is not None
                me.lock.acquire()
                if me.outcome is not _LEAD:
                    return _result(me.outcome, action, perform)
                batch = self._take(None, me)
        if not batch:
            try:
                return perform(action)  # nobody queued: commit at once, alone
            finally:
                self._hand_over(None)
        outcomes = [_ALONE] * len(batch)
        try:
            actions = [w.action for w in batch]
            outcomes = _one_each(actions, perform(self._many(actions)))
        except Exception:
            pass  # each call makes its own write (below, and in its own thread)
        finally:
            self._settle(None, batch, outcomes)
        return _result(outcomes[0], action, perform)

    # -- async ------------------------------------------------------------------

    async def awrite(self, action: A, aperform: APerform, cancelled: list[bool]) -> Any:
        """The async twin of ``write``: ``aperform(action, cancelled)`` makes one ledger call.

        A cancellation while queued or committing is noted in ``cancelled`` (the
        driver raises it once the decision is recorded); the write goes on.
        """
        loop = asyncio.get_running_loop()
        batch: list[_Waiter] = []
        if not self._enter(loop):
            me = _Waiter(action, loop)
            if self._join(loop, me):
                assert me.future is not None
                await finish(me.future, cancelled)
                if me.outcome is not _LEAD:
                    return await _aresult(me.outcome, action, aperform, cancelled)
                batch = self._take(loop, me)
        if not batch:
            try:
                alone = asyncio.ensure_future(aperform(action, cancelled))
                return await finish(alone, cancelled)
            finally:
                self._hand_over(loop)
        outcomes = [_ALONE] * len(batch)
        try:
            actions = [w.action for w in batch]
            many = aperform(self._many(actions), cancelled)
            outcomes = _one_each(actions, await finish(asyncio.ensure_future(many), cancelled))
        except Exception:
            pass
        finally:
            self._settle(loop, batch, outcomes)
        return await _aresult(outcomes[0], action, aperform, cancelled)

    # -- the lanes ----------------------------------------------------------------

    def _enter(self, lane: Lane) -> bool:
        """Idle lane: this write commits now (True); a commit is in flight (False)."""
        with self._lock:
            if lane in self._lanes:
                return False
            self._lanes[lane] = []
            return True

    def _join(self, lane: Lane, me: _Waiter) -> bool:
        """Queue ``me`` behind the commit in flight (True), or commit now (False)."""
        with self._lock:
            queue = self._lanes.get(lane)
            if queue is None:
                self._lanes[lane] = []
                return False
            queue.append(me)
            return True

    def _take(self, lane: Lane, me: _Waiter) -> list[_Waiter]:
        """The group ``me`` leads: itself and every write queued by now ([] if alone)."""
        with self._lock:
            queue = self._lanes[lane]
            if not queue:
                return []
            batch = [me, *queue]
            queue.clear()
            return batch

    def _hand_over(self, lane: Lane) -> None:
        """A commit ended: the first queued write leads the next, or the lane goes idle."""
        with self._lock:
            queue = self._lanes[lane]
            if not queue:
                del self._lanes[lane]
                return
            nxt = queue.pop(0)
        nxt.wake(_LEAD)

    def _settle(self, lane: Lane, batch: list[_Waiter], outcomes: list[Any]) -> None:
        """A group's commit ended: the next may start; each of its followers learns its outcome."""
        self._hand_over(lane)
        for waiter, outcome in zip(batch[1:], outcomes[1:], strict=True):
            waiter.wake(outcome)


class InFlight:
    """Equal ledger calls made together, made once: a caller asking what a call in flight
    (an equal action, in its own lane) already asks waits for that call and takes its
    outcome instead of making its own.

    Only for a call whose answer does not depend on who asks first: a thread's
    binding (``BindThread`` answers the tenant the thread is bound to, whoever bound
    it; the second of two binds in a row answers what the first did). A follower
    waits for the call in flight only, never holds a lock across it, and groups
    with its own kind as in ``GroupCommit``. If the call fails, its caller gets the
    error and its followers ask again, sharing again: each caller makes at most one
    call of its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # never held across I/O
        self._flights: dict[tuple[Lane, LedgerAction[Any]], list[_Waiter]] = {}
        """The calls in flight, and who waits for each."""

    @property
    def waiting(self) -> int:
        """Callers waiting for a call in flight."""
        with self._lock:
            return sum(len(followers) for followers in self._flights.values())

    def call(self, action: L, perform: Callable[[L], T]) -> T:
        """Make ``action`` with ``perform`` (a sync ledger call), or share the equal one."""
        while True:
            me = self._follow(None, action)
            if me is None:
                outcome: Any = _ALONE
                try:
                    outcome = perform(action)
                finally:
                    self._land(None, action, outcome)
                return cast(T, outcome)
            assert me.lock is not None
            me.lock.acquire()
            if me.outcome is not _ALONE:
                return cast(T, me.outcome)

    async def acall(
        self, action: L, aperform: Callable[[L, list[bool]], Awaitable[T]], cancelled: list[bool]
    ) -> T:
        """The async twin of ``call``; a cancellation meanwhile is noted in ``cancelled``."""
        loop = asyncio.get_running_loop()
        while True:
            me = self._follow(loop, action)
            if me is None:
                outcome: Any = _ALONE
                try:
                    flight = asyncio.ensure_future(aperform(action, cancelled))
                    outcome = await finish(flight, cancelled)
                finally:
                    self._land(loop, action, outcome)
                return cast(T, outcome)
            assert me.future is not None
            await finish(me.future, cancelled)
            if me.outcome is not _ALONE:
                return cast(T, me.outcome)

    def _follow(self, lane: Lane, action: LedgerAction[Any]) -> _Waiter | None:
        """Wait behind the equal call in flight (a waiter), or make it (None)."""
        with self._lock:
            followers = self._flights.get((lane, action))
            if followers is None:
                self._flights[(lane, action)] = []
                return None
            me = _Waiter(action, lane)
            followers.append(me)
            return me

    def _land(self, lane: Lane, action: LedgerAction[Any], outcome: Any) -> None:
        """The call ended: its followers take its outcome (``_ALONE``: it failed, ask again)."""
        with self._lock:
            followers = self._flights.pop((lane, action))
        for waiter in followers:
            waiter.wake(outcome)


def _one_each(actions: Sequence[Any], results: Sequence[Any]) -> list[Any]:
    out = list(results)
    if len(out) != len(actions):
        raise AssertionError(f"a batch of {len(actions)} writes answered {len(out)} results")
    return out


def _result(outcome: Any, action: LedgerAction[Any], perform: Perform) -> Any:
    if outcome is _ALONE:
        return perform(action)
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


async def _aresult(
    outcome: Any, action: LedgerAction[Any], aperform: APerform, cancelled: list[bool]
) -> Any:
    if outcome is _ALONE:
        return await finish(asyncio.ensure_future(aperform(action, cancelled)), cancelled)
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


async def finish(
    flight: asyncio.Future[Any],
    cancelled: list[bool],
    on_cancel: Callable[[], None] | None = None,
) -> Any:
    """``flight``'s result; a cancellation meanwhile is noted in ``cancelled``, not obeyed.

    However often the caller is cancelled (LangGraph cancels a failed superstep's
    other tasks, then cancels them again on its way out; a task's timeout cancels
    it): only ``flight`` itself being cancelled ends the wait early. ``on_cancel``
    is called at each cancellation noted, before the wait goes on.
    """
    while True:
        try:
            return await asyncio.shield(flight)
        except asyncio.CancelledError:
            if flight.cancelled():
                raise
            cancelled.append(True)
            if on_cancel is not None:
                on_cancel()


def _prepare_many(actions: Sequence[Prepare]) -> PrepareMany:
    first = actions[0]
    return PrepareMany([a.draft for a in actions], owner=first.owner, lease_for=first.lease_for)


def _confirm_many(actions: Sequence[Confirm]) -> ConfirmMany:
    return ConfirmMany([a.confirmation for a in actions])


def prepare_group() -> GroupCommit[Prepare]:
    """Write-aheads claimed at once (``Prepare`` with an owner), as one ``prepare_many``.

    The batch's records are claimed under the first caller's owner: the same
    process, which is what a takeover judges (the nonce only tells this
    process's claims apart, and a fused prepare's claim is this call's by its
    fencing token).
    """
    return GroupCommit(_prepare_many)


def confirm_group() -> GroupCommit[Confirm]:
    """Receipts, as one ``confirm_many`` (each fenced by its own token)."""
    return GroupCommit(_confirm_many)


class Commits:
    """How each ledger write of a runner's decisions commits (the table above).

    Args:
        grouped: coalesce the claimed write-aheads and the receipts of concurrent
            calls (``prepares``, ``confirms``); False: every write commits alone.
    """

    __slots__ = ("confirms", "prepares")

    def __init__(self, *, grouped: bool) -> None:
        self.prepares: GroupCommit[Prepare] | None = prepare_group() if grouped else None
        self.confirms: GroupCommit[Confirm] | None = confirm_group() if grouped else None

    def group_of(self, action: LedgerAction[Any]) -> GroupCommit[Any] | None:
        """The group ``action`` commits with, or None: it commits alone."""
        if isinstance(action, Confirm):
            return self.confirms
        if isinstance(action, Prepare) and action.owner is not None:
            return self.prepares
        return None

    def write(self, action: LedgerAction[T], perform: Callable[[LedgerAction[T]], T]) -> T:
        """Commit ``action`` with ``perform`` (a sync ledger call), alone or in its group."""
        group = self.group_of(action)
        if group is None:
            return perform(action)
        return cast(T, group.write(action, perform))

    async def awrite(
        self,
        action: LedgerAction[T],
        aperform: Callable[[LedgerAction[T], list[bool]], Awaitable[T]],
        cancelled: list[bool],
    ) -> T:
        """The async twin of ``write``: ``aperform(action, cancelled)`` makes one ledger call."""
        group = self.group_of(action)
        if group is None:
            return await aperform(action, cancelled)
        return cast(T, await group.awrite(action, aperform, cancelled))


def together(calls: Sequence[EffectCall], *, lease_for: timedelta) -> PrepareMany | None:
    """The write-aheads of one task's parallel calls, claimed in one ``prepare_many``
    before the fan-out by this process (``current_owner``; None: each call prepares on
    its own).

    Only calls that ask nobody first (no approval, no ``authorize``) and have no
    payload key rotated out or keyed digest (such a call first looks for its
    record: ``decide.recognise.recognised``, ``keyed_unknown_check``), when two or more
    remain with distinct tool-call ids. Of identical calls (one action and digest) only
    the first is prepared with the batch: the others start at candidates of their own
    (``_faces.effect_calls``: the ``k``-th twin at the ``k``-th open one) and prepare
    there when they run, one prepare each, claimed only by a call that runs. A batch
    claim whose call never runs (ToolNode's task failed first: a sibling raised) stays
    ``dispatching`` under a live lease until it lapses, and a twin claimed that way
    answered "in progress" on the next try without acting (seen with two id-less twins;
    unequal calls of a batch still are claimed so).
    """
    batch = [
        c
        for c in calls
        if not (c.spec.require_approval or c.spec.authorize or c.spec.older_payload_keys)
        and not keyed_unknown_check(c)
        and not c.single
    ]
    ids = [c.tool_call_id for c in batch]
    if len(batch) < 2 or len(set(ids)) != len(ids):
        return None
    first = {(c.spec.action, c.payload_digest): c for c in reversed(batch)}
    drafts = [c.draft() for c in batch if first[c.spec.action, c.payload_digest] is c]
    return PrepareMany(drafts, owner=current_owner(), lease_for=lease_for)
