"""Benchmark 1: the cost of safety per tool call, EffectToolNode vs a plain ToolNode.

The same graph (a scripted chat model -> tools -> model -> end) runs once per
thread with a plain ``ToolNode`` and with ``EffectToolNode`` over the same
tool, on the same checkpointer, the two interleaved thread by thread:

- SQLite: ``SqliteSaver`` and ``SQLiteLedger`` on separate connections to one
  WAL file, ``synchronous=FULL`` on both (the ledger's receipts with its
  default ``receipt_synchronous``: NORMAL under WAL, see ``ledger.base``);
- PostgreSQL: ``PostgresSaver`` and ``PostgresLedger`` sharing one pool.

N = 1 and N = 10 tool calls per AIMessage, each router (``tools_condition``:
one task; ``route_tool_calls``: one task per call); every invoke uses
``durability="sync"`` (the AIMessage, and so its tool-call ids, is saved
before the tools run: the setting the package tells its users to use).
Reported: median wall time per invoke and the ratio EffectToolNode / ToolNode;
the overhead split by a third variant timed in the same rounds, EffectToolNode
on an ``InMemoryLedger`` (the engine's Python, no I/O), from what the real
ledger's I/O adds; then, untimed, what EffectToolNode adds per effect: write commits (and the
durable ones among them, which wait for the disk), round trips (PostgreSQL),
client CPU (``time.process_time`` of the whole process around the invokes:
on SQLite that includes the database's own work) and, on PostgreSQL, the
server backend's CPU (``/proc``, when the server runs on this machine).

Run: ``python -m benchmarks.tool_call [--threads 200]``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from benchmarks import _effects
from benchmarks._common import (
    PgTrace,
    Report,
    interleaved,
    median_ms,
    pg_schema,
    pool_kwargs,
    postgres_available,
    sqlite_dir,
    write_json,
)
from benchmarks._floor import PostgresFloor, SQLiteFloor
from benchmarks.lifecycle import _sqlite_trace
from langgraph_effects._owners import current_owner
from langgraph_effects.testing import ScriptedChatModel

__all__ = ["main", "run"]


class FakeTicketing:
    """The third-party provider: counts the tickets it creates."""

    def __init__(self) -> None:
        self.created = 0

    def create(self, title: str, priority: str) -> dict[str, Any]:
        self.created += 1
        return {"ticket_id": f"T-{self.created}", "title": title, "priority": priority}


def _tools(provider: FakeTicketing) -> tuple[Any, Any]:
    """The same function as a plain tool and as an effect tool."""
    from langgraph_effects import EffectContext, effect

    def create_ticket(title: str, priority: str) -> dict[str, Any]:
        """Create a support ticket."""
        return provider.create(title, priority)

    def create_ticket_effect(title: str, priority: str, ctx: EffectContext) -> dict[str, Any]:
        """Create a support ticket."""
        return provider.create(title, priority)

    create_ticket_effect.__name__ = "create_ticket"
    plain = tool(create_ticket)
    guarded = effect("ticketing.create", target="ticketing")(create_ticket_effect)
    return plain, guarded


ENGINE = "EffectToolNode, memory ledger"
"""The third timed variant: what the package's Python costs without any ledger I/O."""

ROUTERS = ("tools_condition", "route_tool_calls")
"""``tools_condition``: all calls of a message in one task (the node batches their
prepare). ``route_tool_calls``: one task per call, what the package recommends."""


def _model(calls: int) -> ScriptedChatModel:
    """The scripted model: it asks for ``calls`` tool calls, then answers "done"."""
    return ScriptedChatModel(
        plan=[
            [
                {"name": "create_ticket", "args": {"title": f"#{i}", "priority": "high"}}
                for i in range(calls)
            ]
        ]
    )


def _graph(tool_node: Any, calls: int, saver: Any, router: str = "tools_condition") -> Any:
    from langgraph_effects import route_tool_calls

    model = _model(calls)

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tool_node)
    builder.add_edge(START, "agent")
    route = tools_condition if router == "tools_condition" else route_tool_calls
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def _invoker(graph: Any, label: str, calls: int) -> Callable[[int], object]:
    def invoke(i: int) -> object:
        key = f"{label}-n{calls}-{i}"
        out = graph.invoke(
            {"messages": [HumanMessage(content=key)]},
            {"configurable": {"thread_id": key}},
            durability="sync",
        )
        if len(out["messages"]) != calls + 3:  # human, ai, calls x tool, ai
            raise AssertionError(f"unexpected run: {out['messages']!r}")
        return out

    return invoke


