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
candidates are skipped before anything is prepared (``core.identity.first_open``),
and identical calls of one AIMessage start at candidates of their own
(``core.identity.nth_open``): ``n`` twins, ``n`` prepares.

The checkpointer is the one LangGraph hands the task in its config
(``__pregel_checkpointer``, a private key: ``tests/identity`` fails loudly if
LangGraph renames it). Its lineage is read with ``get_tuple`` from my step's
checkpoint up through ``parent_config``; ids are uuid6, ordered by time, so the
walk stops once it passes below the checkpoint it looks for.

Under ``durability="exit"`` no step is saved, only each run's end, whose parent is
the checkpoint the run started from. A task's run (``core.identity.Run``) is read from
LangGraph's loop, which the task's ``__pregel_call`` is bound to, at every graph level
(``_runs``; private too, guarded in ``tests/faces/test_langgraph_privates.py``): my
unsaved step's place on the lineage is then known exactly (the run's start, never a
checkpoint another branch saved meanwhile), and a record's step of an earlier run is
placed by that run's end (``Timeline._run_ended``)::

    P ──(R1: c_E answered, unsaved)──▶ F1 (saved at exit, parent P) ──▶ ... ──▶ me
         a later call: F1 is the oldest of my lineage after c_E, a loop child of the
         checkpoint R1 started from, and no other run from P saved an end in between:
         c_E's step completed in the run that F1 ends, delivered (a new operation)

    P ──(R1: c_E answered, killed: nothing saved)        me (R2 from P: a resume, the
         request sent again): nothing of my lineage after c_E: never delivered, adopted
