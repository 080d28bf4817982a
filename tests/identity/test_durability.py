"""A deliberate repeat acts under every durability, ``"exit"`` too, counted at a fake CRM.

Under ``durability="exit"`` LangGraph saves one checkpoint when the run ends and none
of the steps in between, so the checkpoint lineage never shows the step that
delivered an answer. The state does: the faces write each answered operation to the
``effect_operations`` channel with its ToolMessage, and the checkpoint saved at exit
holds it (``core.identity.judge``, ``answered``). An adversarial run found the later
turn answered from the first turn's record (2 asked, 1 acted); a plain ``ToolNode``
beside each shows the count LangGraph alone gives.
"""

from __future__ import annotations

from typing import Any

import pytest
from _graphs import Env, State
from _identity_tools import CFG, ask, close_tool, proposer, tool_node
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Send

from langgraph_effects import route_tool_calls
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM

pytestmark = pytest.mark.filterwarnings("ignore::langgraph_effects.DurabilityWarning")

FACES = ["route_tool_calls", "tools_condition", "create_agent"]
DURABILITY = ["exit", None, "sync"]
"""``None``: LangGraph's default (``"async"``), the config carrying no durability key."""


def graph_of(env: Env, crm: FakeCRM, face: str, model: Any, *, plain: bool) -> Any:
    tools = [close_tool(crm, plain=plain)]
    if face == "create_agent":
        from langchain.agents import create_agent

        from langgraph_effects import EffectMiddleware

        return create_agent(
            model,
            tools=tools,
            middleware=[] if plain else [EffectMiddleware(ledger=env.ledger)],
            checkpointer=env.checkpointer,
        )

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", tool_node(env, tools, plain))
    builder.add_edge(START, "agent")
    route = tools_condition if face == "tools_condition" else route_tool_calls
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=env.checkpointer)


@pytest.mark.parametrize("plain", [False, True], ids=["effects", "toolnode"])
@pytest.mark.parametrize("durability", DURABILITY, ids=["exit", "default", "sync"])
@pytest.mark.parametrize("face", FACES)
def test_the_same_request_in_a_later_turn_acts_again(
    env: Env, crm: FakeCRM, face: str, durability: str | None, plain: bool
) -> None:
    """Two turns on one thread, each asking to close case A: 2 asked, 2 acted; the
    first turn's record is not the second's (two confirmed operations)."""
    graph = graph_of(env, crm, face, proposer("fresh"), plain=plain)
    for turn, text in enumerate(["close case A", "close case A again, please"], start=1):
        out = env.invoke(graph, {"messages": [HumanMessage(text)]}, CFG, durability=durability)
        assert crm.effects == turn
        assert out["messages"][-1].content == "done"
    if not plain:
        assert [o.status.value for o in env.ops()] == ["confirmed", "confirmed"]


def twice_in_one_run() -> ScriptedChatModel:
    """After the human message close case A; after its answer close it again (the model
    was told to do it twice); then done. All in one invoke."""

    def reply(messages: list[BaseMessage]) -> AIMessage:
        answers = sum(isinstance(m, ToolMessage) for m in messages)
        if answers >= 2:
            return AIMessage(content="done")
        call = {"name": "close_case", "args": {"case_id": "A"}, "id": f"call-{answers + 1}"}
        return AIMessage(content="", tool_calls=[call], id=f"ai-{answers + 1}")

    return ScriptedChatModel(script=reply)


@pytest.mark.parametrize("plain", [False, True], ids=["effects", "toolnode"])
@pytest.mark.parametrize("face", FACES)
def test_a_repeat_in_a_later_step_of_the_same_exit_run_acts(
    env: Env, crm: FakeCRM, face: str, plain: bool
) -> None:
    """The earlier step of the same run is never saved under ``"exit"``; its answer is in
    the state the later step sees: 2 asked, 2 acted."""
    graph = graph_of(env, crm, face, twice_in_one_run(), plain=plain)
    env.invoke(graph, {"messages": [HumanMessage("close A twice")]}, CFG, durability="exit")
    assert crm.effects == 2


