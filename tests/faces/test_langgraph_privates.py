"""What the faces rely on in LangGraph and LangChain beyond their public API, each guarded.

Where no public hook exists, the package uses the private name as it is today; each
test here fails, with a message naming what changed and where we use it, the day
LangGraph or LangChain changes it (never a silent fallback).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.errors import GraphInterrupt
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Interrupt

from langgraph_effects.middleware import _HITL_EDITS, _per_call_review
from langgraph_effects.node import _tool_calls_of


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


def _tool_message(tool_: Any, call: dict[str, Any]) -> Any:
    """What a plain ToolNode answers ``call`` with, inside a graph (ToolNode needs one)."""
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([tool_]))
    builder.add_edge(START, "tools")
    out = builder.compile().invoke({"messages": [AIMessage(content="", tool_calls=[call])]})
    return out["messages"][-1]


def _asking_graph(node: Any) -> Any:
    """A graph of the one node ``node`` (which asks with ``interrupt()``), checkpointed."""
    from langgraph.checkpoint.memory import InMemorySaver

    builder = StateGraph(MessagesState)
    builder.add_node("ask", node)
    builder.add_edge(START, "ask")
    return builder.compile(checkpointer=InMemorySaver())


def _changed(what: str, where: str) -> str:
    return f"LangGraph/LangChain changed {what}: update {where} (tests/faces/{__name__}.py)"


@pytest.mark.parametrize(
    "output",
    ["text", {"a": 1, "b": [1, 2]}, [{"type": "text", "text": "x"}], ["a", "b"], 3.5, None, object],
    ids=["str", "dict", "blocks", "strings", "float", "none", "object"],
)
def test_msg_content_output_is_how_toolnode_makes_a_tool_message_s_content(output: Any) -> None:
    """``decide.messages`` and ``_faces.Execution`` build a replayed answer's content as
    ToolNode builds a first run's: with ``langgraph.prebuilt.tool_node.msg_content_output``
    (not in ``langgraph.prebuilt.__all__``)."""
    from langgraph.prebuilt import tool_node

    convert = getattr(tool_node, "msg_content_output", None)
    assert callable(convert), _changed(
        "langgraph.prebuilt.tool_node.msg_content_output (gone)",
        "langgraph_effects/decide/messages.py and _faces.py",
    )

    @tool
    def returns() -> Any:
        """Return the output."""
        return output

    call = {"name": "returns", "args": {}, "id": "c1", "type": "tool_call"}
    made = _tool_message(returns, call)
    assert made.content == convert(output), _changed(
        "how ToolNode turns a tool's return into ToolMessage content "
        "(no longer msg_content_output)",
        "langgraph_effects/decide/messages.py and _faces.py",
    )


def test_toolnode_reads_its_input_as_the_node_does() -> None:
    """``node._tool_calls_of`` restates ToolNode's input parser (a list of calls, the
    ``tool_call_with_context`` marker of the Send API, a state): it must find the calls
    ToolNode runs, or the node's batch is prepared for the wrong calls (or none)."""
    node = ToolNode([echo])
    parse = getattr(node, "_parse_input", None)
    assert callable(parse), _changed("ToolNode._parse_input (gone)", "node._tool_calls_of")
    call = {"name": "echo", "args": {"text": "x"}, "id": "c1", "type": "tool_call"}
    other = {"name": "echo", "args": {"text": "y"}, "id": "c2", "type": "tool_call"}
    ai = AIMessage(content="", tool_calls=[call, other])
    inputs = {
        "a list of tool calls": [call, other],
        "tool_call_with_context": {
            "__type": "tool_call_with_context",
            "tool_call": call,
            "state": {},
        },
        "a list of messages": [HumanMessage(content="hi"), ai],
        "a dict state": {"messages": [HumanMessage(content="hi"), ai]},
    }
    for form, given in inputs.items():
        theirs, _kind = parse(given)
        ours, _state = _tool_calls_of(given, "messages")
        assert [dict(c) for c in ours] == [dict(c) for c in theirs], _changed(
            f"ToolNode's reading of {form}", "node._tool_calls_of"
        )


