"""Running a scenario: the story driven sync or async against real ledgers and checkpointers."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_effects.decide.thread import durability_chosen
from langgraph_effects.testing.draws import (
    build_shape,
    stateless_story,
)
from langgraph_effects.testing.faults import (
    CrashMode,
    CrashPlan,
    InjectedCrash,
)
from langgraph_effects.testing.scenario.case import Scenario
from langgraph_effects.testing.scenario.graph import _Script, build_agent, build_graph
from langgraph_effects.testing.scenario.report import ScenarioReport
from langgraph_effects.testing.scenario.requests import (
    _Fork,
    _GetState,
    _History,
    _Invoke,
    _LedgerCall,
    _Rebuild,
    _Request,
    _Tally,
)
from langgraph_effects.testing.scenario.story import _story
from langgraph_effects.testing.workflows import build_workflow


def run_scenario(sc: Scenario, *, ledger: Any = None, checkpointer: Any = None) -> ScenarioReport:
    """Run ``sc`` to its crash, resume it, answer its reviews, and report.

    Args:
        sc: the scenario. With ``sc.asynchronous`` the graph runs under
            ``asyncio.run`` (use :func:`arun_scenario` inside a running loop).
        ledger: the ledger the node uses (sync, or async with ``asynchronous``);
            ignored for a control. Give each scenario its own ``thread_id``: the
            report reads the operations of tenant ``thread_id``.
        checkpointer: LangGraph's saver (default: a fresh ``InMemorySaver``).

    Returns:
        The report; ``problems`` lists every duplicate and mislabelled operation.
    """
    if sc.asynchronous:
        return asyncio.run(arun_scenario(sc, ledger=ledger, checkpointer=checkpointer))
    graph, config, story = _start(sc, ledger, checkpointer)
    # The scenario draws the default durability on purpose: no DurabilityWarning in the
    # user's test, and the user's own graphs still get theirs.
    with durability_chosen(), _armed(sc):
        return _drive_sync(story, graph, config, ledger)


async def arun_scenario(
    sc: Scenario, *, ledger: Any = None, checkpointer: Any = None
) -> ScenarioReport:
    """:func:`run_scenario` inside a running event loop (``ainvoke``; sync or async ledger)."""
    graph, config, story = _start(sc, ledger, checkpointer)
    with durability_chosen(), _armed(sc):
        return await _drive_async(story, graph, config, ledger)


def _start(
    sc: Scenario, ledger: Any, checkpointer: Any
) -> tuple[_Graphs, dict[str, Any], Generator[_Request, Any, ScenarioReport]]:
    node_kwargs: dict[str, Any] = {
        "tenant_id": None if sc.tenant_from_config else sc.thread_id,
        "lease_for": sc.lease_for,
        "interrupt_on_unknown": sc.interrupt_on_unknown,
    }
    if sc.clock is not None:
        node_kwargs["clock"] = sc.clock.now
    if sc.slow_sibling is not None and sc.face == "node":
        node_kwargs["wrap_tool_call"] = sc.slow_sibling.wrap
        node_kwargs["awrap_tool_call"] = sc.slow_sibling.awrap
    common: dict[str, Any] = {
        "ledger": ledger,
        # One saver for the graph a restart rebuilds too (``Scenario.tools_after``).
        "checkpointer": checkpointer if checkpointer is not None else InMemorySaver(),
        "control": sc.control,
        "node_kwargs": node_kwargs,
    }

    def graph_of(tools: Sequence[BaseTool]) -> Any:
        if sc.face == "functional":
            reply = _Script([dict(tc) for tc in sc.tool_calls]).reply
            return build_workflow(
                tools, reply, layout=sc.layout, asynchronous=sc.asynchronous, **common
            )
        if sc.face == "middleware":
            return build_agent(tools, sc.tool_calls, tool_retry=sc.tool_retry, **common)
        if sc.shape != "agent":
            return build_shape(
                sc.shape,
                tools,
                sc.tool_calls,
                asynchronous=sc.asynchronous,
                flakes=sc.flakes,
                fresh_ids=sc.repeat and sc.shape != "fanout",
                variant=sc.variant,
                **common,
            )
        return build_graph(
            tools,
            sc.tool_calls,
            subgraph=sc.subgraph,
            flakes=sc.flakes,
            fresh_ids=(sc.reissue != "none" or sc.repeat) and not sc.reused_ids,
            **common,
        )

    graphs = _Graphs(graph_of(sc.tools), lambda: graph_of(sc.tools_after or sc.tools))
    config: dict[str, Any] = {"configurable": {"thread_id": sc.thread_id}}
    story = stateless_story if sc.shape == "stateless" else _story
    return graphs, config, story(sc, _Tally())


@dataclass(slots=True)
class _Graphs:
    """The scenario's graph, and how a restart with ``tools_after`` rebuilds it."""

    graph: Any
    rebuilt: Callable[[], Any]


