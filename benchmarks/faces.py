"""Benchmark 1b: the cost of safety on the other faces: ``EffectMiddleware`` in
``create_agent``, and ``EffectToolNode`` with an async ledger under ``ainvoke``.

Same measure as ``benchmarks.tool_call`` (the same scripted model, tool and
provider; the two variants interleaved thread by thread on one checkpointer,
``durability="sync"``; medians of wall time per invoke and their ratio):

- ``middleware``: ``create_agent(model, tools=[plain])`` vs
  ``create_agent(model, tools=[effect], middleware=[EffectMiddleware(ledger=...)])``,
  sync ledgers and savers as in ``tool_call`` (``create_agent`` sends one task
  per tool call, like ``route_tool_calls``);
- ``async``: the ``tools_condition`` graph under ``ainvoke``, ``ToolNode`` vs
  ``EffectToolNode``, on ``AsyncSqliteSaver`` + ``AsyncSQLiteLedger`` (one WAL
  file, ``synchronous=FULL``) and ``AsyncPostgresSaver`` + ``AsyncPostgresLedger``
  (one pool).

Run: ``python -m benchmarks.faces [--threads 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.prebuilt import ToolNode

from benchmarks._common import (
    Report,
    median_ms,
    pg_schema,
    pool_kwargs,
    postgres_available,
    sqlite_dir,
    write_json,
)
from benchmarks.tool_call import BACKENDS, FakeTicketing, _graph, _invoker, _model, _tools

__all__ = ["main", "run"]

FACES = ("middleware", "async")


def _agents(
    saver: Any, ledger: Any, calls: int, provider: FakeTicketing
) -> dict[str, Callable[[int], object]]:
    """``create_agent`` without and with ``EffectMiddleware``, as invokers."""
    from langchain.agents import create_agent

    from langgraph_effects import EffectMiddleware

    plain, guarded = _tools(provider)
    plain_agent = create_agent(_model(calls), tools=[plain], checkpointer=saver)
    effect_agent = create_agent(
        _model(calls),
        tools=[guarded],
        middleware=[EffectMiddleware(ledger=ledger)],
        checkpointer=saver,
    )
    return {
        "ToolNode": _invoker(plain_agent, "plain", calls),
        "EffectToolNode": _invoker(effect_agent, "effect", calls),
    }


# -- async backends -------------------------------------------------------------


@asynccontextmanager
async def _asqlite() -> AsyncIterator[tuple[Any, Any]]:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from langgraph_effects import AsyncSQLiteLedger

    with sqlite_dir() as directory:
        path = directory / "graph.db"
        async with aiosqlite.connect(path) as saver_conn:
            saver = AsyncSqliteSaver(saver_conn)
            await saver.setup()  # turns on WAL
            await saver_conn.execute("PRAGMA synchronous=FULL")
            ledger_conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            try:
                ledger = AsyncSQLiteLedger(ledger_conn, synchronous="FULL")
                await ledger.setup()
                yield saver, ledger
            finally:
                ledger_conn.close()


@asynccontextmanager
async def _apostgres() -> AsyncIterator[tuple[Any, Any]]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg_pool import AsyncConnectionPool

    from langgraph_effects import AsyncPostgresLedger

    with pg_schema() as url:
        async with AsyncConnectionPool(
            url, kwargs=pool_kwargs(), min_size=4, max_size=16, open=False
        ) as pool:
            saver = AsyncPostgresSaver(pool)
            await saver.setup()
            ledger = AsyncPostgresLedger(pool)
            await ledger.setup()
            await pool.wait()
            yield saver, ledger


ABACKENDS = {"sqlite": _asqlite, "postgres": _apostgres}


def _ainvoker(graph: Any, label: str, calls: int) -> Callable[[int], Awaitable[object]]:
    async def ainvoke(i: int) -> object:
        key = f"{label}-n{calls}-{i}"
        out = await graph.ainvoke(
            {"messages": [HumanMessage(content=key)]},
            {"configurable": {"thread_id": key}},
            durability="sync",
        )
        if len(out["messages"]) != calls + 3:
            raise AssertionError(f"unexpected run: {out['messages']!r}")
        return out

    return ainvoke


async def _ainterleaved(
    variants: dict[str, Callable[[int], Awaitable[object]]], rounds: int
) -> dict[str, list[float]]:
    """``benchmarks._common.interleaved`` for coroutines: order alternates every round."""
    loop = asyncio.get_running_loop()
    names = list(variants)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            start = loop.time()
            await variants[name](i)
            samples[name].append(loop.time() - start)
    return samples


async def _measure_async(backend: str, calls: int, threads: int, warmup: int) -> dict[str, Any]:
    from langgraph_effects import EffectToolNode

    async with ABACKENDS[backend]() as (saver, ledger):
        plain, guarded = _tools(provider := FakeTicketing())
        variants = {
            "ToolNode": _ainvoker(_graph(ToolNode([plain]), calls, saver), "plain", calls),
            "EffectToolNode": _ainvoker(
                _graph(EffectToolNode([guarded], ledger=ledger), calls, saver), "effect", calls
            ),
        }
        for fn in variants.values():
            for i in range(warmup):
                await fn(-1 - i)
        samples = await _ainterleaved(variants, threads)
        _check(provider, threads, warmup, calls)
    return _row(samples)


def _measure_middleware(backend: str, calls: int, threads: int, warmup: int) -> dict[str, Any]:
    from benchmarks._common import interleaved

    with BACKENDS[backend]() as (saver, ledger, _capture, _pid):
        provider = FakeTicketing()
        variants = _agents(saver, ledger, calls, provider)
        for fn in variants.values():
            for i in range(warmup):
                fn(-1 - i)
        samples = interleaved(variants, threads)
        _check(provider, threads, warmup, calls)
    return _row(samples)


def _check(provider: FakeTicketing, threads: int, warmup: int, calls: int) -> None:
    expected = (threads + warmup) * calls * 2
    if provider.created != expected:
        raise AssertionError(f"provider saw {provider.created} effects, expected {expected}")


def _row(samples: dict[str, list[float]]) -> dict[str, Any]:
    plain_ms = median_ms(samples["ToolNode"])
    effect_ms = median_ms(samples["EffectToolNode"])
    paired = statistics.median(
        e / p for e, p in zip(samples["EffectToolNode"], samples["ToolNode"], strict=True)
    )
    return {
        "toolnode_ms": plain_ms,
        "effect_ms": effect_ms,
        "ratio": effect_ms / plain_ms,
        "paired_ratio": paired,
    }


def run(
    *,
    threads: int = 200,
    calls: Sequence[int] = (1, 10),
    backends: Sequence[str] | None = None,
    faces: Sequence[str] = FACES,
    warmup: int = 3,
) -> Report:
    """Measure every face x backend x N; ratios are named ``{backend}_n{N}_{face}``."""
    report = Report(
        name="per tool call, the other faces: EffectMiddleware (create_agent), async ledgers "
        "(ainvoke)",
        columns=["face", "backend", "N", "threads", "plain ms", "effect ms", "ratio", "paired"],
    )
    chosen = list(backends or BACKENDS)
    if "postgres" in chosen and (problem := postgres_available()):
        chosen.remove("postgres")
        report.notes.append(f"postgres skipped: {problem}")
    results = []
    for face in faces:
        for backend in chosen:
            for n in calls:
                if face == "middleware":
                    row = _measure_middleware(backend, n, threads, warmup)
                else:
                    row = asyncio.run(_measure_async(backend, n, threads, warmup))
                row.update(face=face, backend=backend, calls=n, threads=threads)
                results.append(row)
                report.add(
                    face,
                    backend,
                    n,
                    threads,
                    row["toolnode_ms"],
                    row["effect_ms"],
                    row["ratio"],
                    row["paired_ratio"],
                )
                report.ratios[f"{backend}_n{n}_{face}"] = row["ratio"]
    report.data["results"] = results
    report.notes.append(
        'durability="sync"; middleware: create_agent (one task per tool call) without and with '
        "EffectMiddleware, sync savers and ledgers as in the per-tool-call table; async: the "
        "tools_condition graph under ainvoke, AsyncSqliteSaver + AsyncSQLiteLedger (one WAL "
        "file, FULL) and AsyncPostgresSaver + AsyncPostgresLedger (one pool)"
    )
    return report


def main(argv: Sequence[str] | None = None) -> Report:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=200)
    args = parser.parse_args(argv)
    report = run(threads=args.threads)
    print(report.table())
    write_json("faces.json", report.as_dict())
    return report


if __name__ == "__main__":
    main()
