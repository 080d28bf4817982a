"""Real LangGraph graphs for the node tests: a tiny ReAct loop over the shared scripted model.

The model (``langgraph_effects.testing.ScriptedChatModel``) is deterministic from
the conversation (so a fresh process rebuilds the same graph and resumes it):
after the human message it proposes the configured tool calls (fixed ids), after
tool results it answers "done".
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from langgraph_effects.node import EffectState, EffectToolNode, route_tool_calls
from langgraph_effects.testing.models import ScriptedChatModel


class State(MessagesState, EffectState):
    pass


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def build_graph(
    tools: Sequence[Any],
    tool_calls: list[dict[str, Any]],
    *,
    ledger: Any = None,
    checkpointer: Any = None,
    per_call: bool = True,
    plain: bool = False,
    node_kwargs: dict[str, Any] | None = None,
) -> Any:
    """agent -> tools -> agent; ``plain`` uses a ``ToolNode`` (the control); ``node_kwargs``
    go to either node."""
    model = ScriptedChatModel(plan=[tool_calls])

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    node: ToolNode = (
        ToolNode(tools, **(node_kwargs or {}))
        if plain
        else EffectToolNode(tools, ledger=ledger, **(node_kwargs or {}))
    )
    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    router: Callable[..., Any] = route_tool_calls if per_call else tools_condition
    builder.add_conditional_edges("agent", router, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def counting_prepares(ledger: Any) -> Counter[str]:
    """Count the write-aheads the ledger is asked for (``prepare``, and each draft of a
    ``prepare_many``), delegating every call to the ledger itself."""
    counts: Counter[str] = Counter()
    prepare, prepare_many = ledger.prepare, ledger.prepare_many
    if inspect.iscoroutinefunction(prepare):

        async def aprepare(*args: Any, **kwargs: Any) -> Any:
            counts["prepare"] += 1
            return await prepare(*args, **kwargs)

        async def aprepare_many(drafts: Any, *args: Any, **kwargs: Any) -> Any:
            counts["prepare"] += len(drafts)
            return await prepare_many(drafts, *args, **kwargs)

        ledger.prepare, ledger.prepare_many = aprepare, aprepare_many
        return counts

    def sprepare(*args: Any, **kwargs: Any) -> Any:
        counts["prepare"] += 1
        return prepare(*args, **kwargs)

    def sprepare_many(drafts: Any, *args: Any, **kwargs: Any) -> Any:
        counts["prepare"] += len(drafts)
        return prepare_many(drafts, *args, **kwargs)

    ledger.prepare, ledger.prepare_many = sprepare, sprepare_many
    return counts


# --------------------------------------------------------------------------- backends


class Env:
    """A ledger and a checkpointer of one backend, driven sync or async.

    ``invoke`` runs ``graph.invoke`` or ``graph.ainvoke`` (on the env's own event
    loop); ``ledger_call`` reads the ledger the same way, for assertions.
    """

    def __init__(self, kind: str, mode: str, *, path: Any = None, url: str | None = None) -> None:
        import asyncio
        import contextlib

        self.kind, self.mode = kind, mode
        self.where = url if kind == "postgres" else str(path)  # what a child process opens
        self.is_async = mode == "async"
        self.loop = asyncio.new_event_loop() if self.is_async else None
        self._stack = contextlib.ExitStack()
        self._astack = contextlib.AsyncExitStack()
        self.ledger: Any
        self.checkpointer: Any
        if self.is_async:
            self.run(self._aopen(path, url))
        else:
            self._open(path, url)

    def run(self, coro: Any) -> Any:
        assert self.loop is not None
        return self.loop.run_until_complete(coro)

    def _open(self, path: Any, url: str | None) -> None:
        import sqlite3

        from langgraph.checkpoint.memory import InMemorySaver

        from langgraph_effects import InMemoryLedger

        if self.kind == "memory":
            self.ledger = InMemoryLedger()
            self.checkpointer = InMemorySaver()
        elif self.kind == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            from langgraph_effects import SQLiteLedger

            self.ledger = self._stack.enter_context(SQLiteLedger.from_conn_string(str(path)))
            conn = sqlite3.connect(str(path), check_same_thread=False)
            self._stack.callback(conn.close)
            self.checkpointer = SqliteSaver(conn)
            self.checkpointer.setup()
        else:
            from langgraph.checkpoint.postgres import PostgresSaver
            from psycopg.rows import dict_row
            from psycopg_pool import ConnectionPool

            from langgraph_effects import PostgresLedger

            pool = ConnectionPool(
                url,
                kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
                min_size=1,
                max_size=8,
                open=True,
            )
            self._stack.callback(pool.close)
            self.ledger = PostgresLedger(pool)
            self.checkpointer = PostgresSaver(pool)  # type: ignore[arg-type]
            self.checkpointer.setup()
        self.ledger.setup()

    async def _aopen(self, path: Any, url: str | None) -> None:
        from langgraph.checkpoint.memory import InMemorySaver

        from langgraph_effects import InMemoryLedger

        if self.kind == "memory":
            self.ledger = InMemoryLedger()
            self.checkpointer = InMemorySaver()
            self.ledger.setup()
            return
        if self.kind == "sqlite":
            import aiosqlite
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            from langgraph_effects import AsyncSQLiteLedger

            self.ledger = await self._astack.enter_async_context(
                AsyncSQLiteLedger.from_conn_string(str(path))
            )
            conn = await aiosqlite.connect(str(path))
            self._astack.push_async_callback(conn.close)
            self.checkpointer = AsyncSqliteSaver(conn)
        else:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
            from psycopg.rows import dict_row
            from psycopg_pool import AsyncConnectionPool

            from langgraph_effects import AsyncPostgresLedger

            pool = AsyncConnectionPool(
                url,
                kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
                min_size=1,
                max_size=8,
                open=False,
            )
            await pool.open()
            self._astack.push_async_callback(pool.close)
            self.ledger = AsyncPostgresLedger(pool)
            self.checkpointer = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await self.checkpointer.setup()
        await self.ledger.setup()

    def invoke(self, graph: Any, value: Any, config: dict[str, Any], **kw: Any) -> Any:
        kw.setdefault("durability", "sync")
        if kw["durability"] is None:
            del kw["durability"]  # LangGraph's default: the config carries no durability key
        if self.is_async:
            return self.run(graph.ainvoke(value, config, **kw))
        return graph.invoke(value, config, **kw)

    def refused(self, graph: Any, value: Any, config: dict[str, Any], match: str) -> list[Any]:
        """Answer with ``value``, which must be refused: the run ends asking the same
        request again (its interrupt ids unchanged) with a notice whose words match
        ``match``; returns the pending interrupts."""
        import re

        from langgraph_effects.decide.answers import REFUSED_NOTE

        def interrupts() -> list[Any]:
            state = (
                graph.get_state(config) if not self.is_async else self.run(graph.aget_state(config))
            )
            return [i for task in state.tasks for i in task.interrupts]

        before = [i.id for i in interrupts()]
        self.invoke(graph, value, config)
        after = interrupts()
        assert [i.id for i in after] == before, "the request was not asked again"
        notices = [i.value.get("notice", "") for i in after]
        assert any(n.startswith(REFUSED_NOTE) and re.search(match, n) for n in notices), notices
        return after

    def ledger_call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.ledger, method)(*args, **kwargs)
        if self.is_async and self.kind != "memory":
            return self.run(result)
        return result

    def ops(self, tenant_id: str = "default") -> list[Any]:
        return list(self.ledger_call("list", tenant_id=tenant_id))

    def close(self) -> None:
        if self.is_async:
            self.run(self._astack.aclose())
            assert self.loop is not None
            self.loop.close()
        self._stack.close()
