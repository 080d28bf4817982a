"""The walk that finds a call's operation: the ledger's records and LangGraph's checkpoints.

The rule is ``core.identity.judge`` (and, as a table, ``docs/identity.md``).
Here: where a call runs (``Timeline``: LangGraph's task, the checkpoint of its
step at every graph level, the checkpointer that keeps them) and ``identify``,
the generator the decision loop runs before anything else::

    prepare op_0 ─▶ inserted: a new operation
                 └▶ met a record E ─▶ judge(E) ─▶ SAME:  E, nothing more
                                             ├▶ ADOPT: E, its origins gain mine
                                             └▶ NEXT:  prepare op_1 ...

The hot path (a first call, or its own task re-run after a crash, an interrupt
or a ``RetryPolicy`` retry) is one prepare and nothing else: the checkpoints
are read only when a record was written by another task or another call. A
deliberate repeat is one prepare too where the state lists what was answered
(``Timeline.answered``, the ``effect_operations`` channel): its answered
candidates are skipped before anything is prepared (``core.identity.first_open``).

The checkpointer is the one LangGraph hands the task in its config
(``__pregel_checkpointer``, a private key: ``tests/identity`` fails loudly if
LangGraph renames it). Its lineage is read with ``get_tuple`` from my step's
checkpoint up through ``parent_config``; ids are uuid6, ordered by time, so the
walk stops once it passes below the checkpoint it looks for.
"""

from __future__ import annotations

import bisect
import dataclasses
import sys
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph_effects.core.identity import (
    ForkMode,
    Origin,
    Place,
    Verdict,
    decode_origins,
    encode_origins,
    judge,
)
from langgraph_effects.core.model import Operation, Prepared
from langgraph_effects.decide.actions import Action, Adopt, Get, Hook, ledger
from langgraph_effects.decide.thread import OPERATIONS_KEY
from langgraph_effects.errors import EffectsError

__all__ = [
    "CHECKPOINTER_KEY",
    "NoCheckpointerWarning",
    "Timeline",
    "answered_in",
    "find_operation",
    "graph_answers",
    "keeps_answers",
    "timeline_of",
    "warn_no_checkpointer",
]

CHECKPOINTER_KEY = "__pregel_checkpointer"
"""Where LangGraph puts the graph's checkpointer in a task's ``configurable``."""
_MAX_CANDIDATES = 10_000
"""A bound on the walk: that many identical operations of one call on one thread."""


class NoCheckpointerWarning(UserWarning):
    """A graph runs effects without a checkpointer: protection holds within one invoke."""


_warned_no_checkpointer = False


def warn_no_checkpointer() -> None:
    """Warn once per process that a graph runs effects without a checkpointer."""
    global _warned_no_checkpointer
    if _warned_no_checkpointer:
        return
    _warned_no_checkpointer = True
    warnings.warn(
        "langgraph-effects: this graph runs without a checkpointer, so no thread records "
        "what was delivered: an effect is protected within one invoke (a RetryPolicy "
        "retry, sibling calls), and the same request in a later invoke is a new "
        "operation. Give effects an intent_key to map a client's retries to one operation.",
        NoCheckpointerWarning,
        stacklevel=_user_frame(),
    )