"""

from __future__ import annotations

import bisect
import dataclasses
import sys
import threading
import time
import uuid
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph_effects.core.identity import (
    ANSWERED_STATES,
    ForkMode,
    Origin,
    Place,
    Run,
    Verdict,
    decode_origins,
    encode_origins,
    judge,
)
from langgraph_effects.core.ids import MAX_CANDIDATES
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
    "graph_channel",
    "keeps_answers",
    "timeline_of",
    "warn_no_checkpointer",
]

CHECKPOINTER_KEY = "__pregel_checkpointer"
"""Where LangGraph puts the graph's checkpointer in a task's ``configurable``."""


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
    runs: tuple[Run, ...] = ()
    """Under ``durability="exit"``: my run at each level, written into my origins."""
    call: Any = None
    """The task's ``__pregel_call`` (bound to LangGraph's loop): my runs, read on the rare
    path under any durability (``my_run``)."""
    _seen: dict[str, list[tuple[str, str | None, str | None]]] = field(default_factory=dict)
    """By namespace: my lineage read so far, ``(checkpoint id, source, parent id)``."""
    _exact: dict[str, bool] = field(default_factory=dict)
    """By namespace: my step's place on the lineage was read, not guessed (``_mine``)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def scope(self) -> str | None:
        """What narrows the candidate ids without a checkpointer (the root step)."""
        return None if self.saver is not None or not self.steps else self.steps[0][1]

    def origin(self, tool_call_id: str) -> Origin:
        return Origin(
            task=self.task, call=tool_call_id, steps=self.steps, asked=self.asked, runs=self.runs
        )

    def asking(self) -> Timeline:
        """The same place, for calls prepared to ask a person first."""
        return dataclasses.replace(self, asked=True, _seen={}, _exact={}, _lock=threading.Lock())

    def my_run(self, ns: str) -> Run | None:
        """My run at namespace ``ns`` (None: LangGraph's loop could not be read)."""
        runs = self.runs or _runs(self.call)
        for r in runs:
            if r.ns == ns:
                return r
        return None

    # -- the lineage (the rare path) -------------------------------------------------

    def delivered(
        self, ns: str, theirs: str, mine: str, elsewhere: bool, run: Run | None = None
    ) -> Place:
        """Where checkpoint ``theirs`` stands from my step ``mine`` at namespace ``ns``;
        ``run``: the run of ``theirs``'s step, when written under ``durability="exit"``."""
        with self._lock:
            me = None if run is None else self.my_run(ns)
            if run is not None and me is not None and me.token == run.token:
                # An earlier step of my own run: the loop moved on past it, so its writes
                # were applied (a step of my run is never saved under "exit").
                return Place.MINE if theirs < mine else Place.NOWHERE
            if self._on_my_lineage(ns, theirs, mine, run, me):
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

    def _on_my_lineage(
        self, ns: str, theirs: str, mine: str, run: Run | None = None, me: Run | None = None
    ) -> bool:
        """``theirs`` is a strict ancestor of ``mine`` and its step completed: the child
        on my lineage was written by the loop (``"input"``: new input over it). Or,
        ``theirs`` never saved (``"exit"``), the run it was a step of ended in a
        checkpoint of my lineage (``_run_ended``).

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
                first, source, parent = seen[i]
                if parent == theirs:
                    return source == "loop"
                return (
                    run is not None
                    and me is not None
                    and source == "loop"
                    and self._exact.get(ns, False)
                    and first <= (me.since or "")  # a checkpoint before my run, not of it
                    and (parent or "") == run.since
                    and self._run_ended(ns, theirs, first, run.since)
                )
            at = mine if not seen else seen[-1][2]
            if at is None:
                return False
            if not seen:
                got = self._mine(ns)
                link = None if got is None else _link(got)
            else:
                link = self._link(ns, at)
            seen.append((at, None, None) if link is None else (at, *link))

    def _run_ended(self, ns: str, theirs: str, end: str, since: str) -> bool:
        """``end``, a checkpoint the loop saved with parent ``since`` after ``theirs``,
        is the end of the run whose step ``theirs`` was (it started from ``since``):
        ``theirs`` was never saved (a step of an ``"exit"`` run; a saved one ended its
        run there, or was placed above), and no other run from ``since`` saved an end
        between the two (a fork or replay from ``since``: then the older one may be its
        run's and this one another's, and it is not counted as delivered).

        What stays unknown: a run that died after its answer was recorded and before
        ``"exit"`` saved, then another run from the same checkpoint that never proposed
        the call again; its end is taken for the dead run's, and a later identical call
        acts again (docs/identity.md)."""
        if self._link(ns, theirs) is not None:
            return False
        config = {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": ns}}
        before = end
        for _ in range(_SIBLING_PAGES):
            # One checkpoint a page, each ``list`` read to its end (see ``_mine``).
            older = next(
                iter(list(self.saver.list(config, before=self._config(ns, before), limit=1))), None
            )
            if older is None:
                return True
            checkpoint = older.config["configurable"]["checkpoint_id"]
            if checkpoint <= theirs:
                return True
            source, parent = _link(older)
            if (parent or "") == since and source == "loop":
                return False
            before = checkpoint
        return False

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
        path only). Never saved (``"exit"``): the checkpoint my run started from stands
        in for its parent, with no source of its own; where LangGraph's loop could not
        be read, the newest older one (a guess: ``_exact`` stays false)."""
        mine = dict(self.steps)[ns]
        wait = 0.002
        for _ in range(9 if self.durability != "exit" else 0):  # about 1 s in all
            got = self.saver.get_tuple(self._config(ns, mine))
            if got is not None:
                self._exact[ns] = True
                return got
            time.sleep(wait)
            wait *= 2
        me = self.my_run(ns) if self.durability == "exit" else None
        if me is not None:
            self._exact[ns] = True
            if not me.since:
                return None  # nothing was saved at this level before my run
            return _Standin(parent_config=self._config(ns, me.since), metadata={})
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
_SIBLING_PAGES = 64
"""A bound on ``Timeline._run_ended``'s walk back from a run's end (other branches' saves
in between); past it, not counted as delivered."""

_TOKENS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
"""A token per LangGraph loop (one run at one graph level), drawn when first read."""
_TOKENS_LOCK = threading.Lock()


def _runs(call: Any) -> tuple[Run, ...]:
    """The runs of a task at every graph level, root first, from the loop its
    ``__pregel_call`` is bound to (``schedule_task``, a bound method of LangGraph's
    loop) and, through each loop's config, the parent graph's: the checkpoint each
    loop started from (``_initial_checkpoint_config``) and its token. Empty when any of
    it cannot be read (LangGraph moved it): then nothing is placed by runs."""
    out: list[Run] = []
    try:
        while call is not None:
            loop = call.keywords["schedule_task"].__self__
            conf = loop.config.get("configurable") or {}
            since = ""
            if loop._has_persisted_parent:
                since = str(loop._initial_checkpoint_config["configurable"]["checkpoint_id"])
            with _TOKENS_LOCK:
                token = _TOKENS.get(loop)
                if token is None:
                    token = _TOKENS[loop] = uuid.uuid4().hex
            out.append(Run(ns=str(conf.get("checkpoint_ns", "")), since=since, token=token))
            call = conf.get(_TASK_CALL)
    except (AttributeError, KeyError, TypeError):
        return ()
    return tuple(reversed(out))


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
    durability = conf.get("__pregel_durability")
    call = conf.get(_TASK_CALL)
    runs = _runs(call) if durability == "exit" and saver is not None else ()
    if runs and {r.ns for r in runs} != {ns for ns, _ in steps}:
        runs = ()  # the loops do not match the step's levels: placed by the lineage alone
    return Timeline(
        task_id,
        steps,
        thread_id,
        saver,
        durability=durability,
        answered=answered_in(state)
        if keeps_answers(state)
        else graph_answers(config) or frozenset(),
        runs=runs,
        call=call,
    )


