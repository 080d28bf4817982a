"""A call's place among identical calls of its thread, counted in one pass for a task's calls.

``_faces.Occurrences`` gives the ``occurrence`` of ``occurrence_operation_id``: the
identical calls (same tool, same canonical arguments) of earlier AIMessages that
were answered, plus the call's index among identical calls of its own AIMessage,
the last AIMessage holding its id being its own. The property test checks it
against that definition read literally, one scan per call.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from langgraph_effects import _faces, effect
from langgraph_effects._faces import Occurrences, effect_calls
from langgraph_effects.core.digest import canonical_json
from langgraph_effects.errors import EffectsError


def _canonical(args: Any) -> bytes | None:
    try:
        return canonical_json(args)
    except EffectsError:
        return None


def _definition(messages: list[Any], tool_call: dict[str, Any]) -> int | None:
    """The occurrence as defined, one scan of the thread for this call."""
    call_id, args = tool_call.get("id"), _canonical(tool_call["args"])
    if not call_id or not messages:
        return None
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    earlier, found = 0, None
    for message in messages:
        if not isinstance(message, AIMessage):
            continue
        twins = [
            tc
            for tc in message.tool_calls
            if tc["name"] == tool_call["name"] and _canonical(tc["args"]) == args
        ]
        for index, twin in enumerate(twins):
            if twin["id"] == call_id:
                found = earlier + index
        earlier += sum(1 for twin in twins if twin["id"] in answered)
    return found


_IDS = ["call_0", "call_1", "c-2", "", None]  # models reuse ids; some send none
_calls = st.builds(
    lambda name, args, call_id: {"name": name, "args": args, "id": call_id, "type": "tool_call"},
    st.sampled_from(["close", "mail"]),
    st.sampled_from([{"case": "A"}, {"case": "B"}, {}, {"case": float("nan")}, {"n": 1.5}]),
    st.sampled_from(_IDS),
)
_messages = st.one_of(
    st.lists(_calls, max_size=4).map(lambda calls: AIMessage(content="", tool_calls=calls)),
    st.sampled_from(["call_0", "call_1", "c-2"]).map(
        lambda i: ToolMessage(content="ok", tool_call_id=i)
    ),
    st.just(HumanMessage(content="again")),
)


@given(st.lists(_messages, max_size=8), _calls)
@settings(max_examples=300)
def test_occurrences_are_the_definitions(messages: list[Any], other: dict[str, Any]) -> None:
    """Ids reused across turns, answered and unanswered twins, calls without ids, arguments
    that are not JSON: every call (and one asked from outside the thread) gets the place
    the definition gives, from one ``Occurrences`` shared by all the questions."""
    state = {"messages": messages}
    occurrences = Occurrences(state)
    asked = [tc for m in messages if isinstance(m, AIMessage) for tc in m.tool_calls] + [other]
    for tool_call in asked:
        canonical = _canonical(tool_call["args"])
        if canonical is None:
            continue  # build_call asks only for a call it could canonicalise
        assert occurrences.of(tool_call, canonical) == _definition(messages, tool_call)


@effect("tickets.create")
def create_ticket(title: str) -> str:
    """Create a ticket."""
    return f"created {title}"


@pytest.mark.parametrize("n", [1, 10])
def test_the_calls_of_one_message_are_canonicalised_once_each(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Building the n identical calls of one AIMessage canonicalises each call's arguments
    at most twice (its own identity, the thread's pass), not once per pair of calls; the
    calls keep their places 0..n-1."""
    earlier = [
        AIMessage(
            content="",
            tool_calls=[{"name": "create_ticket", "args": {"title": "t"}, "id": "old"}],
        ),
        ToolMessage(content="ok", tool_call_id="old"),
    ]
    tool_calls = [
        {"name": "create_ticket", "args": {"title": "t"}, "id": f"call-{k}", "type": "tool_call"}
        for k in range(n)
    ]
    state = {"messages": [*earlier, AIMessage(content="", tool_calls=tool_calls)]}
    seen: list[Any] = []

    def counting(value: Any) -> bytes:
        seen.append(value)
        return canonical_json(value)

    monkeypatch.setattr(_faces, "canonical_json", counting)
    calls = effect_calls(
        {"create_ticket": create_ticket}, tool_calls, thread=("w", "default"), state=state
    )
    assert [c.occurrence for c in calls] == [1 + k for k in range(n)]  # one answered before
    assert len(seen) <= 2 * n + 1  # the earlier call once, each of the n twice


def test_the_calls_built_together_know_each_other_as_siblings() -> None:
    """Given a siblings mapping, ``effect_calls`` fills it with each built call's draft by
    operation id and every call holds that mapping as its siblings; without one, none."""
    tool_calls = [
        {"name": "create_ticket", "args": {"title": t}, "id": f"call-{t}", "type": "tool_call"}
        for t in ("a", "b", "c")
    ]
    state = {"messages": [AIMessage(content="", tool_calls=tool_calls)]}
    tools = {"create_ticket": create_ticket}
    siblings: dict[str, Any] = {}
    calls = effect_calls(tools, tool_calls, thread=("w", "default"), state=state, siblings=siblings)
    assert siblings == {c.operation_id: c.draft() for c in calls}
    assert all(c.siblings is siblings for c in calls)
    alone = effect_calls(tools, tool_calls, thread=("w", "default"), state=state)
    assert [c.operation_id for c in alone] == list(siblings)
    assert all(c.siblings == {} for c in alone)