def _user_frame() -> int:
    """The stack level of the first frame outside this package and LangGraph."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not name.startswith(("langgraph", "langchain", "concurrent", "asyncio", "threading")):
            return level
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return 1


@dataclass(eq=False)
class Timeline:
    """Where a task's calls run: its id, its step's checkpoints, and their lineage.

    One per task (the calls built together share it, and the lineage it reads).
    ``saver`` None: no checkpointer, no lineage; the candidate ids are then scoped
    to the step (``scope``) so a later invoke never meets this one's records.
    """

    task: str
    steps: tuple[tuple[str, str], ...]
    thread_id: str | None
    saver: Any = None
    asked: bool = False
    """The calls are prepared to ask a person first (an approval node), not answered."""
    durability: str | None = None
    answered: frozenset[str] = frozenset()
    """The operations the task's state lists as answered in this timeline (the
    ``effect_operations`` channel; empty where the state has none)."""
    _seen: dict[str, list[tuple[str, str | None, str | None]]] = field(default_factory=dict)
    """By namespace: my lineage read so far, ``(checkpoint id, source, parent id)``."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def scope(self) -> str | None:
        """What narrows the candidate ids without a checkpointer (the root step)."""
        return None if self.saver is not None or not self.steps else self.steps[0][1]

    def origin(self, tool_call_id: str) -> Origin:
        return Origin(task=self.task, call=tool_call_id, steps=self.steps, asked=self.asked)

    def asking(self) -> Timeline:
        """The same place, for calls prepared to ask a person first."""
        return dataclasses.replace(self, asked=True, _seen={}, _lock=threading.Lock())

    # -- the lineage (the rare path) -------------------------------------------------

    def delivered(self, ns: str, theirs: str, mine: str, elsewhere: bool) -> Place:
        """Where checkpoint ``theirs`` stands from my step ``mine`` at namespace ``ns``."""
        with self._lock:
            if self._on_my_lineage(ns, theirs, mine):
                return Place.MINE
            if elsewhere and self._completed_anywhere(ns, theirs):
                return Place.ELSEWHERE
        return Place.NOWHERE

    def _config(self, ns: str, checkpoint_id: str) -> dict[str, Any]:
        return {
            "configurable": {
                "thread_id": self.thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }

    def _on_my_lineage(self, ns: str, theirs: str, mine: str) -> bool:
        """``theirs`` is a strict ancestor of ``mine`` and its step completed: the child
        on my lineage was written by the loop (``"input"``: new input over it).

        ``seen`` is my lineage read so far, newest first, so its parents' ids fall: the
        place where ``theirs`` would be is found by bisection, not by a scan from my
        step (a thread that asked for one call a hundred times asks a hundred
        questions of one long lineage). Each saved checkpoint's parent and source are
        read once per process (``_LINKS``): a saved checkpoint never changes."""
        if theirs >= mine:
            return False
        seen = self._seen.setdefault(ns, [])

        def below(i: int) -> bool:
            parent = seen[i][2]
            return parent is None or parent <= theirs

        while True:
            i = bisect.bisect_left(range(len(seen)), True, key=below)
            if i < len(seen):
                _, source, parent = seen[i]
                return parent == theirs and source == "loop"
            at = mine if not seen else seen[-1][2]
            if at is None:
                return False
            if not seen:
                got = self._mine(ns)
                link = None if got is None else _link(got)
            else:
                link = self._link(ns, at)
            seen.append((at, None, None) if link is None else (at, *link))

    def _link(self, ns: str, checkpoint_id: str) -> tuple[str | None, str | None] | None:
        """``(source, parent id)`` of a saved checkpoint (None: not saved, or not yet)."""
        key = (self.thread_id, ns, checkpoint_id)
        with _LINKS_LOCK:
            link = _LINKS.get(key)
            if link is not None:
                _LINKS.move_to_end(key)
                return link
        got = self.saver.get_tuple(self._config(ns, checkpoint_id))
        if got is None:
            return None
        link = _link(got)
        with _LINKS_LOCK:
            _LINKS[key] = link
            if len(_LINKS) > _LINKS_KEPT:
                _LINKS.popitem(last=False)
        return link

    def _mine(self, ns: str) -> Any:
        """My step's checkpoint at ``ns``. Under ``durability="async"`` LangGraph saves it
        in the background while the step's tasks run: wait for it a little (the rare
        path only). Never saved (``"exit"``): the newest older one stands in for its
        parent, with no source of its own."""
        mine = dict(self.steps)[ns]
        wait = 0.002
        for _ in range(9 if self.durability != "exit" else 0):  # about 1 s in all
            got = self.saver.get_tuple(self._config(ns, mine))
            if got is not None:
                return got
            time.sleep(wait)
            wait *= 2
        config = {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": ns}}
        before = self._config(ns, mine)
        # Every ``list`` is read to its end: the async savers' sync ``list`` holds the
        # saver's lock until its async generator ends, so one left open (a ``next`` or a
        # ``return`` mid-loop) blocks every later checkpoint write of the run.
        older = next(iter(list(self.saver.list(config, before=before, limit=1))), None)
        if older is None:
            return None
        return _Standin(parent_config=older.config, metadata={})

    def _completed_anywhere(self, ns: str, theirs: str) -> bool:
        """Some branch holds a child of ``theirs`` written by the loop."""
        config = {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": ns}}
        for got in list(self.saver.list(config)):  # to its end (see ``_mine``)
            checkpoint = got.config["configurable"]["checkpoint_id"]
            if checkpoint <= theirs:
                return False
            parent = (got.parent_config or {}).get("configurable", {}).get("checkpoint_id")
            if parent == theirs and (got.metadata or {}).get("source") == "loop":
                return True
        return False


def _link(got: Any) -> tuple[str | None, str | None]:
    """A checkpoint tuple's ``(source, parent id)``."""
    parent = (got.parent_config or {}).get("configurable", {})
    return (got.metadata or {}).get("source"), parent.get("checkpoint_id")


_LINKS: OrderedDict[tuple[str | None, str, str], tuple[str | None, str | None]] = OrderedDict()
"""By ``(thread, namespace, checkpoint id)``: a saved checkpoint's source and parent id,
the most recently read first out last. Checkpoint ids are uuid6 (time and random
bits): one id is one checkpoint, whatever saver holds it."""
_LINKS_KEPT = 200_000
_LINKS_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class _Standin:
    """A checkpoint tuple for my unsaved step: only its parent is known."""

    parent_config: Any
    metadata: Any


def timeline_of(
    config: Mapping[str, Any] | None, task_id: str | None, state: Any = None
) -> Timeline | None:
    """The timeline of a task from its config (None outside a graph task); ``state``:
    the graph state the task sees, whose ``effect_operations`` are the answered."""
    if not config or not task_id:
        return None
    conf = config.get("configurable") or {}
    steps = tuple((str(ns), str(cid)) for ns, cid in (conf.get("checkpoint_map") or {}).items())
    if not steps:
        return None
    saver = conf.get(CHECKPOINTER_KEY)
    if saver is False:
        saver = None
    thread = conf.get("thread_id")
    thread_id = None if thread is None else str(thread)
    return Timeline(
        task_id,
        steps,
        thread_id,
        saver,
        durability=conf.get("__pregel_durability"),
        answered=answered_in(state)
        if keeps_answers(state)
        else graph_answers(config) or frozenset(),
    )


_TASK_READ = "__pregel_read"
"""LangGraph's reader of the graph's channels in a task's ``configurable`` (a private key,
guarded by ``tests/faces/test_langgraph_privates.py``)."""


def graph_answers(config: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The graph's ``effect_operations`` as the task's step sees them, read from the graph's
    channel (None when the graph has no such channel): for a task whose input is not the
    graph state, a ``Send``'s payload above all, which ``answered_in`` cannot read."""
    conf = (config or {}).get("configurable") or {}
    read = conf.get(_TASK_READ)
    if not callable(read):
        return None
    channels = getattr(read, "args", ())[1:2]  # functools.partial(local_read, pad, channels, ...)
    if channels and isinstance(channels[0], Mapping) and OPERATIONS_KEY not in channels[0]:
        return None  # the graph has no such channel
    try:
        values = read([OPERATIONS_KEY], False)  # (select, fresh), as local_read takes them
    except KeyError:
        return None  # the graph has no such channel
    if not isinstance(values, Mapping):
        return None
    return answered_in(values)


def keeps_answers(state: Any) -> bool:
    """The graph state has the ``effect_operations`` channel (``EffectState``)."""
    if isinstance(state, Mapping):
        return OPERATIONS_KEY in state
    return hasattr(state, OPERATIONS_KEY)


def answered_in(state: Any) -> frozenset[str]:
    """The operation ids a graph state lists as answered (``effect_operations``)."""
    if isinstance(state, Mapping):
        ids = state.get(OPERATIONS_KEY)
    else:
        ids = getattr(state, OPERATIONS_KEY, None)
    if not isinstance(ids, list | tuple):
        return frozenset()
    return frozenset(i for i in ids if isinstance(i, str))


def _verdict(call: Any, op: Operation, forks: ForkMode) -> Generator[Action, Any, Verdict]:
    """``judge`` for ``call`` meeting ``op``; the lineage is read through ``Hook``s."""
    timeline: Timeline | None = call.timeline
    if timeline is None:
        # A call outside a graph task: only its own tool call is known to be it.
        return Verdict.SAME if op.tool_call_id == call.tool_call_id else Verdict.NEXT
    origins = decode_origins(op.origin)
    answers: dict[tuple[str, str, str, bool], Place] = {}

    def ask(ns: str, theirs: str, mine: str, elsewhere: bool) -> Place:
        question = (ns, theirs, mine, elsewhere)
        if question not in answers:
            raise _Unanswered(question)
        return answers[question]

    # judge is pure; it asks the lineage only on the rare path. Run it; each question
    # it asks that is not answered yet is read through a Hook (the driver runs it off
    # the event loop) and judge runs again with the answer.
    while True:
        try:
            return judge(
                origins,
                op.tool_call_id,
                timeline.origin(call.tool_call_id),
                None if timeline.saver is None else ask,
                forks,
                answered=op.operation_id in timeline.answered,
            )
        except _Unanswered as missing:
            answers[missing.question] = yield Hook(_ask_lineage, (timeline, missing.question))


class _Unanswered(Exception):
    """``judge`` asked the lineage a question not read yet."""

    def __init__(self, question: tuple[str, str, str, bool]) -> None:
        super().__init__(question)
        self.question = question


def _ask_lineage(arg: tuple[Timeline, tuple[str, str, str, bool]]) -> Place:
    timeline, question = arg
    return timeline.delivered(*question)


def find_operation(
    call: Any, prepared: Prepared, prepare: Any
) -> Generator[Action, Any, tuple[Any, Prepared]]:
    """Walk ``call``'s candidate ids from ``prepared`` (op_0's prepare) to its operation.

    ``call`` is an ``EffectCall``; ``prepare(call)`` the ``Prepare`` action for one
    candidate. Returns the call at its operation's candidate and that prepare's
    result (an adopted record as the adoption wrote it). An intent key's call has
    one operation and is never walked.
    """
    if call.fixed_id:
        return call, prepared
    for _ in range(_MAX_CANDIDATES):
        if prepared.created:
            return call, prepared
        op = prepared.operation
        verdict = yield from _verdict(call, op, call.spec.forks)
        if verdict is Verdict.SAME:
            return call, prepared
        if verdict is Verdict.ADOPT:
            adopted = yield from _adopt(call, op)
            if adopted is not None:
                return call, Prepared(operation=adopted, created=False)
            fresh = yield from ledger(Get(op.key))
            if fresh is not None:
                prepared = Prepared(operation=fresh, created=False)
                continue  # the origins moved meanwhile: judge again
        call = call.at(call.index + 1)  # past the candidates the state lists as answered
        prepared = yield from ledger(prepare(call))
    raise EffectsError(  # pragma: no cover - ten thousand identical calls on one thread
        f"operation {call.operation_id!r}: no free candidate id after {_MAX_CANDIDATES}"
    )


def _adopt(call: Any, op: Operation) -> Generator[Action, Any, Operation | None]:
    """Add the call's origin to ``op``'s (one conditional write)."""
    mine = call.timeline.origin(call.tool_call_id)
    origins = (*decode_origins(op.origin), mine)
    return (yield from ledger(Adopt(op.key, encode_origins(origins), op.origin)))
