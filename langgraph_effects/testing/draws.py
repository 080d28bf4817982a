"""The graph shapes of the campaign's identity draws (issue 22): where a call meets its
operation again only when it *is* that operation again.

Each shape runs the scenario's scripted calls (``scenario._Script``) the way LangGraph
users build agents, and each is drawn as a variant of an older kind
(``scenario.Kind``):

* ``parallel``: the agent's calls go to ``tools_a`` (each sent, or all in one task) and,
  in the same superstep or one step later, ``tools_b`` issues the first call again (an
  audit branch): two intents of one call;
* ``fanout``: no AIMessage proposes the calls; a router builds them by hand
  (``Send("tools", [tool_call])``) with index ids (``mail-0``, ``mail-1``...) that
  repeat in the next turn;
* ``sub_agent``: a supervisor hands a worker agent (a subgraph on the parent's thread)
  only the latest request; the worker's exchange, or its last message alone, comes back;
  or (``tool``) the supervisor is an agent whose tool runs the worker (an agent as a
  tool): the worker's state lives in that tool call's task, and the same request on a
  later turn, a new call of the tool, proposes the worker's same ids again;
* ``stateless``: no checkpointer, each request its own invoke of a tools node behind a
  ``RetryPolicy`` (a flaky read re-runs the node): protected within one invoke, the
  same request twice acts twice (:func:`stateless_story`).

A plain ``ToolNode`` runs each shape as the control.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import RetryPolicy, Send

from langgraph_effects.core.model import Operation, OperationStatus
from langgraph_effects.node import EffectToolNode, route_tool_calls

if TYPE_CHECKING:
    from langgraph_effects.testing.scenario import Scenario, ScenarioReport, _Request, _Tally

__all__ = [
    "SHAPES",
    "VARIANTS",
    "Shape",
    "Variant",
    "branch_targets",
    "build_shape",
    "index_ids",
    "stateless_story",
]

Shape = Literal["agent", "parallel", "fanout", "sub_agent", "stateless"]
SHAPES: tuple[Shape, ...] = ("agent", "parallel", "fanout", "sub_agent", "stateless")
Variant = Literal["send", "whole", "apart", "last", "tool"]
VARIANTS: dict[Shape, tuple[Variant, ...]] = {
    "parallel": ("send", "whole", "apart"),
    "sub_agent": ("whole", "last", "tool"),
}
"""The variants a shape draws among (the others have one)."""
_FANNING = "fanning out"
_FLAKY_CALL = {
    "name": "check_status",
    "args": {"ref": "r-1"},
    "id": "call-flaky",
    "type": "tool_call",
}


def index_ids(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The calls with the ids a hand-made fan-out gives them: ``<noun>-<index>``, the same
    in every turn (``mail-0``, ``case-1``...)."""
    noun = {"send_mail": "mail", "close_case": "case", "create_ticket": "ticket"}
    return [{**tc, "id": f"{noun.get(str(tc['name']), 'call')}-{i}"} for i, tc in enumerate(calls)]


def branch_targets(sc: Scenario) -> list[str]:
    """The targets the ``parallel`` shape's second branch intends again (its first call's)."""
    from langgraph_effects.testing.scenario import target_of

    if sc.shape != "parallel" or not sc.tool_calls:
        return []
    target = target_of(sc.tool_calls[0])
    return [] if target is None else [target]


def queued_reviews(sc: Scenario, ops: Sequence[Operation], state: Any) -> set[str]:
    """The unknown operations whose review waits behind another in the same task: a
    ``parallel`` graph's ``tools_a`` runs all the calls of an AIMessage in one task (its
    ``whole`` and ``apart`` variants), and a task asks one question at a time, so a
    sibling's review comes once the one asked is answered."""
    if sc.shape != "parallel" or sc.variant == "send" or not state.interrupts:
        return set()
    messages = (state.values or {}).get("messages", [])
    proposal = next(
        (m for m in reversed(messages) if isinstance(m, AIMessage) and m.tool_calls), None
    )
    ids = {str(tc["id"]) for tc in proposal.tool_calls} if proposal is not None else set()
    asked = {
        str(i.value.get("tool_call_id")) for i in state.interrupts if isinstance(i.value, dict)
    }
    if not ids & asked:
        return set()
    return {
        op.operation_id
        for op in ops
        if op.tool_call_id in ids and op.status is OperationStatus.UNKNOWN
    }


