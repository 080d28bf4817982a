"""Benchmark 7: a profile of the hot path, the node's own work for one tool call.

The per-tool-call graph of ``benchmarks.tool_call`` (N = 1, ``tools_condition``,
SQLite: saver and ledger on one WAL file) runs ``invokes`` times with
``EffectToolNode`` under ``cProfile``, in every thread (the tool calls run in
LangGraph's executor threads). Reported: the top functions of the package
(``langgraph_effects``, its ``testing`` harness left out) by cumulative time,
per invoke, and the package's own Python time per invoke (the sum of its
functions' own time: what our code costs beyond LangGraph, the tool and the
database calls it makes). cProfile slows Python calls down, so read the
shares, not the absolute times. Also counted, without a profiler: the steps from
the node to the receipt's statement (``steps``), on InMemoryLedger and SQLite.

Run: ``python -m benchmarks.hot_path [--invokes 200]``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sqlite3
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from benchmarks._common import Report, write_json
from benchmarks.tool_call import FakeTicketing, _graph, _invoker, _sqlite, _tools

__all__ = ["main", "run"]


def _ours(filename: str) -> bool:
    path = filename.replace("\\", "/")
    return "/langgraph_effects/" in path and "/langgraph_effects/testing/" not in path


def _where(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    path = filename.replace("\\", "/")
    short = path.split("/langgraph_effects/", 1)[-1]
    return f"{short}:{line} {name}"


def profile(invokes: int, warmup: int = 5) -> tuple[pstats.Stats, float]:
    """Profile ``invokes`` N = 1 invokes of the effect graph on SQLite: the stats of
    every thread, and the seconds the invokes took under the profiler."""
    from langgraph_effects import EffectToolNode

    with _sqlite(True) as (saver, ledger, _capture, _pid):
        provider = FakeTicketing()
        _, guarded = _tools(provider)
        invoke = _invoker(_graph(EffectToolNode([guarded], ledger=ledger), 1, saver), "prof", 1)
        for i in range(warmup):
            invoke(-1 - i)
        # One profiler per thread started meanwhile (LangGraph's and ToolNode's
        # executors start theirs per invoke); cProfile sees only its own thread.
        workers: list[cProfile.Profile] = []

        def start(*_: object) -> None:
            worker = cProfile.Profile()
            workers.append(worker)
            worker.enable()

        profiler = cProfile.Profile()
        threading.setprofile(start)
        profiler.enable()
        try:
            for i in range(invokes):
                invoke(i)
        finally:
            profiler.disable()
            threading.setprofile(None)  # type: ignore[arg-type]
        if provider.created != invokes + warmup:
            raise AssertionError(f"provider saw {provider.created} effects")
    stats = pstats.Stats(profiler)
    # The invoke loop's frames are the main thread's largest cumulative time.
    main_s = max(v[3] for v in stats.stats.values())  # type: ignore[attr-defined]
    for worker in workers:
        stats.add(worker)
    return stats, main_s


def _chain(frame: types.FrameType | None) -> list[str]:
    """The frames of ours from ``EffectToolNode._wrap`` down to ``frame``, each followed
    by the generators it is stepping (suspended at the ``yield`` that handed it the
    action or statement under way, ``yield from`` chains included): ``file function``."""
    stack: list[types.FrameType] = []
    while frame is not None:
        stack.append(frame)
        frame = frame.f_back
    stack.reverse()
    start = next(
        i
        for i, f in enumerate(stack)
        if f.f_code.co_name == "_wrap" and _ours(f.f_code.co_filename)
    )
    # A generator is listed once, under the innermost frame holding it: the one stepping it.
    steps: dict[object, str] = {}
    for f in stack[start:]:
        if _ours(f.f_code.co_filename):
            steps[f] = _step(f)
        for value in list(f.f_locals.values()):
            gen = value
            while isinstance(gen, types.GeneratorType) and gen.gi_frame is not None:
                if gen.gi_running or not _ours(gen.gi_frame.f_code.co_filename):
                    break
                steps.pop(id(gen), None)
                steps[id(gen)] = _step(gen.gi_frame) + " (generator)"
                gen = gen.gi_yieldfrom
    return list(steps.values())


def _step(frame: types.FrameType) -> str:
    path = frame.f_code.co_filename.replace("\\", "/").split("/langgraph_effects/", 1)[-1]
    return f"{path} {frame.f_code.co_qualname}"


def _memory_steps() -> Iterator[tuple[Any, Callable[[], list[str]]]]:
    from langgraph_effects import InMemoryLedger

    seen: list[list[str]] = []

    class Seen(InMemoryLedger):
        def confirm(self, *args: Any, **kwargs: Any) -> Any:
            if not seen:
                seen.append([*_chain(sys._getframe(1)), "ledger/memory.py InMemoryLedger.confirm"])
            return super().confirm(*args, **kwargs)

    ledger = Seen()
    ledger.setup()
    yield ledger, lambda: seen[0]


def _sqlite_steps() -> Iterator[tuple[Any, Callable[[], list[str]]]]:
    from langgraph_effects import SQLiteLedger

    seen: list[list[str]] = []

    def statement(sql: str) -> None:
        text = sql.lstrip().upper()
        if not seen and text.startswith("UPDATE") and "STATUS = 'CONFIRMED'" in text:
            seen.append(_chain(sys._getframe(1)))

    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    try:
        ledger = SQLiteLedger(conn)
        ledger.setup()
        conn.set_trace_callback(statement)
        yield ledger, lambda: seen[0]
    finally:
        conn.close()


def steps() -> dict[str, list[str]]:
    """By ledger: the steps (``_chain``) from ``EffectToolNode._wrap`` to the statement
    that records a first-time effect's receipt, N = 1, ``tools_condition``: on
    InMemoryLedger the call of its ``confirm``, on SQLite the ``UPDATE`` confirming it."""
    from langgraph.checkpoint.memory import InMemorySaver

    from langgraph_effects import EffectToolNode

    out: dict[str, list[str]] = {}
    for name, backend in (("memory", _memory_steps), ("sqlite", _sqlite_steps)):
        with contextmanager(backend)() as (ledger, seen):
            _, guarded = _tools(FakeTicketing())
            graph = _graph(EffectToolNode([guarded], ledger=ledger), 1, InMemorySaver())
            _invoker(graph, f"steps-{name}", 1)(0)
            out[name] = seen()
    return out


def run(*, invokes: int = 200, top: int = 15) -> Report:
    """The ``top`` package functions by cumulative time, per invoke."""
    stats, total_s = profile(invokes)
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    ours = {func: v for func, v in table.items() if _ours(func[0])}
    own_s = sum(tt for (_cc, _nc, tt, _ct, _callers) in ours.values())
    ranked = sorted(ours.items(), key=lambda item: item[1][3], reverse=True)[:top]
    report = Report(
        name="hot path: EffectToolNode, N = 1, SQLite, under cProfile (per invoke)",
        columns=["function", "calls", "cumulative ms", "own ms", "share of invoke"],
    )
    rows = []
    for func, (_cc, nc, tt, ct, _callers) in ranked:
        row = {
            "function": _where(func),
            "calls": nc / invokes,
            "cumulative_ms": ct * 1000.0 / invokes,
            "own_ms": tt * 1000.0 / invokes,
            "share": ct / total_s,
        }
        rows.append(row)
        report.add(row["function"], row["calls"], row["cumulative_ms"], row["own_ms"], row["share"])
    chains = steps()
    report.data.update(
        invokes=invokes,
        invoke_ms=total_s * 1000.0 / invokes,
        package_own_ms=own_s * 1000.0 / invokes,
        package_functions=len(ours),
        top=rows,
        steps=chains,
    )
    report.notes.append(
        f"invoke {total_s * 1000.0 / invokes:.3f} ms under the profiler; the package's own "
        f"Python {own_s * 1000.0 / invokes:.3f} ms of it ({len(ours)} functions); "
        "cumulative includes what a function calls (LangGraph, the tool, sqlite3)"
    )
    for name, chain in chains.items():
        files = len({step.split(" ", 1)[0] for step in chain})
        report.notes.append(
            f"steps from EffectToolNode._wrap to the receipt's statement on {name}: "
            f"{len(chain)} frames of ours in {files} files, suspended generators included"
        )
    return report


def main(argv: Sequence[str] | None = None) -> Report:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--invokes", type=int, default=200)
    args = parser.parse_args(argv)
    report = run(invokes=args.invokes)
    print(report.table())
    write_json("hot_path.json", report.as_dict())
    return report


if __name__ == "__main__":
    main()