@pytest.mark.parametrize("face", FACES)
def test_an_exit_turn_run_again_from_its_start_sends_nothing_again(
    env: Env, crm: FakeCRM, face: str
) -> None:
    """The other half: the second turn run again from the checkpoint it started from (a
    fork of the first turn's end asking what the second turn asked, whose state never
    held the second answer) is answered from the second turn's record, twice: 2 acts in
    all, as under ``"sync"`` (time travel never re-sends a delivered effect)."""
    graph = graph_of(env, crm, face, proposer("fresh"), plain=False)
    ask_exit = {"durability": "exit"}
    env.invoke(graph, {"messages": [HumanMessage("close case A")]}, CFG, **ask_exit)
    state = graph.get_state(CFG) if not env.is_async else env.run(graph.aget_state(CFG))
    start = state.config
    env.invoke(graph, {"messages": [HumanMessage("close case A again")]}, CFG, **ask_exit)
    assert crm.effects == 2
    for _ in range(2):
        # A fork of the first turn's end that asks the second time again, as the turn did.
        env.invoke(graph, {"messages": [HumanMessage("close case A again")]}, start, **ask_exit)
    assert crm.effects == 2  # neither run from the first turn's end sent again


def test_the_rule_of_exit_holds_with_trimmed_messages(env: Env, crm: FakeCRM) -> None:
    """``RemoveMessage`` trimming between turns under ``"exit"``: the state's
    ``effect_operations`` is untouched, 2 asked, 2 acted."""
    from _identity_tools import agent_graph

    graph = agent_graph(env, crm, plain=False, trim=True)
    env.invoke(graph, {"messages": [HumanMessage("close case A")]}, CFG, durability="exit")
    out = env.invoke(graph, {"messages": [HumanMessage("again")]}, CFG, durability="exit")
    tools = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    first = [m for m in tools if m.tool_call_id == "call-1"]
    assert not first  # trimmed away
    assert crm.effects == 2
    ask(env, graph, "and a third time")  # sync after exit: still a new operation
    assert crm.effects == 3


def fan_out_graph(env: Env, crm: FakeCRM, *, plain: bool) -> Any:
    """Each turn, a ``Send`` per case with a hand-made call id (``close-0``, ``close-1``):
    the payload is the one AIMessage, not the graph state, so the tool node's input has no
    ``effect_operations``, though the graph (``State``) has the channel."""

    def agent(state: State) -> dict[str, Any]:
        done = isinstance(state["messages"][-1], ToolMessage)
        return {"messages": [AIMessage("done" if done else "fanning out")]}

    def fan(state: State) -> Any:
        if state["messages"][-1].content == "done":
            return END
        return [
            Send(
                "tools",
                {"messages": [AIMessage("", tool_calls=[call("close_case", f"close-{i}", case)])]},
            )
            for i, case in enumerate(["A", "B"])
        ]

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", tool_node(env, [close_tool(crm, plain=plain)], plain))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", fan, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=env.checkpointer)


def call(name: str, call_id: str, case: str) -> dict[str, Any]:
    return {"name": name, "args": {"case_id": case}, "id": call_id, "type": "tool_call"}


@pytest.mark.parametrize("plain", [False, True], ids=["effects", "toolnode"])
@pytest.mark.parametrize("durability", DURABILITY, ids=["exit", "default", "sync"])
def test_a_send_fan_out_asked_again_in_a_later_turn_acts(
    env: Env, crm: FakeCRM, durability: str | None, plain: bool
) -> None:
    """A ``Send`` fan-out with hand-made ids, asked again on the next turn: 4 asked, 4
    acted under every durability. Under ``"exit"`` the second turn was answered from the
    first turn's records (2 of 4: the Send payload holds no ``effect_operations`` and the
    lineage none of the unsaved steps); the faces now read and write the graph's channel
    when their input lacks it."""
    graph = fan_out_graph(env, crm, plain=plain)
    for turn, text in enumerate(["close A and B", "close A and B again"], start=1):
        env.invoke(graph, {"messages": [HumanMessage(text)]}, CFG, durability=durability)
        assert crm.effects == 2 * turn
    if not plain:
        assert [o.status.value for o in env.ops()] == ["confirmed"] * 4


