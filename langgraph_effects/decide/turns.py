"""The questions of one task's calls, asked in the calls' order (``Turns``).

ToolNode runs the calls of one AIMessage (``tools_condition``) in one LangGraph task:
threads, or ``asyncio.gather``. They share the task's scratchpad: one interrupt
counter, and one list of resume values that LangGraph hands out by position (the
k-th ``interrupt()`` reached in the task gets the k-th value). Reached in the order
the threads happen to run, the k-th question is not always the same call's: an
answer given by position lands on another call, and a refused answer dropped from
the values (``drive._forget``) races a sibling's ``interrupt()`` (LangGraph asserts
``len(scratchpad.resume) == idx``).

So a call asks only once every call before it in the AIMessage has left the tool
node (answered, raised or interrupted): the task's questions come one call after
another in a fixed order, the same on every run of the task, and no two calls are
inside ``interrupt()`` at once. A call that asks nothing never waits. The wait is
only on earlier calls, which ToolNode started first (its executor and ``gather``
start calls in order), so it always ends.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Sequence


class Turns:
    """The order in which the calls of one task may ask (by tool-call id)."""

    def __init__(self) -> None:
        self._order: list[str] = []
        self._left: set[str] = set()
        self._changed = threading.Condition()
        self._events: dict[str, asyncio.Event] = {}

    def order(self, call_ids: Sequence[str]) -> None:
        """The task's effect calls, in the AIMessage's order."""
        with self._changed:
            self._order = list(call_ids)
            self._changed.notify_all()

    def left(self, call_id: str) -> None:
        """``call_id`` left the tool node: the calls after it may ask."""
        with self._changed:
            self._left.add(call_id)
            self._changed.notify_all()
        event = self._events.get(call_id)
        if event is not None:
            event.set()

    def _before(self, call_id: str) -> list[str]:
        order = self._order
        return order[: order.index(call_id)] if call_id in order else []

    def wait(self, call_id: str) -> None:
        """Block until every call before ``call_id`` has left."""
        try:
            asyncio.get_running_loop()
            return  # a sync wrapper on ToolNode's async path: calls already run one by one
        except RuntimeError:
            pass
        with self._changed:
            self._changed.wait_for(lambda: self._left.issuperset(self._before(call_id)))

    async def await_turn(self, call_id: str) -> None:
        """The async twin of ``wait`` (the calls share one event loop)."""
        for earlier in self._before(call_id):
            if earlier not in self._left:
                await self._events.setdefault(earlier, asyncio.Event()).wait()

    def mine(self, call_id: str) -> _Mine:
        """While the body runs, the questions the decision asks wait for ``call_id``'s turn."""
        return _Mine((self, call_id))


class _Mine:
    """``Turns.mine``'s context manager (a class: two calls per tool call, not six)."""

    __slots__ = ("_token", "_turn")

    def __init__(self, turn: tuple[Turns, str]) -> None:
        self._turn = turn

    def __enter__(self) -> None:
        self._token = _TURN.set(self._turn)

    def __exit__(self, *_: object) -> None:
        _TURN.reset(self._token)


_TURN: contextvars.ContextVar[tuple[Turns, str] | None] = contextvars.ContextVar(
    "langgraph_effects_turn", default=None
)


def wait_turn() -> None:
    """Before a question: wait for this call's turn, if it shares its task."""
    turn = _TURN.get()
    if turn is not None:
        turn[0].wait(turn[1])


async def await_turn() -> None:
    """The async twin of ``wait_turn``."""
    turn = _TURN.get()
    if turn is not None:
        await turn[0].await_turn(turn[1])