def test_the_send_api_marker_is_the_one_the_node_reads() -> None:
    """The marker ``create_react_agent`` (the Send API) puts on one call with its state."""
    from langgraph.prebuilt import chat_agent_executor, tool_node

    source = Path(chat_agent_executor.__file__).read_text(encoding="utf-8")
    assert hasattr(tool_node, "ToolCallWithContext"), _changed(
        "langgraph.prebuilt.tool_node.ToolCallWithContext (gone)", "node._tool_calls_of"
    )
    assert '__type="tool_call_with_context"' in source, _changed(
        'the Send API marker (no longer __type="tool_call_with_context")', "node._tool_calls_of"
    )


def test_hitl_keeps_a_batched_edit_under_the_state_key_the_middleware_reads() -> None:
    """``middleware._reviewed`` finds a reviewer's batched edit in HITL's private state key."""
    from langchain.agents.middleware import human_in_the_loop as hitl

    key = getattr(hitl, "_EDITED_TOOL_CALLS_KEY", None)
    assert key == _HITL_EDITS, _changed(
        f"HumanInTheLoopMiddleware's edit state key ({key!r}, we read {_HITL_EDITS!r})",
        "middleware._HITL_EDITS",
    )
    fields = getattr(hitl.HumanInTheLoopMiddleware.state_schema, "__annotations__", {})
    assert _HITL_EDITS in fields, _changed(
        f"HumanInTheLoopMiddleware's state schema (no {_HITL_EDITS!r})", "middleware._HITL_EDITS"
    )


def test_a_graph_interrupt_carries_its_interrupts_as_its_first_argument() -> None:
    """``middleware._per_call_review`` reads the interrupts of a ``GraphInterrupt`` from
    ``args[0]`` (LangGraph has no public attribute for them), and HITL's per-call request
    is ``type: "tool_approval"``."""
    from langchain.agents.middleware import human_in_the_loop as hitl

    request = {"type": "tool_approval", "tool_call": {}}
    raised = GraphInterrupt([Interrupt(value=request, id="i1")])
    assert list(raised.args[0]) == [Interrupt(value=request, id="i1")], _changed(
        "where GraphInterrupt keeps its interrupts (args[0])", "middleware._per_call_review"
    )
    assert _per_call_review(raised)
    assert not _per_call_review(GraphInterrupt([Interrupt(value={"type": "other"}, id="i2")]))
    source = Path(hitl.__file__).read_text(encoding="utf-8")
    assert 'type="tool_approval"' in source, _changed(
        'HITL\'s per-call request type (no longer "tool_approval")', "middleware._per_call_review"
    )


def test_a_task_s_interrupt_ids_and_resume_values_are_where_a_refusal_reads_them() -> None:
    """``decide.drive`` asks a refused answer again under the id LangGraph answers next:
    ``langgraph.types._interrupt_id(checkpoint_ns, values held)``, with the task's values in
    ``configurable["__pregel_scratchpad"].resume`` (a list)."""
    from langgraph.config import get_config
    from langgraph.types import Command, interrupt

    from langgraph_effects.decide import drive

    seen: list[Any] = []

    def node(state: MessagesState) -> dict[str, Any]:
        conf = get_config()["configurable"]
        seen.append((conf.get(drive._CHECKPOINT_NS), conf.get(drive._SCRATCHPAD)))
        interrupt("first")
        interrupt("second")
        return {}

    graph = _asking_graph(node)
    cfg = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": []}, cfg)
    graph.invoke(Command(resume="one"), cfg)
    [asked] = graph.get_state(cfg).interrupts
    ns, scratchpad = seen[-1]
    resume = getattr(scratchpad, "resume", None)
    changed = _changed(
        "a task's interrupt ids or its resume values (_interrupt_id, scratchpad.resume)",
        "langgraph_effects/decide/drive.py",
    )
    assert isinstance(ns, str), changed
    assert resume == ["one"], changed
    assert asked.id == drive._interrupt_id(ns, len(resume)), changed


