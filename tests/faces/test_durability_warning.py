"""DurabilityWarning names the user's own line, and the package's harness never raises it."""

from __future__ import annotations

import asyncio
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from _graphs import build_graph, call
from langchain.agents import create_agent
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, MessagesState, StateGraph

from langgraph_effects import (
    DurabilityWarning,
    EffectContext,
    EffectMiddleware,
    EffectToolNode,
    InMemoryLedger,
    arun_effect,
    effect,
    route_tool_calls,
    run_effect,
)
from langgraph_effects.decide import thread
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.providers import FakeCRM
from langgraph_effects.testing.scenario import (
    ProviderKind,
    Providers,
    Scenario,
    builtin_call,
    confirm_if_seen,
    effect_tools,
    run_scenario,
)


@pytest.fixture
def unwarned() -> Iterator[None]:
    """A process that has not warned yet (the warning comes once per process)."""
    before = thread._durability_warned
    thread._durability_warned, thread._pending = False, None
    yield
    thread._durability_warned, thread._pending = before, None


def closing_tool(crm: FakeCRM) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, object]:
        """Close a CRM case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    return close_case


def graph_for(crm: FakeCRM) -> object:
    ledger = InMemoryLedger()
    ledger.setup()
    closing = call("close_case", "call-a", case_id="A", resolution="fixed")
    return build_graph([closing_tool(crm)], [closing], ledger=ledger, checkpointer=InMemorySaver())


TWO = [call("close_case", f"call-{c}", case_id=c, resolution="fixed") for c in "AB"]


def two_calls(face: str, crm: FakeCRM) -> Any:
    """A graph whose model asks two effect calls at once, run off the caller's thread:
    in ToolNode's worker threads (``tools_condition``), in two tasks of LangGraph's
    (``route_tool_calls``), or in ``create_agent``'s tool tasks (``EffectMiddleware``)."""
    ledger = InMemoryLedger()
    ledger.setup()
    if face == "middleware":
        return create_agent(
            ScriptedChatModel(plan=[TWO]),
            tools=[closing_tool(crm)],
            middleware=[EffectMiddleware(ledger=ledger)],
            checkpointer=InMemorySaver(),
        )
    per_call = face == "route_tool_calls"
    tool = closing_tool(crm)
    return build_graph([tool], TWO, ledger=ledger, checkpointer=InMemorySaver(), per_call=per_call)