# -- backends -------------------------------------------------------------------


Backend = Iterator[tuple[Any, Any, Callable[[], Any], int | None]]
"""A backend yields the saver, the ledger, a trace capture, and the PostgreSQL backend's
pid (tracing: the pool's only connection) or None."""

FLOOR = "raw-SQL floor"
"""The fourth timed variant: the invoke's effects as raw statements (``benchmarks._floor``)
on a throwaway database of the same backend, no graph: the least any ledger adds to a
plain invoke."""


@contextmanager
def _sqlite(trace: bool = False) -> Backend:
    """Saver and ledger on two connections to one WAL file, ``synchronous=FULL`` on both."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from langgraph_effects import SQLiteLedger

    with sqlite_dir() as directory, ExitStack() as stack:
        path = directory / "graph.db"
        saver_conn = sqlite3.connect(path, check_same_thread=False)
        stack.callback(saver_conn.close)
        saver = SqliteSaver(saver_conn)
        saver.setup()  # turns on WAL
        saver_conn.execute("PRAGMA synchronous=FULL")
        ledger_conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        stack.callback(ledger_conn.close)
        ledger = SQLiteLedger(ledger_conn, synchronous="FULL")
        ledger.setup()
        yield saver, ledger, lambda: _sqlite_trace([saver_conn, ledger_conn]), None


@contextmanager
def _postgres(trace: bool = False) -> Backend:
    """Saver and ledger sharing one pool (exactly one connection when tracing)."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg_pool import ConnectionPool

    from langgraph_effects import PostgresLedger

    conns: list[Any] = []
    size = {"min_size": 1, "max_size": 1} if trace else {"min_size": 4, "max_size": 16}
    with (
        pg_schema() as url,
        ConnectionPool(url, kwargs=pool_kwargs(), configure=conns.append, **size) as pool,
    ):
        saver = PostgresSaver(pool)
        saver.setup()
        ledger = PostgresLedger(pool)
        ledger.setup()
        pool.wait()
        pid = conns[0].info.backend_pid if trace else None
        yield saver, ledger, lambda: PgTrace.capture(conns[0]), pid


BACKENDS: dict[str, Callable[..., Any]] = {"sqlite": _sqlite, "postgres": _postgres}


@contextmanager
def _floor(backend: str) -> Iterator[Any]:
    """The raw-SQL floor on a throwaway database of the backend (its own SQLite file in WAL,
    ``synchronous=FULL``; its own PostgreSQL schema, on a pool of the same size)."""
    if backend == "sqlite":
        with sqlite_dir() as directory:
            floor = SQLiteFloor(str(directory / "floor.db"))
            try:
                floor.setup()
                yield floor
            finally:
                floor.close()
        return
    from psycopg_pool import ConnectionPool

    with (
        pg_schema() as url,
        ConnectionPool(url, kwargs=pool_kwargs(), min_size=4, max_size=16) as pool,
    ):
        floor = PostgresFloor(pool)
        floor.setup()
        pool.wait()
        yield floor


def _floor_invoker(floor: Any, calls: int, router: str, rounds: range) -> Callable[[int], object]:
    """The invoke's effects on the floor: one batch of ``calls`` (``tools_condition``: the
    node prepares them together) or ``calls`` single lifecycles (``route_tool_calls``).
    The drafts of every round in ``rounds`` are built beforehand, untimed."""
    owner = current_owner()
    drafts = {i: _effects.drafts(f"floor-{router}-n{calls}-{i}", calls) for i in rounds}

    def invoke(i: int) -> object:
        ds = drafts[i]
        if router == "tools_condition":
            floor.batch(ds, owner)
        else:
            for d in ds:
                floor.fused(d, owner)
        return None

    return invoke