def test_the_value_held_for_a_task_s_next_interrupt_is_read_where_langgraph_keeps_it() -> None:
    """``decide.drive._next_value`` reads, without taking it, the value LangGraph hands the
    task's next ``interrupt()``: ``scratchpad.resume[k]`` where k is the interrupt counter
    (``scratchpad.interrupt_counter``, a ``LazyAtomicCounter`` over ``itertools.count``,
    read from its repr), else the value given by position (``get_null_resume``), which
    ``_claim_held`` moves into ``resume`` as ``interrupt()`` itself does."""
    from langgraph.types import Command, interrupt

    from langgraph_effects.decide import drive

    changed = _changed(
        "a task's interrupt counter or where it keeps resume values (interrupt_counter, "
        "scratchpad.resume, get_null_resume)",
        "langgraph_effects/decide/drive.py (_next_value, _claim_held)",
    )
    seen: list[tuple[Any, ...]] = []

    def node(state: MessagesState) -> dict[str, Any]:
        pad = drive._scratchpad()
        seen.append(("start", drive._interrupts_reached(pad), drive._next_value()))
        if drive._next_value() is not None:
            assert drive._claim_held(), changed
        first = interrupt("first")
        seen.append(("first", drive._interrupts_reached(pad), first, drive._next_value()))
        second = interrupt("second")
        seen.append(("second", drive._interrupts_reached(pad), second))
        return {}

    graph = _asking_graph(node)
    cfg = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": []}, cfg)
    assert seen == [("start", 0, None)], changed
    seen.clear()
    graph.invoke(Command(resume="one"), cfg)  # by position: the null resume
    assert seen == [("start", 0, "one"), ("first", 1, "one", None)], changed
    seen.clear()
    [asked] = graph.get_state(cfg).interrupts
    graph.invoke(Command(resume={asked.id: "two"}), cfg)  # by interrupt id
    assert seen == [
        ("start", 0, "one"),
        ("first", 1, "one", "two"),
        ("second", 2, "two"),
    ], changed


def test_a_run_resumed_by_interrupt_id_carries_its_map_where_the_drive_reads_it() -> None:
    """``decide.drive._given_by_position`` tells a run resumed by interrupt id
    (``Command(resume={id: value})``) from one resumed by position by the run's
    ``configurable["__pregel_resume_map"]``: the map in the first, nothing in the second.
    If LangGraph moves it, a stale value given by position would again answer a question
    asked after the person answered by id."""
    from langgraph.config import get_config
    from langgraph.types import Command, interrupt

    from langgraph_effects.decide import drive

    changed = _changed(
        "where a run keeps Command(resume={interrupt_id: value}) (__pregel_resume_map)",
        "langgraph_effects/decide/drive.py (_given_by_position)",
    )
    seen: list[Any] = []

    def node(state: MessagesState) -> dict[str, Any]:
        seen.append(get_config()["configurable"].get(drive._RESUME_MAP))
        interrupt("first")
        interrupt("second")
        return {}

    graph = _asking_graph(node)
    cfg = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": []}, cfg)
    graph.invoke(Command(resume="one"), cfg)  # by position
    [asked] = graph.get_state(cfg).interrupts
    graph.invoke(Command(resume={asked.id: "two"}), cfg)  # by interrupt id
    assert not seen[0], changed
    assert not seen[1], changed
    assert seen[2] == {asked.id: "two"}, changed


