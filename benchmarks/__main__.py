"""Run the benchmarks: ``python -m benchmarks [--quick] [--only NAME ...]``.

Full (about 10 minutes): per tool call (both routers), the other faces
(``EffectMiddleware``, async ledgers), lifecycle vs floor, concurrency, recovery,
memory, the DBOS peer, the hot path's profile. ``--quick`` (< 5 minutes): per
tool call (both routers), the other faces, lifecycle (it gives the floor ratio
and our cost per effect), the DBOS peer and the hot path's profile, at smaller
sizes. Each benchmark prints its table and writes its own JSON; this runner also
writes ``latest.json`` (and ``latest.md``) with every ratio, the targets and
whether each was met. Results go to a fresh temporary directory (or
``$LGE_BENCH_RESULTS_DIR``); ``--save`` writes them into ``benchmarks/results/``,
replacing the committed ones (a full run then redraws the docs' pictures).
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import (
    cli,
    concurrency,
    dbos_peer,
    faces,
    hot_path,
    lifecycle,
    memory,
    plots,
    recovery,
    tool_call,
)
from benchmarks._common import (
    COMMITTED_RESULTS,
    Report,
    machine,
    use_results_dir,
    write_json,
)

# mode -> benchmark -> how to run it at that mode's size. "quick" skips the slow
# ones; "smoke" is the tiny run tests/docs/test_benchmarks_smoke.py makes so the
# scripts never rot (its figures mean nothing).
PLAN: dict[str, dict[str, Callable[[], Report]]] = {
    "full": {
        "tool_call": lambda: tool_call.run(threads=200, routers=tool_call.ROUTERS),
        "faces": lambda: faces.run(threads=150),
        "lifecycle": lambda: lifecycle.run(rounds=300),
        "dbos_peer": lambda: dbos_peer.run(rounds=100),
        "concurrency": lambda: concurrency.run(seconds=3.0, rounds=30),
        "recovery": lambda: recovery.run(sizes=(10_000, 100_000, 1_000_000)),
        "memory": lambda: memory.run(effects=100_000),
        "hot_path": lambda: hot_path.run(invokes=300),
        "cli": lambda: cli.run(rounds=9),
    },
    "quick": {
        "tool_call": lambda: tool_call.run(threads=200, routers=tool_call.ROUTERS),
        "faces": lambda: faces.run(threads=60),
        "lifecycle": lambda: lifecycle.run(rounds=100),
        "dbos_peer": lambda: dbos_peer.run(rounds=60),
        "hot_path": lambda: hot_path.run(invokes=100),
        "cli": lambda: cli.run(rounds=5),
    },
    "smoke": {
        "tool_call": lambda: tool_call.run(
            threads=2, calls=(1, 10), warmup=1, routers=tool_call.ROUTERS, cpu_rounds=2
        ),
        "faces": lambda: faces.run(threads=2, calls=(1, 10), warmup=1),
        "lifecycle": lambda: lifecycle.run(rounds=2),
        "dbos_peer": lambda: dbos_peer.run(rounds=2),
        "concurrency": lambda: concurrency.run(workers=(2,), seconds=0.2, rounds=2),
        "recovery": lambda: recovery.run(sizes=(100, 300), repeat=2),
        "memory": lambda: memory.run(effects=100),
        "hot_path": lambda: hot_path.run(invokes=3),
        "cli": lambda: cli.run(rounds=1),
    },
}

# ratio name -> (bound, "le" | "lt" | "ge"): the speed targets. Per tool call:
# <= 1.10 at N = 1 and <= 1.15 at N = 10 on both backends, for both routers
# (``_per_call``: route_tool_calls), EffectMiddleware and the async ledgers.
_PER_CALL_FACES = ("", "_per_call", "_middleware", "_async")
TARGETS: dict[str, tuple[float, str]] = {
    **{
        f"{backend}_n{n}{face}": (bound, "le")
        for face in _PER_CALL_FACES
        for backend in ("postgres", "sqlite")
        for n, bound in ((1, 1.10), (10, 1.15))
    },
    "ledger_vs_floor_postgres": (1.2, "le"),
    "ledger_vs_floor_sqlite": (1.2, "le"),
    "ledger_vs_dbos_step": (0.33, "le"),
    "effects_per_s_8": (2500.0, "ge"),
    "list_unknown_ms_1000000": (5.0, "le"),
    **{f"cli_cpu_s_{name.strip('-')}": (bound, "lt") for name, bound in cli.TARGETS.items()},
}


_MEETS: dict[str, Callable[[float, float], bool]] = {
    "le": lambda value, bound: value <= bound,
    "lt": lambda value, bound: value < bound,
    "ge": lambda value, bound: value >= bound,
}
_SIGN = {"le": "<=", "lt": "<", "ge": ">="}


def targets(ratios: dict[str, float]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, (bound, how) in TARGETS.items():
        value = ratios.get(name)
        met = None if value is None else _MEETS[how](value, bound)
        out[name] = {
            "value": value,
            "target": f"{_SIGN[how]} {bound}",
            "met": met,
        }
    return out


def markdown(summary: dict[str, Any]) -> str:
    """The results as Markdown for the README: machine, targets, and every table."""
    m = summary["machine"]
    lines = [
        f"Measured {m['date']} ({summary['mode']} run, {summary['seconds']:.0f} s) on "
        f"{m['cores']} cores ({m['cpu']}), PostgreSQL {m['postgres']} on loopback, "
        f"SQLite {m['sqlite']}, Python {m['python']}; load average at start "
        f"{', '.join(f'{x:.1f}' for x in m['load_avg_at_start'] or [])} (a shared machine: "
        "read the ratios, measured interleaved in one run, rather than the absolute times).",
        "",
        "| target | measured | bound | |",
        "|---|---|---|---|",
    ]
    for name, t in summary["targets"].items():
        value = "-" if t["value"] is None else f"{t['value']:.3f}"
        verdict = {True: "met", False: "**missed**", None: "not measured"}[t["met"]]
        lines.append(f"| `{name}` | {value} | {t['target']} | {verdict} |")
    for report in summary["reports"].values():
        lines += ["", f"**{report['name']}**", ""]
        lines.append("| " + " | ".join(report["columns"]) + " |")
        lines.append("|" + "---|" * len(report["columns"]))
        for row in report["rows"]:
            cells = [
                f"{v:.3f}"
                if isinstance(v, float) and abs(v) < 100
                else f"{v:.0f}"
                if isinstance(v, float)
                else str(v)
                for v in row
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines += [f"- {note}" for note in report["notes"]]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="per tool call, lifecycle, DBOS")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--only", nargs="*", choices=list(PLAN["full"]), help="run only these")
    parser.add_argument(
        "--save",
        action="store_true",
        help="write into benchmarks/results/, replacing the committed results (default: a "
        "temporary directory, or $LGE_BENCH_RESULTS_DIR)",
    )
    args = parser.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    with contextlib.ExitStack() as stack:
        if args.save:
            stack.enter_context(use_results_dir(COMMITTED_RESULTS))
        return _run(mode, args.only, save=args.save)


def _run(mode: str, only: Sequence[str] | None, *, save: bool) -> dict[str, Any]:

    info = machine()
    started = time.perf_counter()
    reports: dict[str, Any] = {}
    ratios: dict[str, float] = {}
    for name, job in PLAN[mode].items():
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        report = job()
        report.data["seconds"] = time.perf_counter() - t0
        print(report.table(), f"({report.data['seconds']:.1f} s)\n", sep="\n", flush=True)
        write_json(f"{name}.json", report.as_dict())
        reports[name] = report.as_dict()
        ratios.update(report.ratios)
    checked = targets(ratios)
    print("== targets ==")
    for name, t in checked.items():
        value = "-" if t["value"] is None else f"{t['value']:.3f}"
        verdict = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        print(f"{name:32} {value:>10}  {t['target']:>10}  {verdict}")
    summary = {
        "mode": mode,
        "machine": info,
        "seconds": time.perf_counter() - started,
        "ratios": ratios,
        "targets": checked,
        "reports": reports,
    }
    path = write_json("latest.json", summary)
    (path.parent / "latest.md").write_text(markdown(summary))
    print(f"\nwrote {path} (and latest.md) in {summary['seconds']:.0f} s")
    if not save:
        print(f"(the committed results in {COMMITTED_RESULTS} are unchanged: --save replaces them)")
    elif mode == "full" and not only:  # the pictures of docs/benchmarks.md follow the run
        print("drew", ", ".join(p.name for p in plots.draw(path)))
    return summary


if __name__ == "__main__":
    main()
