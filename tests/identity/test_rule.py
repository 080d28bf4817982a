"""``core.identity.judge``, row by row of docs/identity.md, without a graph or a database.

A lineage is a dict ``{checkpoint: (parent, source)}``; ``delivered`` answers from it
as ``decide.identity.Timeline`` answers from a checkpointer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from langgraph_effects.core.identity import (
    Origin,
    Place,
    Run,
    Verdict,
    decode_origins,
    encode_origins,
    judge,
    meeting,
)

Lineage = dict[str, tuple[str | None, str]]

# c1 -> c2 (loop) -> c3 (loop) -> c4 (input over c3) -> c5 (loop)
#   c2 -> f3 (a fork from before c2's answer) -> f4;  c3 -> g4 (a fork after it) -> g5
LINE: Lineage = {
    "c1": (None, "input"),
    "c2": ("c1", "loop"),
    "c3": ("c2", "loop"),
    "c4": ("c3", "input"),
    "c5": ("c4", "loop"),
    "f3": ("c2", "fork"),
    "f4": ("f3", "loop"),
    "g4": ("c3", "update"),
    "g5": ("g4", "loop"),
}


def reader(line: Lineage, asked: list[tuple[str, str, str, bool]] | None = None):  # type: ignore[no-untyped-def]
    def delivered(
        ns: str, theirs: str, mine: str, elsewhere: bool, run: Run | None = None
    ) -> Place:
        if asked is not None:
            asked.append((ns, theirs, mine, elsewhere))
        at: str | None = mine
        while at is not None:
            parent, source = line[at]
            if parent == theirs and source == "loop":
                return Place.MINE
            at = None if parent == theirs else parent
        if elsewhere and any(p == theirs and s == "loop" for p, s in line.values()):
            return Place.ELSEWHERE
        return Place.NOWHERE

    return delivered


def at(task: str, call: str, *steps: tuple[str, str], asked: bool = False) -> Origin:
    return Origin(task=task, call=call, steps=tuple(steps), asked=asked)


ROOT = ""


def test_the_same_task_and_call_is_the_same_operation_without_reading_the_lineage() -> None:
    """A crash, an interrupt or a RetryPolicy re-run: the hot path asks nothing."""
    asked: list[tuple[str, str, str, bool]] = []
    e = at("t1", "call-1", (ROOT, "c2"))
    verdict = judge([e], "call-1", at("t1", "call-1", (ROOT, "c2")), reader(LINE, asked))
    assert verdict is Verdict.SAME
    assert asked == []


@pytest.mark.parametrize(
    ("theirs", "mine"),
    [
        (at("t1", "call-1", (ROOT, "c2")), at("t1", "call-2", (ROOT, "c2"))),  # one AIMessage
        (at("t1", "call-1", (ROOT, "c2")), at("t2", "call-1", (ROOT, "c2"))),  # two branches
        (  # two subgraph tasks of one parent step
            at("t1", "x", (ROOT, "c2"), ("sub:a", "s1")),
            at("t2", "y", (ROOT, "c2"), ("sub:b", "s9")),
        ),
        (at("t1", "x", (ROOT, "c2")), at("t2", "y", (ROOT, "c2"), ("sub:b", "s9"))),
    ],
)
def test_a_record_of_my_very_step_by_another_task_or_call_is_a_siblings(
    theirs: Origin, mine: Origin
) -> None:
    assert judge([theirs], theirs.call, mine, reader(LINE)) is Verdict.NEXT


def test_delivered_in_my_timeline_is_answered_whatever_the_id() -> None:
    """Its step completed on my lineage (the child was written by the loop): a repeat,
    a reused id (call_0 again), a trimmed or summarized thread."""
    e = at("t1", "call_0", (ROOT, "c2"))
    assert judge([e], "call_0", at("t9", "call_0", (ROOT, "c3")), reader(LINE)) is Verdict.NEXT
    assert judge([e], "call_0", at("t9", "other", (ROOT, "c5")), reader(LINE)) is Verdict.NEXT


def test_answered_in_my_state_is_answered_without_reading_the_lineage() -> None:
    """My state lists the record's operation (``effect_operations``): its answer reached
    my timeline, whether or not a checkpoint of its step was saved (``durability="exit"``
    saves none); a record written before origins too. The same task re-run is still the
    same operation (its own answer is never in its state)."""
    asked: list[tuple[str, str, str, bool]] = []
    never_saved = at("t1", "call-1", (ROOT, "gone"))
    mine = at("t9", "call-1", (ROOT, "c5"))
    delivered = reader(LINE, asked)
    assert judge([never_saved], "call-1", mine, delivered, answered=True) is Verdict.NEXT
    assert judge([never_saved], "call-1", mine, delivered) is Verdict.ADOPT  # the lineage alone
    assert judge([], "call-1", mine, delivered, answered=True) is Verdict.NEXT
    assert judge([never_saved], "call-1", never_saved, delivered, answered=True) is Verdict.SAME
    assert len(asked) == 1  # only the judgement without the state read the lineage


def test_first_open_skips_only_the_answered_candidates() -> None:
    from langgraph_effects.core.identity import first_open

    ids = [f"op-{i}" for i in range(6)]
    assert first_open(0, ids.__getitem__, frozenset()) == 0
    assert first_open(0, ids.__getitem__, frozenset(ids[:3])) == 3
    assert first_open(1, ids.__getitem__, frozenset({ids[0], ids[2]})) == 1
    assert first_open(2, ids.__getitem__, frozenset({ids[0], ids[2], ids[3]})) == 4


def test_nth_open_counts_only_the_open_candidates() -> None:
    """The call after ``n`` twins starts at the ``n``-th candidate the state does not list
    as answered: each open one before it is an earlier twin's start."""
    from langgraph_effects.core.identity import nth_open

    ids = [f"op-{i}" for i in range(9)]
    assert nth_open(0, 0, ids.__getitem__, frozenset()) == 0
    assert nth_open(5, 0, ids.__getitem__, frozenset()) == 5
    assert nth_open(2, 1, ids.__getitem__, frozenset()) == 3
    answered = frozenset({ids[0], ids[1], ids[3]})
    assert [nth_open(n, 0, ids.__getitem__, answered) for n in range(4)] == [2, 4, 5, 6]
    assert nth_open(1, 3, ids.__getitem__, answered) == 5


