"""EffectToolNode as a drop-in for ToolNode (issue 11), counted at a fake provider.

Plain tools behave exactly as in ``ToolNode`` (checked side by side with a real
``ToolNode``); effect tools keep ``Command`` results (returned as produced, rebuilt
from the ledger on replay), artifacts, their own settings, the user's
``wrap_tool_call`` / ``awrap_tool_call``, and an ``interrupt()`` of their own.
Ledger scenarios run on the in-memory, SQLite and PostgreSQL ledgers, sync and async.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

import pytest
from _graphs import Env, call
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, ToolException
from langchain_core.tools import tool as as_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, ToolNode
from langgraph.prebuilt.tool_node import ToolInvocationError
from langgraph.types import Command, interrupt

from langgraph_effects import EffectContext, InMemoryLedger, OperationStatus, effect
from langgraph_effects.node import EffectState, EffectToolNode
from langgraph_effects.testing.providers import FakeCRM

S = OperationStatus
BACKENDS = [
    ("memory", "sync"),
    ("memory", "async"),
    ("sqlite", "sync"),
    ("sqlite", "async"),
    ("postgres", "sync"),
    ("postgres", "async"),
]


class State(MessagesState, EffectState):
    note: str
    visited: Annotated[list[str], operator.add]


def one_node_graph(node: Any, checkpointer: Any = None) -> Any:
    """START -> tools -> END, plus an ``after`` node a Command may go to."""
    builder = StateGraph(State)
    builder.add_node("tools", node)
    builder.add_node("after", lambda state: {"visited": ["after"]})
    builder.add_edge(START, "tools")
    builder.add_edge("after", END)
    return builder.compile(checkpointer=checkpointer)


def ask(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [AIMessage(content="", tool_calls=list(calls))]}


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def run(env: Env, graph: Any, value: Any, config: dict[str, Any]) -> Any:
    return env.invoke(graph, value, config)


def history(env: Env, graph: Any, config: dict[str, Any]) -> list[Any]:
    if not env.is_async:
        return list(graph.get_state_history(config))

    async def collect() -> list[Any]:
        return [s async for s in graph.aget_state_history(config)]

    return env.run(collect())  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- Command results


def command_tool(crm: FakeCRM) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(
        case_id: str, ctx: EffectContext, tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> Command[Any]:
        """Close a case and note it in the graph state."""
        case = crm.close_case(case_id, "fixed", idempotency_key=ctx.idempotency_key)
        return Command(
            update={
                "note": f"closed {case_id} v{case['version']}",
                "messages": [ToolMessage(f"closed {case_id}", tool_call_id=tool_call_id)],
            },
            goto="after",
        )

    return close_case


def test_command_result_first_run_and_replay(env: Env) -> None:
    """A Command from an effect tool keeps its update and goto; a replay rebuilds it, no resend."""
    crm = FakeCRM()
    graph = one_node_graph(EffectToolNode([command_tool(crm)], ledger=env.ledger), env.checkpointer)
    cfg = {"configurable": {"thread_id": "cmd"}}
    first = run(env, graph, ask(call("close_case", "c1", case_id="A")), cfg)
    assert crm.effects == 1
    assert first["note"] == "closed A v1"
    assert first["visited"] == ["after"]
    assert tool_messages(first)[0].content == "closed A"
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert len(first["effect_operations"]) == 1

    before = next(s for s in history(env, graph, cfg) if s.next == ("tools",))
    again = run(env, graph, None, before.config)
    assert crm.effects == 1  # replayed from the ledger, never resent
    assert again["note"] == "closed A v1"
    assert again["visited"] == ["after"]
    [msg] = tool_messages(again)
    assert (msg.content, msg.tool_call_id) == ("closed A", "c1")


# --------------------------------------------------------------------------- artifacts, settings


def artifact_tool(crm: FakeCRM) -> Any:
    @as_tool(response_format="content_and_artifact")
    def close_case(case_id: str) -> tuple[str, dict[str, Any]]:
        """Close a case; the full record is the artifact."""
        case = crm.close_case(case_id, "fixed", idempotency_key=f"k-{case_id}")
        return f"closed {case_id}", {"version": case["version"]}

    return effect("crm.close_case", target=lambda a: a["case_id"])(close_case)


def test_content_and_artifact_kept_and_replayed(env: Env) -> None:
    """``content_and_artifact``: the model reads the content, the artifact stays beside it."""
    crm = FakeCRM()
    graph = one_node_graph(
        EffectToolNode([artifact_tool(crm)], ledger=env.ledger), env.checkpointer
    )
    cfg = {"configurable": {"thread_id": "art"}}
    [msg] = tool_messages(run(env, graph, ask(call("close_case", "c1", case_id="A")), cfg))
    assert (msg.content, msg.artifact) == ("closed A", {"version": 1})
    before = next(s for s in history(env, graph, cfg) if s.next == ("tools",))
    [again] = tool_messages(run(env, graph, None, before.config))
    assert (again.content, again.artifact) == ("closed A", {"version": 1})
    assert crm.effects == 1


def test_effect_keeps_the_tool_settings() -> None:
    """``effect(tool)`` keeps return_direct, response format and the tool's error handlers."""

    def on_error(exc: ToolException) -> str:
        return f"handled: {exc}"

    @as_tool(return_direct=True, response_format="content_and_artifact")
    def lookup(q: str) -> tuple[str, Any]:
        """Look something up."""
        return q, None

    lookup.handle_tool_error = on_error
    lookup.handle_validation_error = "bad input"
    declared = effect("kb.lookup")(lookup)
    assert declared.return_direct is True
    assert declared.response_format == "content_and_artifact"
    assert declared.handle_tool_error is on_error
    assert declared.handle_validation_error == "bad input"


