"""Benchmark 7: a profile of the hot path, the node's own work for one tool call.

The per-tool-call graph of ``benchmarks.tool_call`` (N = 1, ``tools_condition``,
SQLite: saver and ledger on one WAL file) runs ``invokes`` times with
``EffectToolNode`` under ``cProfile``, in every thread (the tool calls run in
LangGraph's executor threads). Reported: the top functions of the package
(``langgraph_effects``, its ``testing`` harness left out) by cumulative time,
per invoke, and the package's own Python time per invoke (the sum of its
functions' own time: what our code costs beyond LangGraph, the tool and the
database calls it makes). cProfile slows Python calls down, so read the
shares, not the absolute times.

Run: ``python -m benchmarks.hot_path [--invokes 200]``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import threading
from collections.abc import Sequence
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
    report.data.update(
        invokes=invokes,
        invoke_ms=total_s * 1000.0 / invokes,
        package_own_ms=own_s * 1000.0 / invokes,
        package_functions=len(ours),
        top=rows,
    )
    report.notes.append(
        f"invoke {total_s * 1000.0 / invokes:.3f} ms under the profiler; the package's own "
        f"Python {own_s * 1000.0 / invokes:.3f} ms of it ({len(ours)} functions); "
        "cumulative includes what a function calls (LangGraph, the tool, sqlite3)"
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