@pytest.fixture
def own_frames_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread's frames are never read (on CPython 3.11 a frame its thread is
    popping crashed a CI worker when its f_back was read)."""

    def refused() -> object:
        raise AssertionError("sys._current_frames() read another thread's frames")

    monkeypatch.setattr(sys, "_current_frames", refused)


@pytest.mark.usefixtures("unwarned", "own_frames_only")
@pytest.mark.parametrize("face", ["tools_condition", "route_tool_calls", "middleware"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_warning_points_at_the_users_invoke_from_worker_threads(face: str, mode: str) -> None:
    """Two calls at once, run in threads or tasks that are not the caller's, sync and async:
    the warning names the test's own ``invoke`` (``await ainvoke``) line."""
    crm = FakeCRM()
    graph = two_calls(face, crm)
    config = {"configurable": {"thread_id": "w1"}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if mode == "sync":
            line = _line() + 1
            graph.invoke({"messages": [("user", "close A and B")]}, config)
        else:

            async def run() -> int:
                line = _line() + 1
                await graph.ainvoke({"messages": [("user", "close A and B")]}, config)
                return line

            line = asyncio.run(run())
    [warning] = [w for w in caught if issubclass(w.category, DurabilityWarning)]
    assert (warning.filename, warning.lineno) == (__file__, line)
    assert crm.effects == 2


@pytest.mark.usefixtures("unwarned", "own_frames_only")
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_warning_from_run_effect_points_at_the_users_call(mode: str) -> None:
    """In the functional API the user's line is the task's own call of ``run_effect``."""
    crm = FakeCRM()
    tool = closing_tool(crm)
    ledger = InMemoryLedger()
    ledger.setup()
    lines: list[int] = []

    @task
    def close(case_id: str) -> Any:
        lines.append(_line() + 1)
        return run_effect(tool, {"case_id": case_id, "resolution": "fixed"}, ledger=ledger)

    @task
    async def aclose(case_id: str) -> Any:
        lines.append(_line() + 1)
        return await arun_effect(tool, {"case_id": case_id, "resolution": "fixed"}, ledger=ledger)

    @entrypoint(checkpointer=InMemorySaver())
    def main(cases: list[str]) -> list[Any]:
        return [f.result() for f in [close(c) for c in cases]]

    @entrypoint(checkpointer=InMemorySaver())
    async def amain(cases: list[str]) -> list[Any]:
        return [await f for f in [aclose(c) for c in cases]]

    config = {"configurable": {"thread_id": "w1"}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if mode == "sync":
            main.invoke(["A", "B"], config)
        else:
            asyncio.run(amain.ainvoke(["A", "B"], config))
    [warning] = [w for w in caught if issubclass(w.category, DurabilityWarning)]
    assert (warning.filename, warning.lineno) == (__file__, lines[0])
    assert crm.effects == 2


@pytest.mark.usefixtures("unwarned", "own_frames_only")
def test_the_warning_points_at_the_users_invoke() -> None:
    """Run with LangGraph's default durability, the warning's file and line are the test's own
    ``invoke``, not a frame inside langgraph_effects or LangGraph."""
    crm = FakeCRM()
    graph = graph_for(crm)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _line() + 1
        graph.invoke({"messages": [("user", "close A")]}, {"configurable": {"thread_id": "w1"}})  # type: ignore[attr-defined]
    [warning] = [w for w in caught if issubclass(w.category, DurabilityWarning)]
    assert (warning.filename, warning.lineno) == (__file__, line)
    assert crm.effects == 1


@pytest.mark.usefixtures("unwarned")
def test_run_scenario_raises_no_durability_warning_and_keeps_the_users() -> None:
    """The harness draws the default durability on purpose: a user's test of its effects with
    run_scenario sees no DurabilityWarning, and the user's own graph still gets the one."""
    providers = Providers.open(None)
    scenario = Scenario(
        tools=effect_tools(providers),
        tool_calls=[builtin_call(ProviderKind.CRM, 0, tag="t")],
        providers=providers.all,
        clock=providers.clock,
        policy=confirm_if_seen(providers.shows),
        applied=providers.applied,
        thread_id="t",
    )
    ledger = InMemoryLedger(clock=providers.clock.now)
    ledger.setup()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = run_scenario(scenario, ledger=ledger)
        assert report.effects == 1
        assert not [w for w in caught if issubclass(w.category, DurabilityWarning)]
        graph = graph_for(FakeCRM())
        graph.invoke({"messages": [("user", "close A")]}, {"configurable": {"thread_id": "w2"}})  # type: ignore[attr-defined]
    providers.close()
    assert len([w for w in caught if issubclass(w.category, DurabilityWarning)]) == 1


def _line() -> int:
    """The line number of the caller."""
    import sys

    return sys._getframe(1).f_lineno


@pytest.mark.usefixtures("unwarned", "own_frames_only")
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_warning_is_said_without_an_effect_operations_channel(mode: str) -> None:
    """A graph on plain ``MessagesState`` (no ``EffectState``) running its calls in
    LangGraph's tasks (``route_tool_calls``): no reducer of ours runs on the caller's thread
    to say a kept warning, so it is said at once, where it was found: once, never lost."""
    crm = FakeCRM()
    ledger = InMemoryLedger()
    ledger.setup()
    model = ScriptedChatModel(plan=[TWO])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", EffectToolNode([closing_tool(crm)], ledger=ledger))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route_tool_calls, ["tools", END])
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "w1"}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if mode == "sync":
            graph.invoke({"messages": [("user", "close A and B")]}, config)
        else:
            asyncio.run(graph.ainvoke({"messages": [("user", "close A and B")]}, config))
    found = [w for w in caught if issubclass(w.category, DurabilityWarning)]
    assert len(found) == 1
    assert "durability='async'" in str(found[0].message)
    assert crm.effects == 2


@pytest.mark.usefixtures("unwarned")
def test_the_warning_never_fails_a_run_from_a_module_run_as_mp_main(tmp_path: Any) -> None:
    """A multiprocessing child of ``python -m pkg.mod`` runs that module again as
    ``__mp_main__`` with the loader of ``pkg.mod``, which refuses to read the source of
    another name: the warning's source line came through it, and the user's ``invoke``
    failed with ImportError (every sync stale case of ``python -m
    langgraph_effects.testing.campaign``). The run acts once and the warning is said."""
    import importlib.machinery

    source = tmp_path / "usermod.py"
    source.write_text(
        "def run(graph):\n"
        "    return graph.invoke(\n"
        "        {'messages': [('user', 'close A')]}, {'configurable': {'thread_id': 'mp'}}\n"
        "    )\n"
    )
    user_globals: dict[str, Any] = {
        "__name__": "__mp_main__",
        "__file__": str(source),
        "__loader__": importlib.machinery.SourceFileLoader("pkg.usermod", str(source)),
    }
    exec(compile(source.read_text(), str(source), "exec"), user_globals)
    crm = FakeCRM()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        user_globals["run"](graph_for(crm))
    [warning] = [w for w in caught if issubclass(w.category, DurabilityWarning)]
    assert (warning.filename, warning.lineno) == (str(source), 2)
    assert crm.effects == 1