@contextmanager
def _armed(sc: Scenario) -> Iterator[None]:
    """Arm the scenario's crash (RAISE) for its whole run; disarm after."""
    if sc.crash_at is None:
        yield
        return
    with CrashPlan.arm(sc.crash_at, CrashMode.RAISE, hit=sc.crash_hit):
        yield


def _outcome(fn: Callable[[], Any]) -> BaseException | None:
    try:
        fn()
    except (InjectedCrash, Exception) as exc:
        return exc
    return None


def _drive_sync(
    story: Generator[_Request, Any, ScenarioReport],
    graphs: _Graphs,
    config: dict[str, Any],
    ledger: Any,
) -> ScenarioReport:
    value: Any = None
    while True:
        try:
            request = story.send(value)
        except StopIteration as stop:
            report: ScenarioReport = stop.value
            return report
        match request:
            case _Invoke(inputs, at) if len(inputs) == 1:
                value = [_outcome(lambda: graphs.graph.invoke(inputs[0], at or config))]
            case _Invoke(inputs, at):
                outcomes: list[BaseException | None] = [None] * len(inputs)

                def resume(i: int, item: Any, out: list[BaseException | None]) -> None:
                    out[i] = _outcome(lambda: graphs.graph.invoke(item, at or config))

                threads = [
                    threading.Thread(target=resume, args=(i, item, outcomes))
                    for i, item in enumerate(inputs)
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                value = outcomes
            case _GetState():
                value = graphs.graph.get_state(config)
            case _History():
                value = list(graphs.graph.get_state_history(config))
            case _Fork(origin, values, as_node):
                value = graphs.graph.update_state(origin, values, as_node=as_node)
            case _Rebuild():
                graphs.graph, value = graphs.rebuilt(), None
            case _LedgerCall(read):
                value = read(ledger)


async def _drive_async(
    story: Generator[_Request, Any, ScenarioReport],
    graphs: _Graphs,
    config: dict[str, Any],
    ledger: Any,
) -> ScenarioReport:
    async def outcome(item: Any, at: dict[str, Any]) -> BaseException | None:
        try:
            await graphs.graph.ainvoke(item, at)
        except (InjectedCrash, Exception) as exc:
            return exc
        return None

    value: Any = None
    while True:
        try:
            request = story.send(value)
        except StopIteration as stop:
            report: ScenarioReport = stop.value
            return report
        match request:
            case _Invoke(inputs, at):
                value = list(await asyncio.gather(*(outcome(i, at or config) for i in inputs)))
            case _GetState():
                value = await graphs.graph.aget_state(config)
            case _History():
                value = [h async for h in graphs.graph.aget_state_history(config)]
            case _Fork(origin, values, as_node):
                value = await graphs.graph.aupdate_state(origin, values, as_node=as_node)
            case _Rebuild():
                graphs.graph, value = graphs.rebuilt(), None
            case _LedgerCall(read):
                value = read(ledger)
                if inspect.isawaitable(value):
                    value = await value
