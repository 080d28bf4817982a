"""Which earlier operation a tool call *is*: identity by intent and delivery.

The rule as a table, with why, is ``docs/identity.md``; this module is its
pure half (the walk that reads the ledger and the checkpoints is
``decide.identity``).

A call of action ``a`` with payload digest ``d`` on thread ``W`` has the
candidate ids ``op_0, op_1, ...`` (``core.ids.candidate_operation_id``). Each
write-ahead record carries its **origins**: where the call it was written for
was met (LangGraph's task, the tool-call id, and the checkpoint of the step
that task runs in, at every graph level, root first). A call preparing
``op_k`` either inserts it (a new operation) or meets a record ``E``, and
``judge`` says whether the call is ``E`` again (``SAME``: a re-run of the same
task, no lineage needed; ``ADOPT``: a replay, a fork from before the answer
or a re-proposal whose answer never reached this timeline, and ``E`` gains
the call's origin) or another operation (``NEXT``: a sibling of the same step,
or ``E`` was already delivered in this timeline).

Delivery is known two ways. The thread's state lists the operations answered in
it (the ``effect_operations`` channel the faces write with each answer): state
is per checkpoint, forks inherit their ancestor's, and neither ``RemoveMessage``
nor summarization touches it, and it is saved even under ``durability="exit"``,
which saves no step in between. Where a graph's state has no such channel (the
Functional API, a state without ``EffectState``, a sub-agent's fresh state),
the checkpoint lineage says it: ``judge`` takes a ``Delivered`` callable and
calls it on the rare path alone.

Under ``"exit"`` the lineage holds none of a run's steps, only its end; an origin
written under ``"exit"`` also names its **run** at each level (``Run``: the saved
checkpoint the run started from and a token of the run), so that a later run can
tell the step of a run whose end it descends from (delivered) from the step of a run
that died unsaved (never delivered: met again, adopted).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

__all__ = [
    "ANSWERED_STATES",
    "FORK_MODES",
    "Delivered",
    "ForkMode",
    "Origin",
    "Place",
    "Run",
    "Verdict",
    "decode_origins",
    "encode_origins",
    "first_open",
    "judge",
    "meeting",
    "nth_open",
]

ForkMode = Literal["replay", "new"]
"""What a fork (or replay) of a thread does with an effect delivered on another branch:
``"replay"`` answers it from the record; ``"new"`` sends it again as a new operation."""
FORK_MODES: tuple[ForkMode, ...] = ("replay", "new")

Steps = tuple[tuple[str, str], ...]
"""``(checkpoint_ns, checkpoint_id)`` of the step a task runs in, root level first."""


@dataclass(frozen=True, slots=True)
class Run:
    """Under ``durability="exit"``, the run a step belongs to at one graph level.

    ``since``: the saved checkpoint the run started from at namespace ``ns`` (``""``:
    none was saved there), which the checkpoint saved at the run's end names as its
    parent; ``token``: drawn once per run (per LangGraph loop), so that a step of my own
    run is told from one of another run that started from the same checkpoint.
    """

    ns: str
    since: str
    token: str


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a record's call was met: task, tool-call id, and the step's checkpoints.

    ``asked``: the record was written to ask a person first (an approval node
    before the tool node), not by the task that answers the call. ``runs``: under
    ``durability="exit"``, the run of the step at each level (``Run``); empty otherwise,
    where every step is saved and the lineage alone places it.
    """

    task: str
    call: str
    steps: Steps
    asked: bool = False
    runs: tuple[Run, ...] = ()

    def run(self, ns: str) -> Run | None:
        """The run of the step at namespace ``ns`` (None: not written under ``"exit"``)."""
        for r in self.runs:
            if r.ns == ns:
                return r
        return None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"task": self.task, "call": self.call, "steps": self.steps}
        if self.asked:
            out["asked"] = True
        if self.runs:
            out["runs"] = [[r.ns, r.since, r.token] for r in self.runs]
        return out


_ORIGINS = json.JSONEncoder(separators=(",", ":")).encode
"""``json.dumps(value, separators=(",", ":"))``, its encoder built once, not per call."""


def encode_origins(origins: Sequence[Origin]) -> str:
    """The ``origin`` column's text: a JSON list, in the order the origins were met."""
    return _ORIGINS([o.to_json() for o in origins])


def decode_origins(text: str | None) -> tuple[Origin, ...]:
    """The origins a record holds (none for a record written before origins existed)."""
    if not text:
        return ()
    return tuple(
        Origin(
            task=str(o["task"]),
            call=str(o["call"]),
            steps=tuple((str(ns), str(cid)) for ns, cid in o["steps"]),
            asked=bool(o.get("asked", False)),
            runs=tuple(Run(str(ns), str(since), str(tok)) for ns, since, tok in o.get("runs", ())),
        )
        for o in json.loads(text)
    )


class Verdict(StrEnum):
    SAME = "same"
    """The call is the record's operation again (the same task re-run)."""
    ADOPT = "adopt"
    """The same operation, met from another step: the record gains the call's origin."""
    NEXT = "next"
    """Another operation: try the next candidate id."""


class Place(StrEnum):
    """Where a checkpoint stands from the calling step's point of view."""

    MINE = "mine"
    """A strict ancestor on my lineage whose step completed (its writes were applied)."""
    ELSEWHERE = "elsewhere"
    """Not delivered on my lineage, but its step completed on another branch."""
    NOWHERE = "nowhere"
    """Neither: never saved, or its step abandoned (new input over it, a crash)."""