@pytest.mark.parametrize("env", [("sqlite", "sync")], indirect=True)
def test_a_repeat_without_effect_state_reads_each_checkpoint_once(env: Env, crm: FakeCRM) -> None:
    """A state without ``effect_operations`` has only the lineage: the k-th repeat meets
    the k-1 earlier records and asks where each was delivered. Each saved checkpoint's
    parent and source are read once per process, so a turn reads the checkpoints saved
    since the last one, not the whole thread (a step count; 8 asked, 8 acted)."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import MessagesState

    class Counting(SqliteSaver):
        reads = 0

        def get_tuple(self, config: Any) -> Any:
            Counting.reads += 1
            return super().get_tuple(config)

    saver = Counting(env.checkpointer.conn)
    model = proposer("fresh")
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", tool_node(env, [close_tool(crm)], False))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=saver)
    reads = []
    for turn in range(8):
        before = Counting.reads
        env.invoke(graph, {"messages": [HumanMessage(f"close case A ({turn})")]}, CFG)
        reads.append(Counting.reads - before)
    assert crm.effects == 8
    assert reads[-1] <= reads[2], reads  # not growing with the thread's history


# -- faces whose state lists no answers: the checkpoint lineage and the runs carry them --


def messages_state_graph(env: Env, crm: FakeCRM, *, plain: bool) -> Any:
    """agent -> tools -> agent on LangGraph's ``MessagesState``: no ``effect_operations``."""
    from langgraph.graph import MessagesState

    model = proposer("fresh")
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", tool_node(env, [close_tool(crm, plain=plain)], plain))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=env.checkpointer)


def functional_flow(env: Env, crm: FakeCRM, *, plain: bool) -> Any:
    """An ``@entrypoint`` closing case A once a request: ``run_effect`` in its body (the
    Functional API: no state of ours), or a plain ``@task`` closing it."""
    from langgraph.func import entrypoint, task

    from langgraph_effects import arun_effect, run_effect

    tool = close_tool(crm)

    @task
    def close_plain() -> Any:
        return crm.close_case("A", "fixed")

    if env.is_async:

        @entrypoint(checkpointer=env.checkpointer)
        async def aflow(_: Any) -> Any:
            if plain:
                return await close_plain()
            return await arun_effect(tool, {"case_id": "A"}, ledger=env.ledger)

        return aflow

    @entrypoint(checkpointer=env.checkpointer)
    def flow(_: Any) -> Any:
        if plain:
            return close_plain().result()
        return run_effect(tool, {"case_id": "A"}, ledger=env.ledger)

    return flow


def sub_agent_graph(env: Env, crm: FakeCRM, *, plain: bool) -> Any:
    """A worker subgraph fed only the latest request (its state starts afresh each turn)."""
    from test_subagents import latest_request_graph, worker_agent

    return latest_request_graph(env, worker_agent(env, crm, plain=plain))


NO_ANSWERS = {
    "functional": functional_flow,
    "messages-state": messages_state_graph,
    "sub-agent": sub_agent_graph,
}
"""The faces whose state lists none of the answers delivered before: ``run_effect``, a
state without ``EffectState``, a worker fed only the latest request."""


def _ask(env: Env, graph: Any, face: str, text: str, durability: str | None) -> None:
    value: Any = text if face == "functional" else {"messages": [HumanMessage(text)]}
    env.invoke(graph, value, CFG, durability=durability)


@pytest.mark.parametrize("plain", [False, True], ids=["effects", "control"])
@pytest.mark.parametrize("durability", DURABILITY, ids=["exit", "default", "sync"])
@pytest.mark.parametrize("face", list(NO_ANSWERS))
def test_a_later_turn_acts_again_where_the_state_lists_no_answers(
    env: Env, crm: FakeCRM, face: str, durability: str | None, plain: bool
) -> None:
    """The same request in each of three turns: 3 asked, 3 acted, under every durability.
    Under ``"exit"`` the second turn was answered from the first turn's record (the
    lineage holds none of the steps that delivered it, and the state lists nothing);
    the record's run now says where it ended: the checkpoint saved at exit, from which
    the next turn started. The plain ``ToolNode`` / ``@task`` beside it: 3 too."""
    graph = NO_ANSWERS[face](env, crm, plain=plain)
    for turn in range(1, 4):
        _ask(env, graph, face, f"close case A ({turn})", durability)
        assert crm.effects == turn
    if not plain:
        assert [o.status.value for o in env.ops()] == ["confirmed"] * 3