def test_an_abandoned_step_or_a_lost_checkpoint_is_the_same_operation_met_again() -> None:
    """New input over the step (``input`` child), or a step checkpoint never saved (the
    AIMessage lost under default durability): the answer never reached this timeline."""
    abandoned = at("t1", "call-1", (ROOT, "c3"))
    assert judge([abandoned], "call-1", at("t2", "call-9", (ROOT, "c5")), reader(LINE)) is (
        Verdict.ADOPT
    )
    lost = at("t1", "call-1", (ROOT, "gone"))
    assert judge([lost], "call-1", at("t2", "call-9", (ROOT, "c5")), reader(LINE)) is (
        Verdict.ADOPT
    )


def test_a_fork_from_before_the_answer_replays_unless_the_effect_says_new() -> None:
    """E ran at c2 and was delivered on the main line (c3); a fork f3 from c2 meets it."""
    e = at("t1", "call-1", (ROOT, "c2"))
    mine = at("t7", "call-1", (ROOT, "f3"))
    assert judge([e], "call-1", mine, reader(LINE)) is Verdict.ADOPT
    assert judge([e], "call-1", mine, reader(LINE), forks="new") is Verdict.NEXT
    # Not delivered anywhere (the step never completed): the same operation either way.
    pending = at("t1", "call-1", (ROOT, "c3"))  # new input (c4) over its step
    assert judge([pending], "call-1", at("t7", "call-1", (ROOT, "c5")), reader(LINE), "new") is (
        Verdict.ADOPT
    )


def test_a_fork_after_the_answer_that_asks_again_is_a_new_operation() -> None:
    e = at("t1", "call-1", (ROOT, "c2"))
    assert judge([e], "call-1", at("t8", "call-2", (ROOT, "g5")), reader(LINE)) is Verdict.NEXT