Delivered = Callable[[str, str, str, bool, Run | None], Place]
"""``delivered(ns, c_E, c_mine, look_elsewhere, run)``: where checkpoint ``c_E`` stands
from ``c_mine`` at namespace ``ns`` (``ELSEWHERE`` only asked for when
``look_elsewhere``); ``run``: the ``Run`` of ``c_E``'s step when it was written under
``durability="exit"`` and its record's outcome is recorded, else None."""

ANSWERED_STATES = frozenset({"confirmed", "rejected", "unknown"})
"""Statuses of a record whose outcome its run recorded (and so could have delivered):
only such a record's ``Run`` is asked about (``judge``, ``settled``)."""


def meeting(theirs: Steps, mine: Steps) -> tuple[str, str, str] | None:
    """The level at which two steps part: ``(ns, their checkpoint, mine)``; None when
    they are one step (equal at every level both have, or different tasks of one
    parent step)."""
    for (ns_a, c_a), (ns_b, c_b) in zip(theirs, mine, strict=False):
        if ns_a != ns_b:
            return None  # two subgraph tasks of the same parent step
        if c_a != c_b:
            return ns_a, c_a, c_b
    return None


def judge(
    origins: Sequence[Origin],
    record_call: str | None,
    mine: Origin,
    delivered: Delivered | None,
    forks: ForkMode = "replay",
    *,
    answered: bool = False,
    settled: bool = True,
) -> Verdict:
    """Whether the call met at ``mine`` is the operation of a record with ``origins``.

    Args:
        origins: the record's origins (empty: written before origins existed).
        record_call: the record's ``tool_call_id``.
        mine: the calling task, its tool-call id and step.
        delivered: reads the checkpoint lineage; None without a checkpointer (then
            only the same task re-run is the same operation).
        forks: the effect's fork rule (``ForkMode``).
        answered: my timeline's state lists the record's operation as answered
            (``effect_operations``).
        settled: the record's outcome is recorded (``ANSWERED_STATES``). One still
            prepared or dispatching was never answered, so no run delivered it: its
            origins' ``Run`` are not asked about (a run that died mid-dispatch, then a
            turn that did not propose it, leaves it to be met again and settled).

    In order: the same task and call (a crash, interrupt or ``RetryPolicy`` re-run)
    is the same; one my state lists as answered was answered already; a record met
    in my very step by another task or call is a sibling's; one whose answer was
    delivered in my timeline (or, with ``forks="new"``, on another branch) was
    answered already; one a person was asked about in my timeline for another call
    is that call's. Anything else is the same operation met again, adopted: a
    replay or fork from before the answer, or a re-proposal whose answer never
    reached this timeline.

    A task's own answer is in its state only once the task has finished and its
    step was applied, so a re-run of the task is never among the answered: the
    first two rows never disagree (``first_open`` relies on it).
    """
    if any(o.task == mine.task and o.call == mine.call for o in origins):
        return Verdict.SAME
    if answered:
        return Verdict.NEXT  # its answer is in my state: delivered in my timeline
    if not origins:
        # Written before origins: only its own tool call is known to be it.
        return Verdict.ADOPT if record_call == mine.call else Verdict.NEXT
    parted = [meeting(o.steps, mine.steps) for o in origins]
    if any(p is None for p in parted):
        return Verdict.NEXT  # a sibling of my step (same AIMessage, branch or fan-out)
    if delivered is None:
        return Verdict.NEXT  # no lineage: protection holds within one task only

    def run(o: Origin, ns: str) -> Run | None:
        return o.run(ns) if settled else None

    met = [(o, p) for o, p in zip(origins, parted, strict=True) if not o.asked]
    for o, p in met:
        assert p is not None
        if delivered(*p, False, run(o, p[0])) is Place.MINE:
            return Verdict.NEXT
    if forks == "new":
        for o, p in met:
            assert p is not None
            if delivered(*p, True, run(o, p[0])) is Place.ELSEWHERE:
                return Verdict.NEXT
    for o, p in zip(origins, parted, strict=True):
        assert p is not None
        if o.asked and o.call != mine.call and delivered(*p, False, run(o, p[0])) is Place.MINE:
            return Verdict.NEXT  # another call of my timeline, asked about first
    return Verdict.ADOPT


def first_open(index: int, candidate: Callable[[int], str], answered: AbstractSet[str]) -> int:
    """The first candidate index from ``index`` whose id my state does not list as
    answered: ``judge`` says ``NEXT`` of every one it skips (an answered record is never
    my task re-run), so the walk need not prepare them. A thread that asked for the
    same call a hundred times pays one prepare for the hundred-and-first, not a
    hundred."""
    while candidate(index) in answered:
        index += 1
    return index


def nth_open(
    n: int, index: int, candidate: Callable[[int], str], answered: AbstractSet[str]
) -> int:
    """The ``n``-th candidate index (from 0) at or after ``index`` that my state does not
    list as answered: where the call after ``n`` identical ones of its AIMessage starts
    (``decide.call.EffectCall.build``). Each open candidate before it is an earlier
    twin's start, which that twin judges first, so the walk need not prepare them: the
    ``k``-th of ``k + 1`` identical calls pays one prepare, not ``k + 1``."""
    if not answered:
        return index + n
    index = first_open(index, candidate, answered)
    for _ in range(n):
        index = first_open(index + 1, candidate, answered)
    return index