# ------------------------------------------------------------------------ the tool's own interrupt


def asking_tool(crm: FakeCRM, asked: list[Any]) -> Any:
    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, ctx: EffectContext) -> str:
        """Ask which resolution, then close the case."""
        resolution = interrupt({"question": f"resolution for {case_id}?"})
        asked.append(resolution)
        crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)
        return f"closed {case_id}: {resolution}"

    return close_case


def test_tool_interrupt_answer_reaches_the_tool(env: Env) -> None:
    """A tool asking before it acts is not unknown: its answer reaches it; one effect."""
    crm, asked = FakeCRM(), []
    graph = one_node_graph(
        EffectToolNode([asking_tool(crm, asked)], ledger=env.ledger), env.checkpointer
    )
    cfg = {"configurable": {"thread_id": "ask"}}
    first = run(env, graph, ask(call("close_case", "c1", case_id="A")), cfg)
    assert first["__interrupt__"][0].value == {"question": "resolution for A?"}
    [op] = env.ops()
    assert op.status is S.PREPARED  # released: nothing was sent, nothing is unknown
    assert crm.effects == 0
    done = run(env, graph, Command(resume="duplicate"), cfg)
    assert asked == ["duplicate"]
    assert tool_messages(done)[0].content == "closed A: duplicate"
    [op] = env.ops()
    assert op.status is S.CONFIRMED
    assert crm.effects == 1