@pytest.mark.parametrize("face", list(NO_ANSWERS))
def test_a_fork_from_before_the_answer_sends_nothing_again_where_the_state_lists_no_answers(
    env: Env, crm: FakeCRM, face: str
) -> None:
    """Under ``"exit"``: two turns (2 acted), then the second run again twice from the
    checkpoint it started from (a fork of the first turn's end): answered from the second
    turn's record, nothing sent again (2 in all). Then a later turn on the fork asks
    again: the fork's own run delivered the answer, so it acts (3)."""
    graph = NO_ANSWERS[face](env, crm, plain=False)
    _ask(env, graph, face, "close case A", "exit")
    state = graph.get_state(CFG) if not env.is_async else env.run(graph.aget_state(CFG))
    start = state.config
    _ask(env, graph, face, "close case A again", "exit")
    assert crm.effects == 2
    for _ in range(2):
        value: Any = "again" if face == "functional" else {"messages": [HumanMessage("again")]}
        env.invoke(graph, value, start, durability="exit")
    assert crm.effects == 2  # neither run from the first turn's end sent again
    _ask(env, graph, face, "and once more", "exit")
    assert crm.effects == 3


@pytest.mark.parametrize("env", [("sqlite", "sync"), ("postgres", "async")], indirect=True)
@pytest.mark.parametrize("face", list(NO_ANSWERS))
def test_exit_warns_of_no_lost_repeat_where_the_state_lists_no_answers(
    env: Env, crm: FakeCRM, face: str
) -> None:
    """The ``DurabilityWarning`` of ``"exit"`` no longer says a later request is answered
    from the earlier record (it acts: 2 of 2); it still names ``intent_key`` for
    re-proposals with other arguments."""
    import warnings

    from langgraph_effects import DurabilityWarning
    from langgraph_effects.decide import thread

    graph = NO_ANSWERS[face](env, crm, plain=False)
    thread._durability_warned = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for text in ("close case A", "close case A again"):
            _ask(env, graph, face, text, "exit")
    said = [str(w.message) for w in caught if issubclass(w.category, DurabilityWarning)]
    assert said
    assert not any("does not act again" in m for m in said), said
    assert all("intent_key" in m for m in said), said
    assert crm.effects == 2


def _twice_graph(env: Env, crm: FakeCRM, face: str, *, plain: bool) -> Any:
    """One request asking for case A to be closed twice (``twice_in_one_run``), on
    ``MessagesState`` or in a worker subgraph fed the latest request."""
    from langgraph.graph import MessagesState
    from test_subagents import latest_request_graph

    model = twice_in_one_run()
    builder = StateGraph(MessagesState if face == "messages-state" else State)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", tool_node(env, [close_tool(crm, plain=plain)], plain))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    if face == "messages-state":
        return builder.compile(checkpointer=env.checkpointer)
    return latest_request_graph(env, builder.compile())


@pytest.mark.parametrize("plain", [False, True], ids=["effects", "control"])
@pytest.mark.parametrize("face", ["messages-state", "sub-agent"])
def test_a_repeat_in_a_later_step_of_the_same_exit_run_acts_where_the_state_lists_no_answers(
    env: Env, crm: FakeCRM, face: str, plain: bool
) -> None:
    """Two steps of one ``"exit"`` run ask for the same closure: 2 asked, 2 acted. Neither
    step is saved and the state lists nothing; the first record's run is the second
    call's own (its token), so the loop went past its step: delivered."""
    graph = _twice_graph(env, crm, face, plain=plain)
    env.invoke(graph, {"messages": [HumanMessage("close A twice")]}, CFG, durability="exit")
    assert crm.effects == 2
    if not plain:
        assert [o.status.value for o in env.ops()] == ["confirmed"] * 2


@pytest.mark.parametrize("env", [("sqlite", "sync"), ("postgres", "async")], indirect=True)
def test_where_langgraphs_loop_cannot_be_read_a_repeat_is_answered_and_the_warning_says_so(
    env: Env, crm: FakeCRM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback: a LangGraph whose task config no longer leads to its loop (the key
    moved) gives no record a run, so an unsaved step is never placed as delivered (a guess
    there could re-send a killed run's effect): 2 asked, 1 acted, and ``DurabilityWarning``
    names the lost repeat and what to do."""
    import warnings

    from langgraph_effects import DurabilityWarning
    from langgraph_effects.decide import identity, thread

    monkeypatch.setattr(identity, "_TASK_CALL", "__moved__")
    graph = messages_state_graph(env, crm, plain=False)
    thread._durability_warned = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for text in ("close case A", "close case A again"):
            _ask(env, graph, "messages-state", text, "exit")
    said = [str(w.message) for w in caught if issubclass(w.category, DurabilityWarning)]
    assert any("does not act again" in m and "intent_key per request" in m for m in said), said
    assert crm.effects == 1
