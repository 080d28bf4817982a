"""Two receipt draws of the campaign (issue 23): a slow sibling killed mid fan-out, and a
receipt commit that loses its connection once.

Both are in-process, as the campaign's crashes are, and both name the receipts the
ledger must keep (``Scenario.receipts_due``): a receipt the provider gave is recorded
from that receipt, never found ``dispatching`` by a later run and taken over (a takeover
would reconcile it or ask a person: no resend, but an outcome we had, lost).

* :class:`SlowSibling`: one call of an AIMessage's fan-out is slow. The process dies
  (``InjectedCrash``) while that call is still inside its provider call (the provider
  acted, or not yet), once every sibling call came back from the engine; the siblings
  that answered are due.
* :class:`DroppingConnection`: the campaign's SQLite connection (the driver's, a
  third-party object: the ledger is not touched) loses the commit of its next receipt,
  ``sqlite3.OperationalError`` as a dropped connection or a failing disk raises it:
  before the commit (nothing written) or after it (written, the acknowledgement lost).
  The engine tries the receipt again; the operations of that commit are due.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Self

from langgraph_effects.ledger.engine.sqlite import parameter_names
from langgraph_effects.slot import current_slot
from langgraph_effects.testing.faults import CrashPoint, InjectedCrash

__all__ = ["DroppingConnection", "SlowSibling"]

_CONFIRMING = "status = 'confirmed', lease_owner = NULL"
"""What the SQLite dialect's confirm (the receipt's write) sets first; no other statement
does (a resolution sets ``status = :to_status``)."""


class SlowSibling:
    """The call ``slow`` of a fan-out is slow; the process dies while it is in its call.

    Give :meth:`pause` to ``effect_tools(pause=...)`` and :meth:`wrap` / :meth:`awrap` to
    the node (``wrap_tool_call`` / ``awrap_tool_call``). The slow call waits inside its
    provider call until each of ``siblings`` came back from the engine (answered,
    interrupted or failed; ``wait`` seconds at most), then raises ``InjectedCrash``
    before the provider hears of it, or, with ``acted``, once it answered: once, in the
    first run that gets there. Arriving last, the slow call meets its provider's last
    scripted fault of the run.
    """

    def __init__(
        self, slow: str, siblings: Collection[str], *, acted: bool, wait: float = 2.0
    ) -> None:
        self.slow = slow
        self.siblings = frozenset(siblings) - {slow}
        self.acted = acted
        self.wait = wait
        self.back: set[str] = set()
        """Siblings whose call came back from the engine, however."""
        self.answered: set[str] = set()
        """Siblings whose call the engine answered (a ToolMessage: its record settled)."""
        self.due: dict[str, int] = {}
        """The siblings answered when the process died, their receipts to keep: each
        maps to 0 (the schedule has no other crash: any takeover of them lost one)."""
        self.fired = False
        self._lock = threading.Lock()

    def pause(self, action: str, where: str) -> None:
        """Around each provider call (``effect_tools``): the slow call dies here."""
        slot = current_slot()
        if self.fired or slot is None or slot.context.tool_call_id != self.slow:
            return
        if where == "after":
            self._die()
        deadline = time.monotonic() + self.wait
        while time.monotonic() < deadline:
            with self._lock:
                if self.siblings <= self.back:
                    break
            time.sleep(0.002)
        if not self.acted:
            self._die()

    def _die(self) -> None:
        with self._lock:
            self.fired = True
            self.due = dict.fromkeys(self.answered, 0)
        raise InjectedCrash(CrashPoint.AFTER_PROVIDER if self.acted else CrashPoint.AFTER_CLAIM)

    def _came_back(self, request: Any, *, answered: bool) -> None:
        call_id = str(request.tool_call.get("id"))
        with self._lock:
            if call_id in self.siblings and not self.fired:
                self.back.add(call_id)
                if answered:
                    self.answered.add(call_id)

    def wrap(self, request: Any, execute: Callable[[Any], Any]) -> Any:
        """The node's ``wrap_tool_call``: notes each call coming back from the engine."""
        try:
            out = execute(request)
        except BaseException:
            self._came_back(request, answered=False)
            raise
        self._came_back(request, answered=True)
        return out

    async def awrap(self, request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
        """The node's ``awrap_tool_call``, as :meth:`wrap`."""
        try:
            out = await execute(request)
        except BaseException:
            self._came_back(request, answered=False)
            raise
        self._came_back(request, answered=True)
        return out


class _Watching(sqlite3.Cursor):
    """Notes the operations a transaction confirms (the connection drops their commit)."""

    def execute(self, sql: str, parameters: Any = (), /) -> Self:
        if _CONFIRMING in sql:
            named = parameters
            if not isinstance(named, Mapping):  # the driver binds by place
                named = dict(zip(parameter_names(sql) or (), parameters, strict=False))
            conn = self.connection
            assert isinstance(conn, DroppingConnection)
            conn.confirming.append((str(named.get("operation_id")), int(named.get("token") or 0)))
        return super().execute(sql, parameters)


class DroppingConnection(sqlite3.Connection):
    """A ``sqlite3`` connection (``sqlite3.connect(..., factory=DroppingConnection)``)
    whose next ``drops`` receipt commits fail with ``OperationalError`` (``SQLITE_IOERR``),
    rolled back first, or, with ``after``, committed first (the answer lost on the way).

    ``dropped``: the operations whose receipt commit failed, and their fencing tokens.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.drops = 0
        self.after = False
        self.confirming: list[tuple[str, int]] = []
        self.dropped: dict[str, int] = {}
        """Each operation whose receipt commit failed, with the fencing token it held."""

    def cursor(self, factory: Any = None) -> Any:
        return super().cursor(factory or _Watching)

    def rollback(self) -> None:
        self.confirming = []
        super().rollback()

    def commit(self) -> None:
        confirmed, self.confirming = self.confirming, []
        if not confirmed or self.drops <= 0:
            super().commit()
            return
        self.drops -= 1
        if self.after:
            super().commit()
        else:
            super().rollback()
        self.dropped.update(confirmed)
        error = sqlite3.OperationalError("disk I/O error (the receipt's commit was cut)")
        error.sqlite_errorcode = sqlite3.SQLITE_IOERR
        raise error
