"""The engine's own cost per effect, in CPU instructions counted by callgrind (no clock).

The per-tool-call graph of ``benchmarks.tool_call`` (a scripted model -> tools ->
model -> end, one thread per invoke, ``durability="sync"``), here on LangGraph's
``InMemorySaver``, runs with a plain ``ToolNode`` and with ``EffectToolNode`` on an
``InMemoryLedger``: the difference, per effect, is what the package's Python costs
(the ``InMemoryLedger`` column of ``python -m benchmarks``, without the noise of a
clock on a shared machine). Each variant runs in a process of its own under
``valgrind --tool=callgrind``, counting only the invokes after a warm-up: the
counters are zeroed when the loop starts (at ``os.getppid``) and dumped when it
ends (at ``os.getpgrp``), two calls nothing else on this path makes, so imports and
warm-up are not counted. The count does not depend on the load of the machine.

Several trees are measured in one run (``--rev``: a git revision, written to a
temporary directory with ``git archive``; ``--tree``: a directory), each process
importing the package from its tree, so a change is always reported beside the
revisions it is compared with. Needs ``valgrind``; a few minutes.

Run: ``python -m benchmarks.instructions [--rev 299ed72] [--rev main] [--tree .]
[--calls 1] [--router tools_condition] [--invokes 100] [--traced]``.
``--traced``: also EffectToolNode with an OpenTelemetry SDK tracer and meter provider
configured (what a service that exports its telemetry pays).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = ["main"]

VARIANTS = ("ToolNode", "EffectToolNode")
TRACED = "EffectToolNode, OpenTelemetry SDK"


# -- the child: one variant's invokes, counted ----------------------------------------


def _child(variant: str, calls: int, router: str, invokes: int, warmup: int) -> None:
    """Warm up, then run ``invokes`` invokes between ``os.getppid()`` and ``os.getpgrp()``
    (what callgrind counts). Imports only LangGraph and the package's public names, so
    the tree under test may be any revision."""
    import gc

    from langchain_core.messages import BaseMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from langgraph_effects import (
        EffectContext,
        EffectToolNode,
        InMemoryLedger,
        effect,
        route_tool_calls,
    )
    from langgraph_effects.testing import ScriptedChatModel

    created = [0]

    def create_ticket(title: str, priority: str) -> dict[str, Any]:
        """Create a support ticket."""
        created[0] += 1
        return {"ticket_id": f"T-{created[0]}", "title": title, "priority": priority}

    def create_ticket_effect(title: str, priority: str, ctx: EffectContext) -> dict[str, Any]:
        """Create a support ticket."""
        return create_ticket(title, priority)

    create_ticket_effect.__name__ = "create_ticket"
    if variant == "ToolNode":
        node: Any = ToolNode([tool(create_ticket)])
    else:
        if variant == TRACED:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import InMemoryMetricReader
            from opentelemetry.sdk.trace import TracerProvider

            from langgraph_effects.observe import configure

            configure(
                meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
                tracer_provider=TracerProvider(),
            )
        ledger = InMemoryLedger()
        ledger.setup()
        guarded = effect("ticketing.create", target="ticketing")(create_ticket_effect)
        node = EffectToolNode([guarded], ledger=ledger)
    model = ScriptedChatModel(
        plan=[
            [
                {"name": "create_ticket", "args": {"title": f"#{i}", "priority": "high"}}
                for i in range(calls)
            ]
        ]
    )

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    route = tools_condition if router == "tools_condition" else route_tool_calls
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    saver = InMemorySaver()
    graph = builder.compile(checkpointer=saver)

    def invoke(i: int) -> None:
        key = f"t-{i}"
        out = graph.invoke(
            {"messages": [HumanMessage(content=key)]},
            {"configurable": {"thread_id": key}},
            durability="sync",
        )
        if len(out["messages"]) != calls + 3:  # human, ai, calls x tool, ai
            raise AssertionError(f"unexpected run: {out['messages']!r}")
        saver.delete_thread(key)  # the saver's heap stays flat: no growing GC scans

    for i in range(-warmup, 0):
        invoke(i)
    # What the imports and the warm-up left is never scanned by the collector again,
    # so a tree's import size does not weigh on its count.
    gc.collect()
    gc.freeze()
    os.getppid()  # callgrind zeroes its counters here
    for i in range(invokes):
        invoke(i)
    os.getpgrp()  # and dumps them here
    if created[0] != (warmup + invokes) * calls:
        raise AssertionError(f"the provider saw {created[0]} effects")


# -- the parent: trees, processes, the table --------------------------------------------


def _count(tree: Path, variant: str, args: argparse.Namespace) -> int:
    """Instructions of ``args.invokes`` invokes of ``variant``, the package from ``tree``."""
    with tempfile.TemporaryDirectory(prefix="lge-callgrind-") as out:
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}/callgrind.out",
            "--zero-before=os_getppid",
            "--dump-before=os_getpgrp",
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            variant,
            "--calls",
            str(args.calls),
            "--router",
            args.router,
            "--invokes",
            str(args.invokes),
        ]
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{variant} on {tree} failed:\n{done.stderr[-3000:]}")
        dump = Path(out, "callgrind.out.1")
        found = re.search(r"^summary: (\d+)$", dump.read_text() if dump.exists() else "", re.M)
        if found is None:  # pragma: no cover - valgrind's output changed
            raise RuntimeError(f"no dump of the invokes' count:\n{done.stderr[-2000:]}")
        return int(found.group(1))


def _trees(args: argparse.Namespace, scratch: Path) -> list[tuple[str, Path]]:
    here = Path(__file__).resolve().parent.parent
    trees: list[tuple[str, Path]] = []
    for rev in args.rev:
        short = subprocess.run(
            ["git", "rev-parse", "--short", rev], cwd=here, capture_output=True, text=True
        ).stdout.strip()
        if not short:
            raise SystemExit(f"unknown revision {rev!r}")
        target = scratch / short
        target.mkdir()
        archive = subprocess.run(["git", "archive", rev], cwd=here, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
        trees.append((f"{rev} ({short})" if short != rev else rev, target))
    for tree in args.tree:
        trees.append((tree, Path(tree).resolve()))
    return trees


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", action="append", default=[], help="a git revision to measure")
    parser.add_argument("--tree", action="append", default=[], help="a source tree to measure")
    parser.add_argument("--calls", type=int, default=1, help="tool calls per AIMessage (N)")
    parser.add_argument(
        "--router", choices=("tools_condition", "route_tool_calls"), default="tools_condition"
    )
    parser.add_argument("--invokes", type=int, default=100, help="invokes counted per variant")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--traced", action="store_true", help="also with OpenTelemetry's SDK")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind processes at once")
    parser.add_argument(
        "--plain",
        type=float,
        help="the plain ToolNode's instructions per invoke from an earlier run (not counted again)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.calls, args.router, args.invokes, args.warmup)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    if not args.rev and not args.tree:
        args.rev, args.tree = ["299ed72", "main"], ["."]
    variants = [*VARIANTS, *([TRACED] if args.traced else [])]
    with tempfile.TemporaryDirectory(prefix="lge-trees-") as scratch:
        trees = _trees(args, Path(scratch))
        # The plain ToolNode does not run the package: counted once, on the first tree.
        plain_job = [] if args.plain else [(trees[0], VARIANTS[0])]
        jobs = plain_job + [(t, v) for t in trees for v in variants[1:]]
        with ThreadPoolExecutor(args.jobs) as pool:
            counts = list(pool.map(lambda job: _count(job[0][1], job[1], args), jobs))
    per_invoke = {(tree[0], v): n / args.invokes for (tree, v), n in zip(jobs, counts, strict=True)}
    plain = args.plain or per_invoke[(trees[0][0], VARIANTS[0])]
    print(
        f"N = {args.calls}, {args.router}, {args.invokes} invokes counted per variant "
        f"(callgrind); ToolNode: {plain / 1e3:,.0f}k instructions per invoke"
    )
    print(f"{'tree':<28} {'variant':<34} {'per invoke':>12} {'engine/effect':>14} {'vs first':>9}")
    first: dict[str, float] = {}
    for name, _ in trees:
        for variant in variants[1:]:
            engine = (per_invoke[(name, variant)] - plain) / args.calls
            first.setdefault(variant, engine)
            print(
                f"{name:<28} {variant:<34} {per_invoke[(name, variant)] / 1e3:>11,.0f}k "
                f"{engine / 1e3:>13,.0f}k {engine / first[variant]:>8.2f}x"
            )


if __name__ == "__main__":
    main()