def test_an_asked_record_is_its_own_calls_and_not_anothers() -> None:
    """An approval node asked at c1; the tool task of c2 answers the same call (adopt);
    another call of that AIMessage (an identical sibling) is not it."""
    asked = at("approve", "call-1", (ROOT, "c1"), asked=True)
    mine = at("t2", "call-1", (ROOT, "c2"))
    assert judge([asked], "call-1", mine, reader(LINE)) is Verdict.ADOPT
    sibling = at("t2", "call-2", (ROOT, "c2"))
    assert judge([asked], "call-1", sibling, reader(LINE)) is Verdict.NEXT
    # Once answered (its tool task's step completed), a reused id is a new call.
    again = at("t5", "call-1", (ROOT, "c5"))
    assert judge([asked, mine], "call-1", again, reader(LINE)) is Verdict.NEXT


def test_subgraph_levels_are_compared_below_an_equal_parent() -> None:
    """A sub-agent's earlier turn inside one parent step is delivered at the sub level; a
    new parent step decides at the root, whatever the sub level holds."""
    sub = {"s1": (None, "input"), "s2": ("s1", "loop"), "s3": ("s2", "loop")}
    line = {**LINE, **sub}
    e = at("t1", "x", (ROOT, "c2"), ("sub:a", "s1"))
    assert judge([e], "x", at("t2", "x", (ROOT, "c2"), ("sub:a", "s3")), reader(line)) is (
        Verdict.NEXT
    )
    assert meeting(e.steps, ((ROOT, "c3"), ("sub:b", "s1"))) == (ROOT, "c2", "c3")
    assert judge([e], "x", at("t2", "x", (ROOT, "c3"), ("sub:b", "s1")), reader(line)) is (
        Verdict.NEXT
    )


def test_without_a_lineage_only_the_same_task_is_the_same_operation() -> None:
    e = at("t1", "call-1", (ROOT, "c2"))
    assert judge([e], "call-1", at("t1", "call-1", (ROOT, "c2")), None) is Verdict.SAME
    assert judge([e], "call-1", at("t2", "call-1", (ROOT, "c3")), None) is Verdict.NEXT


def test_a_record_written_before_origins_is_met_by_its_own_tool_call_only() -> None:
    mine = at("t2", "call-1", (ROOT, "c3"))
    assert judge([], "call-1", mine, reader(LINE)) is Verdict.ADOPT
    assert judge([], "call-0", mine, reader(LINE)) is Verdict.NEXT


def test_origins_round_trip_as_the_record_keeps_them() -> None:
    origins = [
        at("t1", "c", (ROOT, "c2"), ("sub:a", "s1")),
        at("t2", "d", (ROOT, "c3"), asked=True),
    ]
    assert decode_origins(encode_origins(origins)) == tuple(origins)
    assert decode_origins(None) == ()


def test_the_docs_table_names_every_verdict_once() -> None:
    """docs/identity.md holds the one copy of the table; the README and ARCHITECTURE.md
    point at it instead of repeating it."""
    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "identity.md").read_text()
    assert "| path | operation | why |" in page
    for other in ("README.md", "ARCHITECTURE.md"):
        text = (root / other).read_text()
        assert "docs/identity.md" in text
        assert "| path | operation | why |" not in text


def test_an_exit_records_run_is_asked_about_only_once_its_outcome_is_recorded() -> None:
    """An origin written under ``durability="exit"`` names its run; ``judge`` hands it to the
    lineage reader (which places an unsaved step by the run's end) only when the record's
    outcome is recorded: a record still dispatching was never answered, so no run delivered
    it, and it is met again (adopted) whatever checkpoints followed."""
    run = Run(ns=ROOT, since="c1", token="r1")
    e = Origin(task="t1", call="call-1", steps=((ROOT, "x2"),), runs=(run,))
    mine = at("t2", "call-2", (ROOT, "c5"))
    handed: list[Run | None] = []

    def delivered(ns: str, theirs: str, me: str, elsewhere: bool, r: Run | None = None) -> Place:
        handed.append(r)
        return Place.MINE if r is not None else Place.NOWHERE

    assert judge([e], "call-1", mine, delivered) is Verdict.NEXT
    assert judge([e], "call-1", mine, delivered, settled=False) is Verdict.ADOPT
    assert handed == [run, None]
    assert decode_origins(encode_origins([e])) == (e,)  # the run is kept with the record