def build_shape(
    shape: Shape,
    tools: Sequence[BaseTool],
    tool_calls: Sequence[Mapping[str, Any]],
    *,
    ledger: Any = None,
    checkpointer: Any = None,
    control: bool = False,
    node_kwargs: Mapping[str, Any] | None = None,
    asynchronous: bool = False,
    flakes: int = 0,
    fresh_ids: bool = False,
    variant: Variant = "send",
) -> Any:
    """The graph of ``shape`` (not ``agent``: that one is ``scenario.build_graph``), in
    its ``variant``: ``parallel``: ``send`` (each call sent to ``tools_a``), ``whole``
    (``tools_a`` runs the AIMessage in one task), ``apart`` (as ``whole``, ``tools_b`` one
    step later); ``sub_agent``: ``whole`` (the worker's exchange comes back), ``last``
    (only its last message, ``langgraph-supervisor``'s default ``output_mode``) or
    ``tool`` (the worker runs inside a tool of a supervising agent)."""
    from langgraph_effects.testing.scenario import _Script, _State, flaky_tool

    def node(name: str, more: Sequence[BaseTool] = ()) -> ToolNode:
        every = [*tools, *more]
        if control:
            return ToolNode(every, name=name)
        return EffectToolNode(every, ledger=ledger, name=name, **dict(node_kwargs or {}))

    saver = checkpointer if checkpointer is not None else InMemorySaver()
    builder = StateGraph(_State)
    if shape == "stateless":
        flaky = flaky_tool(max(1, flakes))
        retry = RetryPolicy(
            max_attempts=max(1, flakes) + 1,
            initial_interval=0.0,
            jitter=False,
            retry_on=ConnectionError,
        )
        builder.add_node("tools", node("tools", [flaky]), retry_policy=retry)
        builder.add_edge(START, "tools")
        builder.add_edge("tools", END)
        return builder.compile()  # no checkpointer: a stateless service
    if shape == "sub_agent":
        worker = _worker(node("tools"), tool_calls, control)
        if variant == "tool":
            return _delegating(builder, worker, saver)
        return _supervisor(builder, worker, saver, asynchronous, whole=variant != "last")
    script = _Script([dict(tc) for tc in tool_calls], fresh_ids=fresh_ids)
    calls = [dict(tc) for tc in tool_calls]

    def agent(state: Any) -> dict[str, list[AnyMessage]]:
        reply = script.reply(state["messages"])
        if shape == "fanout" and reply.tool_calls:
            reply = AIMessage(content=_FANNING, id=f"{reply.id}-plan")
        return {"messages": [reply]}

    def proposal(state: Any) -> list[Any]:
        last = next(m for m in reversed(state["messages"]) if isinstance(m, AIMessage))
        return list(last.tool_calls)

    def route(state: Any) -> Any:
        last = state["messages"][-1]
        if not isinstance(last, AIMessage):
            return END
        if shape == "fanout":
            return [Send("tools", [tc]) for tc in calls] if last.content == _FANNING else END
        if not last.tool_calls:
            return END
        # tools_a runs the AIMessage (each call sent, or all in one task as under
        # tools_condition); the audit branch tools_b issues its first call again, in the
        # same superstep or (apart) one step later.
        mine: list[Any] = (
            [Send("tools_a", [tc]) for tc in last.tool_calls] if variant == "send" else ["tools_a"]
        )
        return mine if variant == "apart" else [*mine, Send("tools_b", [last.tool_calls[0]])]

    builder.add_node("agent", agent)
    branches = ["tools"] if shape == "fanout" else ["tools_a", "tools_b"]
    for name in branches:
        builder.add_node(name, node(name))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, [*branches, END])
    if variant == "apart":
        builder.add_conditional_edges(
            "tools_a", lambda state: [Send("tools_b", proposal(state)[:1])], ["tools_b"]
        )
    else:
        builder.add_edge(branches[0], "agent")
    if shape == "parallel":
        builder.add_edge("tools_b", "agent")
    return builder.compile(checkpointer=saver)


def _worker(tools: ToolNode, tool_calls: Sequence[Mapping[str, Any]], control: bool) -> Any:
    """agent -> tools -> agent, compiled without a checkpointer of its own: it runs in its
    parent's task, saved under the parent's thread. It sees one request each time, so it
    proposes the same ids every turn."""
    from langgraph_effects.testing.scenario import _Script, _State

    script = _Script([dict(tc) for tc in tool_calls])

    def agent(state: Any) -> dict[str, list[AnyMessage]]:
        return {"messages": [script.reply(state["messages"])]}

    builder = StateGraph(_State)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges(
        "agent", tools_condition if control else route_tool_calls, ["tools", END]
    )
    builder.add_edge("tools", "agent")
    return builder.compile()


