"""Batched writes: the parallel effect calls of one AIMessage, and sibling tasks, share commits.

``tools_condition`` puts every call of the AIMessage in one task; EffectToolNode
prepares them with one ``prepare_many`` before the fan-out. Everything else goes
through group commit (``decide.commit``): a receipt, or the write-ahead of a call
in a task of its own (``route_tool_calls``), that arrives while no commit is in
flight commits at once; one that arrives during a commit joins the next. No call
waits for a sibling, and no receipt is held for one. Commits are counted on the
ledger's own SQLite connection (its statement trace), effects at the tool.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _graphs import State, build_graph, call, tool_messages
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphInterrupt
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send

from langgraph_effects import EffectContext, EffectToolNode, effect
from langgraph_effects.core.model import EventKind, OperationStatus
from langgraph_effects.decide import GroupCommit
from langgraph_effects.errors import LedgerUnavailable
from langgraph_effects.ledger.sqlite import AsyncSQLiteLedger, SQLiteLedger
from langgraph_effects.testing import ScriptedChatModel
from langgraph_effects.testing.faults import scaled

S = OperationStatus


class Tickets:
    """The third-party provider: counts what it created."""

    def __init__(self) -> None:
        self.created: list[str] = []

    def create(self, title: str) -> dict[str, Any]:
        self.created.append(title)
        return {"ticket": f"T-{len(self.created)}", "title": title}


def _commits(conn: sqlite3.Connection) -> list[str]:
    seen: list[str] = []
    conn.set_trace_callback(lambda sql: seen.append(sql) if sql.strip() == "COMMIT" else None)
    return seen


def _calls(n: int) -> list[dict[str, Any]]:
    return [call("create_ticket", f"call-{i}", title=f"t{i}") for i in range(n)]


class HeldCommit:
    """The ledger connection's statement trace: counts its COMMITs, and holds the
    first statement after ``arm`` (in the thread making it) until ``n`` writes queue
    behind it in a group: that commit is then in flight while they arrive."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.commits: list[str] = []
        self._armed: list[tuple[GroupCommit[Any], int]] = []
        self.conn = conn
        conn.set_trace_callback(self._trace)

    def arm(self, group: GroupCommit[Any] | None, n: int) -> None:
        assert group is not None
        self._armed.append((group, n))

    def _trace(self, sql: str) -> None:
        if sql.strip() == "COMMIT":
            self.commits.append(sql)
        if not self._armed:
            return
        group, n = self._armed.pop()
        deadline = time.monotonic() + scaled(5)
        while group.waiting < n and time.monotonic() < deadline:
            time.sleep(0.001)

    def close(self) -> None:
        self.conn.set_trace_callback(None)


def _ledger(conn: sqlite3.Connection, mode: str) -> Any:
    """A sync or async SQLite ledger on ``conn``, set up."""
    ledger: Any = (SQLiteLedger if mode == "sync" else AsyncSQLiteLedger)(conn)
    if mode == "sync":
        ledger.setup()
    else:
        asyncio.run(ledger.setup())
    return ledger


def _bound(node: EffectToolNode, thread_id: str) -> None:
    """Bind the thread to its tenant before the run, so the count holds only the calls' writes."""
    node.runner.tenant_for({"configurable": {"thread_id": thread_id}})