def test_an_approved_tool_that_asks_itself_gets_its_own_answer(env: Env) -> None:
    """Approval, then the tool's own interrupt() in the same task: LangGraph hands the
    approval back first on the next run; it is taken back before the tool runs, so the
    tool's question gets the tool's answer, and the provider acts once."""
    crm, asked = FakeCRM(), []

    @effect("crm.close_case", target=lambda a: a["case_id"], require_approval=True)
    def close_case(case_id: str, ctx: EffectContext) -> str:
        """Ask which resolution, then close the case."""
        resolution = interrupt({"question": f"resolution for {case_id}?"})
        asked.append(resolution)
        crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)
        return f"closed {case_id}: {resolution}"

    graph = one_node_graph(EffectToolNode([close_case], ledger=env.ledger), env.checkpointer)
    cfg = {"configurable": {"thread_id": "approve-ask"}}
    first = run(env, graph, ask(call("close_case", "c1", case_id="A")), cfg)
    approval = first["__interrupt__"][0].value
    assert approval["kind"] == "effect_approval"
    second = run(env, graph, Command(resume={"decisions": [{"type": "approve"}], "by": "ana"}), cfg)
    assert second["__interrupt__"][0].value == {"question": "resolution for A?"}
    assert crm.effects == 0
    done = run(env, graph, Command(resume="duplicate"), cfg)
    assert asked == ["duplicate"]
    assert tool_messages(done)[0].content == "closed A: duplicate"
    assert [op.status for op in env.ops()] == [S.CONFIRMED]
    assert crm.effects == 1


# --------------------------------------------------------------------------- wrappers


def test_user_wrappers_run_outside_the_decision(env: Env) -> None:
    """The user's wrapper composes: its edited arguments are what the operation binds to."""
    crm = FakeCRM()
    seen: list[str] = []

    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, ctx: EffectContext) -> str:
        """Close a case."""
        crm.close_case(case_id, "fixed", idempotency_key=ctx.idempotency_key)
        return f"closed {case_id}"

    def upper(request: Any, execute: Any) -> Any:
        seen.append("sync")
        args = {"case_id": request.tool_call["args"]["case_id"].upper()}
        return execute(request.override(tool_call={**request.tool_call, "args": args}))

    async def aupper(request: Any, execute: Any) -> Any:
        seen.append("async")
        args = {"case_id": request.tool_call["args"]["case_id"].upper()}
        return await execute(request.override(tool_call={**request.tool_call, "args": args}))

    node = EffectToolNode(
        [close_case], ledger=env.ledger, wrap_tool_call=upper, awrap_tool_call=aupper
    )
    graph = one_node_graph(node, env.checkpointer)
    cfg = {"configurable": {"thread_id": "wrap"}}
    out = run(env, graph, ask(call("close_case", "c1", case_id="a")), cfg)
    assert tool_messages(out)[0].content == "closed A"
    assert seen == [env.mode]
    [op] = env.ops()
    assert (op.target, op.status) == ("A", S.CONFIRMED)
    assert crm.effects == 1


def test_sync_wrapper_alone_with_an_async_ledger_is_refused() -> None:
    """wrap_tool_call without awrap_tool_call cannot drive an async ledger: a clear error."""
    from langgraph_effects.errors import EffectsError

    class AsyncLedger:
        async def prepare(self, *a: Any, **k: Any) -> Any:  # pragma: no cover - never run
            raise AssertionError

    @effect("x.y")
    def act(x: int) -> int:
        """Act."""
        return x

    with pytest.raises(EffectsError, match="awrap_tool_call"):
        EffectToolNode([act], ledger=AsyncLedger(), wrap_tool_call=lambda r, e: e(r))


# --------------------------------------------------------------------------- plain tools = ToolNode


def _plain_tools() -> list[Any]:
    @as_tool
    def explode(x: int) -> str:
        """Raise a ValueError."""
        raise ValueError(f"boom {x}")

    @as_tool
    def needs_state(x: int, state: Annotated[dict[str, Any], InjectedState("missing")]) -> str:
        """Read a state key that is not there."""
        return str(state)

    return [explode, needs_state]


def _side_effect_free_effect() -> Any:
    @effect("noop.touch")
    def touch(x: int) -> str:
        """An effect tool beside the plain ones."""
        return "touched"

    return touch