def _backend_cpu(pid: int | None) -> float | None:
    """Seconds of CPU a local PostgreSQL backend has used (None: not readable here)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu(fn: Callable[[int], object], rounds: int, pid: int | None) -> dict[str, float]:
    """Client (and server backend) CPU ms per invoke over ``rounds`` invokes."""
    server = _backend_cpu(pid)
    start = time.process_time()
    for i in range(rounds):
        fn(-10 - i)
    out = {"client_cpu_ms": (time.process_time() - start) * 1000.0 / rounds}
    after = _backend_cpu(pid)
    if server is not None and after is not None:
        out["server_cpu_ms"] = (after - server) * 1000.0 / rounds
    return out


def measure(
    backend: str,
    calls: int,
    threads: int,
    warmup: int = 3,
    router: str = "tools_condition",
    cpu_rounds: int = 50,
) -> dict[str, Any]:
    """Time ``threads`` invokes per variant (interleaved) on one backend; count and
    measure CPU over ``cpu_rounds`` more, untimed."""
    from langgraph_effects import EffectToolNode, InMemoryLedger

    def variants(saver: Any, ledger: Any, provider: FakeTicketing) -> dict[str, Any]:
        plain, guarded = _tools(provider)
        node = EffectToolNode([guarded], ledger=ledger)
        return {
            "ToolNode": _invoker(_graph(ToolNode([plain]), calls, saver, router), "plain", calls),
            "EffectToolNode": _invoker(_graph(node, calls, saver, router), "effect", calls),
        }

    with BACKENDS[backend]() as (saver, ledger, _, _pid), _floor(backend) as floor:
        provider = FakeTicketing()
        timed_variants = variants(saver, ledger, provider)
        # The engine alone: the same node on an in-memory ledger (no I/O), so the
        # overhead splits into the package's Python and the ledger's I/O.
        memory = InMemoryLedger()
        memory.setup()
        _, guarded = _tools(provider)
        timed_variants[ENGINE] = _invoker(
            _graph(EffectToolNode([guarded], ledger=memory), calls, saver, router), "engine", calls
        )
        timed_variants[FLOOR] = _floor_invoker(floor, calls, router, range(-warmup, threads))
        for fn in timed_variants.values():
            for i in range(warmup):
                fn(-1 - i)
        samples = interleaved(timed_variants, threads)
        expected = (threads + warmup) * calls * 3
        if provider.created != expected:
            raise AssertionError(f"provider saw {provider.created} effects, expected {expected}")
    # Untimed: what one invoke sends to the database, saver and ledger together,
    # and the CPU it costs the client (and the server's backend) per invoke.
    counts: dict[str, dict[str, float]] = {}
    with BACKENDS[backend](True) as (saver, ledger, capture, backend_pid):
        for name, fn in variants(saver, ledger, FakeTicketing()).items():
            fn(-1)  # first use prepares the statements
            with capture() as holder:
                fn(-2)
            trace = holder[0]
            counts[name] = {
                "round_trips": trace.round_trips,
                "transactions": trace.transactions,
                "write_commits": trace.write_commits,
                "durable_commits": trace.durable_commits,
                **_cpu(fn, cpu_rounds, backend_pid),
            }
    plain_ms = median_ms(samples["ToolNode"])
    effect_ms = median_ms(samples["EffectToolNode"])
    engine_ms = median_ms(samples[ENGINE])
    floor_ms = median_ms(samples[FLOOR])
    # The ratio of medians can hide a shift in the tails; the median of paired
    # ratios (same round, adjacent in time) is the noise-robust companion.
    paired = statistics.median(
        e / p for e, p in zip(samples["EffectToolNode"], samples["ToolNode"], strict=True)
    )
    return {
        "backend": backend,
        "calls": calls,
        "threads": threads,
        "toolnode_ms": plain_ms,
        "effect_ms": effect_ms,
        "ratio": effect_ms / plain_ms,
        "paired_ratio": paired,
        "overhead_per_effect_ms": (effect_ms - plain_ms) / calls,
        "engine_ms": engine_ms,
        "engine_per_effect_ms": (engine_ms - plain_ms) / calls,
        "floor_ms": floor_ms,
        "floor_share": floor_ms / plain_ms,
        "ledger_io_per_effect_ms": (effect_ms - engine_ms) / calls,
        "counts_per_invoke": counts,
        "added_per_effect": {
            key: (counts["EffectToolNode"][key] - counts["ToolNode"][key]) / calls
            for key in counts["EffectToolNode"]
            if key in counts["ToolNode"]
        },
        "toolnode_p90_ms": _p90(samples["ToolNode"]),
        "effect_p90_ms": _p90(samples["EffectToolNode"]),
    }


def _p90(samples: Sequence[float]) -> float:
    return statistics.quantiles(samples, n=10)[-1] * 1000.0


def run(
    *,
    threads: int = 200,
    calls: Sequence[int] = (1, 10),
    backends: Sequence[str] | None = None,
    warmup: int = 3,
    routers: Sequence[str] = ("tools_condition",),
    cpu_rounds: int = 50,
) -> Report:
    """Measure every backend x router x N; PostgreSQL is skipped (and said so) when unreachable.

    Ratios are named ``{backend}_n{N}`` for ``tools_condition`` and
    ``{backend}_n{N}_per_call`` for ``route_tool_calls``.
    """
    report = Report(
        name="per tool call: EffectToolNode / ToolNode (same checkpointer, interleaved)",
        columns=[
            "backend",
            "router",
            "N",
            "threads",
            "ToolNode ms",
            "Effect ms",
            "ratio",
            "floor share",
            "paired",
            "+ms/effect",
            "engine +ms/effect",
            "ledger +ms/effect",
            "commits plain/effect",
            "RT plain/effect",
            "+commits/effect",
            "+durable/effect",
            "+RT/effect",
            "+client CPU ms/effect",
            "+server CPU ms/effect",
        ],
    )
    chosen = list(backends or BACKENDS)
    if "postgres" in chosen and (problem := postgres_available()):
        chosen.remove("postgres")
        report.notes.append(f"postgres skipped: {problem}")
    results = []
    for backend in chosen:
        for router, n in ((r, n) for r in routers for n in calls):
            row = measure(backend, n, threads, warmup, router, cpu_rounds)
            row["router"] = router
            added = row["added_per_effect"]
            results.append(row)
            report.add(
                backend,
                "per call" if router == "route_tool_calls" else "one task",
                n,
                threads,
                row["toolnode_ms"],
                row["effect_ms"],
                row["ratio"],
                row["floor_share"],
                row["paired_ratio"],
                row["overhead_per_effect_ms"],
                row["engine_per_effect_ms"],
                row["ledger_io_per_effect_ms"],
                "{}/{}".format(*(c["write_commits"] for c in row["counts_per_invoke"].values())),
                "{}/{}".format(*(c["round_trips"] for c in row["counts_per_invoke"].values()))
                if backend == "postgres"
                else "-",
                added["write_commits"],
                added["durable_commits"],
                added["round_trips"] if backend == "postgres" else "-",
                added["client_cpu_ms"],
                added.get("server_cpu_ms", "-"),
            )
            suffix = "_per_call" if router == "route_tool_calls" else ""
            report.ratios[f"{backend}_n{n}{suffix}"] = row["ratio"]
    report.data["results"] = results
    report.notes.append(
        'durability="sync"; "one task": tools_condition, all calls of a message in one task '
        '(the node batches their prepare); "per call": route_tool_calls, one task per call'
    )
    report.notes.append(
        "engine +ms/effect: the same EffectToolNode on an InMemoryLedger, timed in the same "
        "interleaved rounds (the package's Python, LangGraph's share of it, no I/O); ledger "
        "+ms/effect: the rest, what the real ledger's I/O adds (EffectToolNode - engine)"
    )
    report.notes.append(
        "floor share: the invoke's effects written as raw statements on the same backend "
        "(benchmarks._floor, timed in the same rounds, no graph) / the plain ToolNode invoke: "
        "the least a ratio can be is 1 + floor share, the rest of the distance is ours"
    )
    report.notes.append(
        "+x/effect: what EffectToolNode adds to a plain ToolNode per effect, untimed, over "
        f"{cpu_rounds} invokes; durable = commits that wait for the disk (receipts do not, by "
        "default); client CPU is the whole process (on SQLite it includes the database's work), "
        "server CPU the PostgreSQL backend's (/proc, a local server only)"
    )
    return report


def main(argv: Sequence[str] | None = None) -> Report:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--per-call", action="store_true", help="also route_tool_calls")
    args = parser.parse_args(argv)
    report = run(threads=args.threads, routers=ROUTERS if args.per_call else ROUTERS[:1])
    print(report.table())
    write_json("tool_call.json", report.as_dict())
    return report


if __name__ == "__main__":
    main()