@pytest.mark.parametrize("router", ["tools_condition", "route_tool_calls"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_receipts_arriving_during_a_commit_share_the_next(
    sqlite_path: Path, mode: str, router: str
) -> None:
    """Four parallel calls whose receipts arrive together, group commit: the first receipt
    commits at once (held here until the other three queue behind it), the other three
    share the next commit. One task (``tools_condition``): one prepare_many, then 2
    commits for the receipts. One task per call (``route_tool_calls``): the write-aheads
    group the same way, 2 + 2 commits instead of 4 + 4. Each operation confirmed once."""
    provider = Tickets()
    per_call = router == "route_tool_calls"
    conn = sqlite3.connect(sqlite_path, check_same_thread=False, isolation_level=None)
    ledger = _ledger(conn, mode)
    held = HeldCommit(conn)
    node: Any = None

    def together() -> None:  # the four tools return at once: their receipts arrive together
        held.arm(node.runner.commits.confirms, 3)

    barrier = threading.Barrier(4, action=together)

    @effect("tickets.create", target=lambda a: a["title"])
    def create_ticket(title: str, ctx: EffectContext) -> dict[str, Any]:
        """Create a ticket."""
        barrier.wait(scaled(5))
        return provider.create(title)

    graph = build_graph(
        [create_ticket], _calls(4), ledger=ledger, checkpointer=InMemorySaver(), per_call=per_call
    )
    node = graph.nodes["tools"].bound
    if mode == "sync":
        _bound(node, "t1")
    else:
        asyncio.run(node.runner.atenant_for({"configurable": {"thread_id": "t1"}}))
    held.commits.clear()
    if per_call:
        held.arm(node.runner.commits.prepares, 3)
    config = {"configurable": {"thread_id": "t1"}}
    value = {"messages": [("user", "go")]}
    result = _invoke(graph, mode, value, config)
    held.close()
    assert len(held.commits) == (4 if per_call else 3)
    assert sorted(provider.created) == ["t0", "t1", "t2", "t3"]
    messages = tool_messages(result)
    assert [m.status for m in messages] == ["success"] * 4
    assert sorted(m.content for m in messages) == sorted(
        f'{{"ticket": "T-{i}", "title": "{t}"}}' for i, t in enumerate(provider.created, 1)
    )
    sync_ledger = SQLiteLedger(conn)
    ops = sync_ledger.list(tenant_id="default")
    assert [op.status for op in ops] == [S.CONFIRMED] * 4
    for op in ops:  # each receipt recorded once
        kinds = [e.kind for e in sync_ledger.events("default", op.operation_id)]
        assert kinds.count(EventKind.CONFIRM) == 1
    assert set(result["effect_operations"]) == {op.operation_id for op in ops}
    conn.close()


def _invoke(graph: Any, mode: str, value: Any, config: dict[str, Any]) -> Any:
    """Run ``graph`` once, sync or under ``ainvoke``, with durability="sync"."""
    if mode == "sync":
        return graph.invoke(value, config, durability="sync")
    return asyncio.run(graph.ainvoke(value, config, durability="sync"))


def _take_over(ledger: SQLiteLedger, ctx: EffectContext) -> None:
    """What another worker's takeover does to the operation in flight: unknown, fenced."""
    op = ledger.get(ctx.tenant_id, ctx.operation_id)
    assert op is not None
    ledger.mark_unknown(op.tenant_id, op.operation_id, token=op.fencing_token, reason="takeover")


def _in_pairs(tools: list[Any], calls: list[dict[str, Any]], ledger: Any) -> Any:
    """agent -> tools -> agent, the calls of an AIMessage sent two per task: each task
    prepares its two together."""
    model = ScriptedChatModel(plan=[calls])

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def pairs(state: State) -> Any:
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return END
        tcs = last.tool_calls
        return [Send("tools", tcs[i : i + 2]) for i in range(0, len(tcs), 2)]

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", EffectToolNode(tools, ledger=ledger))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", pairs, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("fail_batch", [False, True], ids=["shared", "batch-fails"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_receipts_of_sibling_tasks_share_a_commit(
    sqlite_path: Path, mode: str, fail_batch: bool
) -> None:
    """Three tasks of two calls each, the six receipts arriving together: the first
    commits at once (held here until the other five queue behind it), the other five
    share the next commit, one ``confirm_many`` of five: 3 + 2 commits instead of 3 + 6.
    A shared batch that fails (the database went away for it) falls back: each receipt
    is committed on its own. Either way each operation is confirmed once."""
    provider = Tickets()
    conn = sqlite3.connect(sqlite_path, check_same_thread=False, isolation_level=None)
    ledger = _ledger(conn, mode)
    held = HeldCommit(conn)
    sizes: list[int] = []
    inner = ledger.confirm_many

    def note(confirmations: Any) -> None:
        sizes.append(len(confirmations))
        if fail_batch:
            raise LedgerUnavailable("the database went away for the batch (the test)")

    def confirm_many(confirmations: Any) -> Any:
        note(confirmations)
        return inner(confirmations)

    async def aconfirm_many(confirmations: Any) -> Any:
        note(confirmations)
        return await inner(confirmations)

    ledger.confirm_many = confirm_many if mode == "sync" else aconfirm_many
    node: Any = None
    barrier = threading.Barrier(6, action=lambda: held.arm(node.runner.commits.confirms, 5))

    @effect("tickets.create", target=lambda a: a["title"])
    def create_ticket(title: str, ctx: EffectContext) -> dict[str, Any]:
        """Create a ticket."""
        barrier.wait(scaled(5))
        return provider.create(title)

    graph = _in_pairs([create_ticket], _calls(6), ledger)
    node = graph.nodes["tools"].bound
    config = {"configurable": {"thread_id": "t1"}}
    if mode == "sync":
        _bound(node, "t1")
    else:
        asyncio.run(node.runner.atenant_for(config))
    held.commits.clear()
    value = {"messages": [("user", "go")]}
    result = _invoke(graph, mode, value, config)
    held.close()
    assert sizes == [5]
    assert len(held.commits) == 3 + (6 if fail_batch else 2)
    assert sorted(provider.created) == [f"t{i}" for i in range(6)]
    assert [m.status for m in tool_messages(result)] == ["success"] * 6
    sync_ledger = SQLiteLedger(conn)
    ops = sync_ledger.list(tenant_id="default")
    assert [op.status for op in ops] == [S.CONFIRMED] * 6
    for op in ops:
        kinds = [e.kind for e in sync_ledger.events("default", op.operation_id)]
        assert kinds.count(EventKind.CONFIRM) == 1
    conn.close()


def test_a_stale_receipt_in_a_shared_commit_settles_only_its_own_call(sqlite_path: Path) -> None:
    """Three tasks of two calls each; one call is taken over while in flight. Its receipt
    ends last and shares a commit with a sibling's: the refused receipt is kept on its own
    operation, which it then settles (confirmed from the kept receipt, never sent again);
    every other receipt, its task-mate's included, is confirmed by the commit. Each ticket
    was created once."""
    provider = Tickets()
    conn = sqlite3.connect(sqlite_path, check_same_thread=False, isolation_level=None)
    ledger = SQLiteLedger(conn)
    ledger.setup()
    held = HeldCommit(conn)
    node: Any = None
    barrier = threading.Barrier(6, action=lambda: held.arm(node.runner.commits.confirms, 2))

    @effect("tickets.create", target=lambda a: a["title"])
    def create_ticket(title: str, ctx: EffectContext) -> dict[str, Any]:
        """Create a ticket."""
        if title == "t3":  # another worker takes this operation over while we are in flight
            _take_over(ledger, ctx)
        if barrier.broken:  # the run after the takeover: no siblings to wait for
            return provider.create(title)
        barrier.wait(scaled(5))
        if title == "t3":
            time.sleep(0.05)  # its task ends last: it joins a shared commit
        return provider.create(title)

    graph = _in_pairs([create_ticket], _calls(6), ledger)
    node = graph.nodes["tools"].bound
    config = {"configurable": {"thread_id": "t1"}}
    result = graph.invoke({"messages": [("user", "go")]}, config, durability="sync")
    held.close()
    assert sorted(provider.created) == [f"t{i}" for i in range(6)]
    ops = {op.target: op for op in ledger.list(tenant_id="default")}
    assert {t: op.status for t, op in ops.items()} == dict.fromkeys(ops, S.CONFIRMED)
    for target, op in ops.items():
        kinds = [e.kind for e in ledger.events("default", op.operation_id)]
        assert (EventKind.EVIDENCE in kinds) is (target == "t3")
        assert kinds[-1] is (EventKind.RESOLVE if target == "t3" else EventKind.CONFIRM)
    assert ledger.stats().stale_token_refusals == 1
    assert [m.status for m in tool_messages(result)] == ["success"] * 6
    conn.close()


def test_a_stale_receipt_of_a_prepared_call_is_kept_and_settles_it(sqlite_path: Path) -> None:
    """A call prepared with its siblings is taken over mid-flight (a worker frozen past its
    lease): its siblings' receipts are confirmed, its own refused receipt is kept as
    evidence and settles the taken-over operation (confirmed, never sent again); the task
    answers every call. The provider acted once per ticket."""
    provider = Tickets()
    conn = sqlite3.connect(sqlite_path, check_same_thread=False, isolation_level=None)
    ledger = SQLiteLedger(conn)
    ledger.setup()

    @effect("tickets.create", target=lambda a: a["title"])
    def create_ticket(title: str, ctx: EffectContext) -> dict[str, Any]:
        """Create a ticket."""
        if title == "t1":  # another worker takes this operation over while we are in flight
            _take_over(ledger, ctx)
        return provider.create(title)

    graph = build_graph(
        [create_ticket], _calls(3), ledger=ledger, checkpointer=InMemorySaver(), per_call=False
    )
    config = {"configurable": {"thread_id": "t1"}}
    result = graph.invoke({"messages": [("user", "go")]}, config, durability="sync")
    assert sorted(provider.created) == ["t0", "t1", "t2"]
    ops = {op.target: op for op in ledger.list(tenant_id="default")}
    assert {t: op.status for t, op in ops.items()} == dict.fromkeys(("t0", "t1", "t2"), S.CONFIRMED)
    assert ledger.events("default", ops["t1"].operation_id)[-1].kind is EventKind.RESOLVE
    assert EventKind.EVIDENCE in [e.kind for e in ledger.events("default", ops["t1"].operation_id)]
    assert ledger.events("default", ops["t0"].operation_id)[-1].kind is EventKind.CONFIRM
    assert ledger.stats().stale_token_refusals == 1
    assert [m.status for m in tool_messages(result)] == ["success"] * 3
    conn.close()


def _ticket_tool(provider: Tickets) -> Any:
    @effect("tickets.create", target=lambda a: a["title"])
    def create_ticket(title: str, ctx: EffectContext) -> dict[str, Any]:
        """Create a ticket."""
        return provider.create(title)

    return create_ticket


def _confirm_commits(conn: sqlite3.Connection) -> list[str]:
    """The batched receipts' statements (one ``UPDATE`` per confirmed call, per commit)."""
    seen: list[str] = []
    conn.set_trace_callback(lambda sql: seen.append(sql.strip().split()[0]))
    return seen


def test_fewer_threads_than_calls_commit_without_waiting(sqlite_path: Path) -> None:
    """max_concurrency=2, five calls, and the first blocks in its provider until the other
    four have returned: they run one after another on the one free thread, so each
    returns while a sibling is still running and three of them have not started. A call
    that waited for its siblings' receipts would never free the thread (the test fails
    on the first call's guard instead of hanging). Each receipt is committed before its
    call returns (read on another connection), none waits for t0: one commit each."""
    returned: list[str] = []
    committed_on_return: list[S] = []
    others_returned = threading.Event()

    class Blocking(Tickets):
        def create(self, title: str) -> dict[str, Any]:
            if title == "t0":
                assert others_returned.wait(scaled(10)), f"t0 still blocked; returned: {returned}"
            return super().create(title)

    def note_return(request: Any, execute: Any) -> Any:
        answer = execute(request)
        title = request.tool_call["args"]["title"]
        with SQLiteLedger.from_conn_string(str(sqlite_path)) as reader:
            [op] = [op for op in reader.list(tenant_id="default") if op.target == title]
        committed_on_return.append(op.status)
        returned.append(title)
        if len(returned) == 4:
            others_returned.set()
        return answer

    provider = Blocking()
    conn = sqlite3.connect(sqlite_path, check_same_thread=False, isolation_level=None)
    ledger = SQLiteLedger(conn)
    ledger.setup()
    graph = build_graph(
        [_ticket_tool(provider)],
        _calls(5),
        ledger=ledger,
        checkpointer=InMemorySaver(),
        per_call=False,
        node_kwargs={"wrap_tool_call": note_return},
    )
    commits = _commits(conn)
    result = graph.invoke(
        {"messages": [("user", "go")]},
        {"configurable": {"thread_id": "t1"}, "max_concurrency": 2},
        durability="sync",
    )
    conn.set_trace_callback(None)
    assert returned == ["t1", "t2", "t3", "t4", "t0"]
    assert committed_on_return == [S.CONFIRMED] * 5
    assert len(commits) == 7  # binding, prepare_many, a receipt each
    assert sorted(provider.created) == [f"t{i}" for i in range(5)]
    assert [m.status for m in tool_messages(result)] == ["success"] * 5
    assert [op.status for op in ledger.list(tenant_id="default")] == [S.CONFIRMED] * 5
    conn.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_failing_sibling_leaves_the_receipts_recorded(sqlite_path: Path, mode: str) -> None:
    """A plain sibling raises while an effect call's provider is still at work (the task
    fails, as with ToolNode): the node raises only once every effect call's receipt is
    recorded. Under ``ainvoke`` ToolNode's ``gather`` would leave that call running past
    the task, and the end of ``asyncio.run`` would cancel it before its receipt."""
    raised = threading.Event()

    class Late(Tickets):
        def create(self, title: str) -> dict[str, Any]:
            if title == "t2":
                assert raised.wait(scaled(10)), "the plain sibling never ran"
            return super().create(title)

    provider = Late()

    @tool
    def explode(title: str) -> str:
        """Fail while t2's provider is at work."""
        raised.set()
        raise ValueError("boom")

    conn = sqlite3.connect(sqlite_path, check_same_thread=False, isolation_level=None)
    ledger = _ledger(conn, mode)
    calls = [*_calls(3), call("explode", "call-x", title="x")]
    graph = build_graph(
        [_ticket_tool(provider), explode],
        calls,
        ledger=ledger,
        checkpointer=InMemorySaver(),
        per_call=False,
    )
    config = {"configurable": {"thread_id": "t1"}}
    value = {"messages": [("user", "go")]}

    with pytest.raises(ValueError, match="boom"):
        _invoke(graph, mode, value, config)
    assert sorted(provider.created) == ["t0", "t1", "t2"]
    ops = SQLiteLedger(conn).list(tenant_id="default")
    assert [op.status for op in ops] == [S.CONFIRMED] * 3
    conn.close()


def test_a_call_its_wrapper_answers_holds_no_receipt_back(sqlite_path: Path) -> None:
    """A user wrapper answers one effect call without running it: its siblings' receipts
    commit without waiting for a receipt that will never come, and its claim is given back
    (``prepared``: nothing was sent)."""
    provider = Tickets()

    def skip_t1(request: Any, execute: Any) -> Any:
        if request.tool_call["args"]["title"] == "t1":
            return ToolMessage("skipped", tool_call_id=request.tool_call["id"])
        return execute(request)

    conn = sqlite3.connect(sqlite_path, check_same_thread=False, isolation_level=None)
    ledger = SQLiteLedger(conn)
    ledger.setup()
    graph = build_graph(
        [_ticket_tool(provider)],
        _calls(3),
        ledger=ledger,
        checkpointer=InMemorySaver(),
        per_call=False,
        node_kwargs={"wrap_tool_call": skip_t1},
    )
    result = graph.invoke(
        {"messages": [("user", "go")]}, {"configurable": {"thread_id": "t1"}}, durability="sync"
    )
    assert sorted(provider.created) == ["t0", "t2"]
    assert "skipped" in [m.content for m in tool_messages(result)]
    statuses = {op.payload["title"]: op.status for op in ledger.list(tenant_id="default")}
    assert statuses == {"t0": S.CONFIRMED, "t1": S.PREPARED, "t2": S.CONFIRMED}
    conn.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_sibling_asking_a_person_leaves_the_receipts_committed(
    sqlite_path: Path, mode: str
) -> None:
    """An approval first in the AIMessage and two calls prepared together after it, in one
    task (the first call asks at once: ``decide.turns`` holds a question only behind the
    calls before it): the approval interrupts the task while the two providers are still at
    work; the node waits
    for them and their receipts are committed before it raises (under ``ainvoke`` too, where
    ToolNode's ``gather`` would leave them running past the task). Approved, the task runs
    again: the two replay, the third dispatches. Each ticket created once."""
    asked_first = threading.Event()
    at_work = threading.Semaphore(0)

    class Slow(Tickets):
        def create(self, title: str) -> dict[str, Any]:
            if title != "e":
                at_work.release()
                assert asked_first.wait(scaled(10)), "the approval was never asked"
            return super().create(title)

    provider = Slow()

    @effect("tickets.escalate", target=lambda a: a["title"], require_approval=True)
    def escalate(title: str, ctx: EffectContext) -> dict[str, Any]:
        """Escalate a ticket (a person approves first)."""
        return provider.create(title)

    def both_at_work(request: Any) -> None:
        """The approval asks only once both providers are inside their call (on a loaded
        machine ToolNode may not have started the third call's thread yet)."""
        if request.tool_call["name"] == "escalate" and not asked_first.is_set():
            for _ in range(2):
                assert at_work.acquire(timeout=scaled(10)), "a provider was never called"

    def note_ask(request: Any, execute: Any) -> Any:
        both_at_work(request)
        try:
            return execute(request)
        except GraphInterrupt:
            asked_first.set()
            raise

    async def anote_ask(request: Any, execute: Any) -> Any:
        await asyncio.to_thread(both_at_work, request)
        try:
            return await execute(request)
        except GraphInterrupt:
            asked_first.set()
            raise

    conn = sqlite3.connect(sqlite_path, check_same_thread=False, isolation_level=None)
    ledger = _ledger(conn, mode)
    graph = build_graph(
        [_ticket_tool(provider), escalate],
        [call("escalate", "call-e", title="e"), *_calls(2)],
        ledger=ledger,
        checkpointer=InMemorySaver(),
        per_call=False,
        node_kwargs={"wrap_tool_call": note_ask, "awrap_tool_call": anote_ask},
    )
    config = {"configurable": {"thread_id": "t1"}}

    first = _invoke(graph, mode, {"messages": [("user", "go")]}, config)
    assert "__interrupt__" in first
    assert sorted(provider.created) == ["t0", "t1"]
    statuses = {op.target: op.status for op in SQLiteLedger(conn).list(tenant_id="default")}
    assert statuses == {"t0": S.CONFIRMED, "t1": S.CONFIRMED, "e": S.PREPARED}
    (asked,) = first["__interrupt__"]
    answer = {"operation_id": asked.value["operation_id"], "decision": "approve", "by": "ana"}
    result = _invoke(graph, mode, Command(resume=answer), config)
    assert sorted(provider.created) == ["e", "t0", "t1"]
    assert [m.status for m in tool_messages(result)] == ["success"] * 3
    conn.close()