def test_a_send_task_reads_the_graph_s_channel_where_the_faces_read_answers() -> None:
    """``decide.identity.graph_answers`` reads ``effect_operations`` through the task's
    ``__pregel_read`` (a task fed a ``Send`` payload sees no graph state of its own): it
    returns the graph's channel, and None in a graph without it (a ``KeyError`` there)."""
    from langchain_core.runnables import RunnableConfig
    from langgraph.types import Send

    from langgraph_effects import EffectState
    from langgraph_effects.decide.identity import graph_answers

    class State(MessagesState, EffectState):
        pass

    seen: list[Any] = []

    def worker(payload: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        seen.append(graph_answers(config))
        return {}

    for state, start in ((State, {"effect_operations": ["op-1"]}), (MessagesState, {})):
        builder = StateGraph(state)
        builder.add_node("worker", worker)
        builder.add_conditional_edges(START, lambda s: [Send("worker", {"x": 1})], ["worker"])
        builder.compile().invoke({"messages": [HumanMessage("hi")], **start})
    assert seen == [frozenset({"op-1"}), None], _changed(
        f"__pregel_read of a Send task's config (read {seen})", "decide.identity.graph_answers"
    )


@pytest.mark.parametrize("durability", ["exit", "sync"])
def test_a_task_s_call_is_bound_to_its_loop_which_names_where_its_run_started(
    durability: str,
) -> None:
    """``decide.identity._runs`` reads a task's run at every graph level from the loop its
    ``__pregel_call`` is bound to (``schedule_task``), and the parent graph's through that
    loop's config: the checkpoint each loop started from (``_initial_checkpoint_config``,
    when ``_has_persisted_parent``), which the checkpoint saved at a run's end under
    ``"exit"`` names as its parent; ``""`` at a level where nothing was saved before."""
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.memory import InMemorySaver

    from langgraph_effects.decide.identity import _TASK_CALL, _runs

    seen: list[Any] = []

    def inner(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        seen.append((_runs(config["configurable"].get(_TASK_CALL)), config))
        return {}

    sub = StateGraph(MessagesState)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    worker = sub.compile()
    builder = StateGraph(MessagesState)
    builder.add_node("worker", lambda state: worker.invoke(state))
    builder.add_edge(START, "worker")
    saver = InMemorySaver()
    graph = builder.compile(checkpointer=saver)
    cfg: Any = {"configurable": {"thread_id": "t"}}
    for _ in range(2):
        graph.invoke({"messages": [HumanMessage("hi")]}, cfg, durability=durability)
    ends = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg)]  # newest first
    (first, config1), (second, _) = seen
    levels = [list(config1["configurable"]["checkpoint_map"]), [r.ns for r in first]]
    changed = _changed(f"__pregel_call's loop (read {first}, {second})", "decide.identity._runs")
    assert levels[0] == levels[1], changed
    assert len(first) == len(second) == 2, changed
    assert [r.since for r in first] == ["", ""], changed
    if durability == "exit":  # two saved: each run's end
        assert second[0].since == ends[-1], changed  # the first run's end
    assert second[0].since, changed
    assert second[1].since == "", changed
    assert len({r.token for r in (*first, *second)}) == 4, changed  # one per loop


def test_the_request_a_person_answered_is_read_where_langgraph_saves_it() -> None:
    """``decide.drive._shown_place`` / ``_read_shown`` (the ``Shown`` action) read the
    request LangGraph showed for a value given in this run: the task's pending interrupt
    among its step checkpoint's writes (``(task id, "__interrupt__", [Interrupt])``, read
    with ``get_tuple`` from ``configurable["__pregel_checkpointer"]``, the step in
    ``checkpoint_map``, the task in ``__pregel_task_id``). A value given by position takes
    the place after the task's saved values; one given by id is put there under that
    place's id, or the first place's (which LangGraph also accepts); a value handed back
    reads nothing. If LangGraph moves any of these, an answer to a request shown after a
    crash would again be applied to the question asked now."""
    from langgraph.types import Command

    from langgraph_effects.decide import drive

    changed = _changed(
        "where a task's pending interrupt is saved or how a resume value takes its place "
        "(checkpoint pending_writes, __pregel_checkpointer, checkpoint_map, resume_map)",
        "langgraph_effects/decide/drive.py (_given_now, _shown_place, _read_shown)",
    )
    seen: list[tuple[str, Any, Any]] = []
    spaces: list[str] = []

    def node(state: MessagesState) -> dict[str, Any]:
        from langgraph.config import get_config

        spaces.append(get_config()["configurable"][drive._CHECKPOINT_NS])
        for n in ("r1", "r2"):
            value = drive._interrupt({"request_id": n}, Any)
            place = drive._shown_place()
            seen.append((n, value, None if place is None else drive._read_shown(place)))
        return {}

    def run(thread: str, second: Any) -> None:
        graph = _asking_graph(node)
        cfg = {"configurable": {"thread_id": thread}}
        graph.invoke({"messages": []}, cfg)
        graph.invoke(Command(resume="one"), cfg)  # by position
        assert seen == [("r1", "one", {"request_id": "r1"})], changed
        seen.clear()
        [asked] = graph.get_state(cfg).interrupts
        graph.invoke(Command(resume=second(asked)), cfg)
        assert seen[0] == ("r1", "one", None), changed  # handed back: read nothing

    run("by-id", lambda asked: {asked.id: "two"})
    assert seen[1] == ("r2", "two", {"request_id": "r2"}), changed
    seen.clear()
    run("first-id", lambda asked: {drive._interrupt_id(spaces[-1], 0): "two"})
    assert seen[1][:2] == ("r2", "two"), changed  # put at the place after the saved one