def _supervisor(builder: Any, worker: Any, saver: Any, asynchronous: bool, *, whole: bool) -> Any:
    """The supervisor hands the worker only the latest request, and takes back the worker's
    whole exchange (renamed per turn: the worker's ids repeat every turn) or, not
    ``whole``, its last message alone."""

    def brief(state: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
        messages: list[BaseMessage] = state["messages"]
        turn = sum(1 for m in messages if isinstance(m, HumanMessage))
        return {"messages": [messages[-1]]}, turn

    def back(out: Mapping[str, Any], turn: int) -> dict[str, Any]:
        exchange = out["messages"][1:] if whole else out["messages"][-1:]
        return {"messages": [m.model_copy(update={"id": f"{m.id}-w{turn}"}) for m in exchange]}

    def run(state: Any, config: RunnableConfig) -> dict[str, Any]:
        request, turn = brief(state)
        return back(worker.invoke(request, config), turn)

    async def arun(state: Any, config: RunnableConfig) -> dict[str, Any]:
        request, turn = brief(state)
        return back(await worker.ainvoke(request, config), turn)

    builder.add_node("supervisor", RunnableLambda(run, afunc=arun) if asynchronous else run)
    builder.add_edge(START, "supervisor")
    builder.add_edge("supervisor", END)
    return builder.compile(checkpointer=saver)


DELEGATE = "ask_worker"
"""The supervising agent's one tool in the ``sub_agent`` shape's ``tool`` variant."""


def _delegating(builder: Any, worker: Any, saver: Any) -> Any:
    """agent -> tools -> agent, whose one tool (:data:`DELEGATE`, a plain tool in a plain
    ``ToolNode``) hands the request to the worker and returns its last word: the worker
    runs in the tool call's task, saved under the parent's thread, and its interrupts
    reach the person through the tool. Each turn the agent proposes a new call of the
    tool (a new id), and the worker the same ids as before."""
    from langgraph_effects.testing.scenario import _Script

    def request(text: str) -> dict[str, Any]:
        return {"messages": [HumanMessage(content=text, id="worker-request")]}

    def run(request_text: str, config: RunnableConfig) -> str:
        return str(worker.invoke(request(request_text), config)["messages"][-1].content)

    async def arun(request_text: str, config: RunnableConfig) -> str:
        out = await worker.ainvoke(request(request_text), config)
        return str(out["messages"][-1].content)

    delegate = StructuredTool.from_function(
        func=run,
        coroutine=arun,
        name=DELEGATE,
        description="Hand the request to the worker agent; its last word comes back.",
    )
    call = {"name": DELEGATE, "args": {"request_text": "handle it"}, "id": "call-worker"}
    script = _Script([{**call, "type": "tool_call"}], fresh_ids=True)

    def agent(state: Any) -> dict[str, list[AnyMessage]]:
        return {"messages": [script.reply(state["messages"])]}

    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([delegate]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def stateless_story(sc: Scenario, tally: _Tally) -> Generator[_Request, Any, ScenarioReport]:
    """A stateless service: each request its own invoke (no thread), the same request
    ``sc.requests`` times. Every request is meant: each call acts once per request, never
    twice within one (the node's ``RetryPolicy`` re-runs it), never merged into an
    earlier request's operation."""
    from langgraph_effects.testing.scenario import (
        ScenarioReport,
        _count_at_providers,
        _Invoke,
        _thread_ops,
        target_of,
    )

    calls = [*sc.tool_calls, _FLAKY_CALL]
    request = {"messages": [AIMessage(content="", tool_calls=calls, id="ai-request")]}
    done = 0
    for _ in range(sc.requests):
        tally.intended.update(t for t in map(target_of, sc.tool_calls) if t is not None)
        (outcome,) = yield _Invoke((request,), {"configurable": {}})  # no thread
        if outcome is None:
            done += 1
        else:
            tally.errors += 1
    ops = yield from _thread_ops(sc)
    counted = yield from _count_at_providers(sc, tally, ops, finished=done == sc.requests)
    return ScenarioReport(
        scenario=sc.name,
        intents=sum(tally.intended.values()),
        completed=int(done == sc.requests),
        errors=tally.errors,
        **counted,
    )