def _outcome(node: Any, calls: list[dict[str, Any]], mode: str) -> Any:
    graph = one_node_graph(node)
    try:
        if mode == "async":
            import asyncio

            out = asyncio.run(graph.ainvoke(ask(*calls)))
        else:
            out = graph.invoke(ask(*calls))
    except Exception as exc:
        return ("raised", type(exc).__name__)
    return [(m.status, m.content) for m in tool_messages(out)]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    ("handle", "calls"),
    [
        ((KeyError,), [call("explode", "p1", x=1)]),  # not in the tuple: raised
        ((ValueError,), [call("explode", "p1", x=1)]),  # in the tuple: an error message
        (KeyError, [call("explode", "p1", x=1)]),
        (lambda e: f"typed {e}", [call("explode", "p1", x=1)]),
        (True, [call("explode", "p1", x=1)]),
        (False, [call("explode", "p1", x=1)]),
        (True, [call("needs_state", "p2", x=1)]),  # a missing injected key is raised
        ("default", [call("explode", "p1", x=1)]),  # ToolNode's default re-raises it
        (False, [call("explode", "p1", x="not an int")]),  # invalid arguments
        ("default", [call("explode", "p1", x="not an int")]),
    ],
)
def test_plain_tools_match_toolnode(handle: Any, calls: list[dict[str, Any]], mode: str) -> None:
    """Beside an effect tool, a plain tool's errors come out exactly as from a ToolNode."""
    kwargs = {} if handle == "default" else {"handle_tool_errors": handle}
    tools = _plain_tools()
    expected = _outcome(ToolNode(tools, **kwargs), calls, mode)
    ledger = InMemoryLedger()
    ledger.setup()
    node = EffectToolNode([*tools, _side_effect_free_effect()], ledger=ledger, **kwargs)
    assert _outcome(node, calls, mode) == expected


def test_no_effect_tool_keeps_the_user_wrappers_as_given() -> None:
    """Without effect tools the node is a ToolNode with the user's wrappers, nothing added."""
    calls: list[str] = []

    def wrapper(request: Any, execute: Any) -> Any:
        calls.append(request.tool_call["id"])
        return execute(request)

    ledger = InMemoryLedger()
    ledger.setup()
    node = EffectToolNode(_plain_tools(), ledger=ledger, wrap_tool_call=wrapper)
    out = one_node_graph(node).invoke(ask(call("explode", "p1", x="bad")))
    assert calls == ["p1"]
    assert tool_messages(out)[0].status == "error"


# --------------------------------------------------------------------------- calls that never ran


def test_invalid_arguments_raise_and_leave_nothing_unknown(env: Env) -> None:
    """handle_tool_errors=False: invalid arguments raise as in ToolNode; nothing sent or unknown."""
    crm = FakeCRM()

    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, times: int, ctx: EffectContext) -> str:
        """Close a case."""
        crm.close_case(case_id, "fixed", idempotency_key=ctx.idempotency_key)
        return "closed"

    node = EffectToolNode([close_case], ledger=env.ledger, handle_tool_errors=False)
    graph = one_node_graph(node, env.checkpointer)
    cfg = {"configurable": {"thread_id": "bad"}}
    with pytest.raises(ToolInvocationError):
        run(env, graph, ask(call("close_case", "c1", case_id="A", times="many")), cfg)
    [op] = env.ops()
    assert op.status is S.PREPARED
    assert crm.effects == 0


def test_empty_tool_call_id(env: Env) -> None:
    """A tool call whose id is "" runs once, as any other; asked again in a later turn,
    after its answer, it is a new operation (docs/identity.md)."""
    crm = FakeCRM()

    @effect("crm.close_case", target=lambda a: a["case_id"])
    def close_case(case_id: str, ctx: EffectContext) -> str:
        """Close a case."""
        crm.close_case(case_id, "fixed", idempotency_key=ctx.idempotency_key)
        return f"closed {case_id}"

    graph = one_node_graph(EffectToolNode([close_case], ledger=env.ledger), env.checkpointer)
    cfg = {"configurable": {"thread_id": "empty-id"}}
    out = run(env, graph, ask(call("close_case", "", case_id="A")), cfg)
    assert tool_messages(out)[0].content == "closed A"
    run(env, graph, ask(call("close_case", "", case_id="A")), cfg)
    assert crm.effects == 2