_TASK_CALL = "__pregel_call"
"""LangGraph's ``call`` of a task's ``configurable``, a ``functools.partial`` whose
``schedule_task`` is bound to the task's loop (a private key, guarded by
``tests/faces/test_langgraph_privates.py``)."""
_TASK_READ = "__pregel_read"
"""LangGraph's reader of the graph's channels in a task's ``configurable`` (a private key,
guarded by ``tests/faces/test_langgraph_privates.py``)."""


def graph_answers(config: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The graph's ``effect_operations`` as the task's step sees them, read from the graph's
    channel (None when the graph has no such channel): for a task whose input is not the
    graph state, a ``Send``'s payload above all, which ``answered_in`` cannot read."""
    values = graph_channel(config, OPERATIONS_KEY)
    return None if values is None else answered_in(values)


def graph_channel(config: Mapping[str, Any] | None, key: str) -> Mapping[str, Any] | None:
    """``{key: value}`` of the graph's channel ``key`` as the task's step sees it (None when
    the graph has no such channel, or outside a task), read as ToolNode reads channels."""
    conf = (config or {}).get("configurable") or {}
    read = conf.get(_TASK_READ)
    if not callable(read):
        return None
    channels = getattr(read, "args", ())[1:2]  # functools.partial(local_read, pad, channels, ...)
    if channels and isinstance(channels[0], Mapping) and key not in channels[0]:
        return None  # the graph has no such channel
    try:
        values = read([key], False)  # (select, fresh), as local_read takes them
    except KeyError:
        return None  # the graph has no such channel
    return values if isinstance(values, Mapping) else None


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
    answers: dict[tuple[str, str, str, bool, Run | None], Place] = {}

    def ask(ns: str, theirs: str, mine: str, elsewhere: bool, run: Run | None) -> Place:
        question = (ns, theirs, mine, elsewhere, run)
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
                settled=op.status.value in ANSWERED_STATES,
            )
        except _Unanswered as missing:
            answers[missing.question] = yield Hook(_ask_lineage, (timeline, missing.question))


class _Unanswered(Exception):
    """``judge`` asked the lineage a question not read yet."""

    def __init__(self, question: tuple[str, str, str, bool, Run | None]) -> None:
        super().__init__(question)
        self.question = question


def _ask_lineage(arg: tuple[Timeline, tuple[str, str, str, bool, Run | None]]) -> Place:
    timeline, question = arg
    return timeline.delivered(*question)


def find_operation(
    call: Any, prepared: Prepared, prepare: Any
) -> Generator[Action, Any, tuple[Any, Prepared]]:
    """Walk ``call``'s candidate ids from ``prepared`` (its first candidate's prepare) to
    its operation.

    ``call`` is an ``EffectCall``; ``prepare(call)`` the ``Prepare`` action for one
    candidate. Returns the call at its operation's candidate and that prepare's
    result (an adopted record as the adoption wrote it). An intent key's call has
    one operation and is never walked.
    """
    if call.fixed_id:
        return call, prepared
    for _ in range(2 * MAX_CANDIDATES):  # each candidate, and a judge again after an adoption lost
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
        if call.index > MAX_CANDIDATES:
            break
        prepared = yield from ledger(prepare(call))
    raise EffectsError(  # pragma: no cover - ten thousand identical calls on one thread
        f"operation {call.operation_id!r}: no free candidate id up to {MAX_CANDIDATES}"
    )


def _adopt(call: Any, op: Operation) -> Generator[Action, Any, Operation | None]:
    """Add the call's origin to ``op``'s (one conditional write)."""
    mine = call.timeline.origin(call.tool_call_id)
    origins = (*decode_origins(op.origin), mine)
    return (yield from ledger(Adopt(op.key, encode_origins(origins), op.origin)))
