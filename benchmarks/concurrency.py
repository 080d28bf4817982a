"""Benchmark 3: concurrency on PostgreSQL, with worker processes.

- Throughput: 4, 8 and 16 worker processes (each with its own pool and
  ``PostgresLedger``, as separate machines would have) confirm distinct
  operations for a fixed time, each effect as the node does it
  (``prepare(owner=...)`` + ``confirm``). The same workers also run the raw
  statements of the floor (``benchmarks._floor``: same rows, same commits),
  interleaved with the ledger rounds, so each worker count has its own floor.
  Reported: confirmed effects/s, and the CPU each effect costs on both sides
  of the socket, which bounds what the machine can do at all (below).
- Contention: the same workers all race for ONE operation per round, through
  ``prepare(owner=...)`` (two resumes of one thread: the row may not exist
  yet) and through ``claim`` (the row is ``prepared``). Exactly one may win;
  reported: winners per round (must be 1) and the time to decide (start
  signal -> last worker's answer), median over rounds.

Workers are processes, not threads: the GIL would otherwise measure Python,
not the database. Each worker count spawns its workers once; they connect,
warm up and build their drafts before each timed window, never inside it.

What the machine allows. An effect costs CPU in its worker (client), in its
PostgreSQL backend (server) and in PostgreSQL's background processes (WAL
writer, checkpointer: receipts commit asynchronously, so their flush is the
WAL writer's). The waits in between (a durable commit's fsync, the socket)
overlap with other workers' CPU, so once the cores are saturated::

    effects/s <= cores * 1000 / (client + server + background ms per effect)

That bound is reported next to each measured figure ("CPU bound"), with the
cores our processes actually got in the window ("our cores": the machine is
shared, and a neighbour's load lowers the measured figure, not the bound).

Why throughput falls from 4 to 16 workers on 2 cores (measured with this
harness, PostgreSQL's pg_stat_activity and /proc): the backends wait on their
clients (ClientRead, 85-96% of samples), not on locks or rows (each worker
writes its own rows; WAL flush waits are 2-11% and shrink as more commits
share a flush); the cores are 99-100% busy; and the CPU each effect costs
rises with the number of processes, for the floor's raw statements as much as
for the ledger (client about +50%, server +20-50% from 1 to 16 workers, with
preemptions per effect 0.7 -> 2.6). Past saturation, more workers add only
queueing and that overhead: oversubscription, not contention in the ledger.

Run: ``python -m benchmarks.concurrency [--seconds 3] [--rounds 30] [--repeat 2]``.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import _effects
from benchmarks._common import Report, pg_schema, pool_kwargs, postgres_available, write_json

__all__ = ["SHAPES", "cpu_bound", "main", "run"]

SHAPES = ("ledger", "floor")
"""What a throughput round runs: our ledger, or the floor's raw statements."""

_DRAFTS_PER_SECOND = 8000
"""Drafts the workers build per second of window, together (a worker stops if it runs out)."""


def _ledger(url: str) -> tuple[Any, Any]:
    from psycopg_pool import ConnectionPool

    from langgraph_effects import PostgresLedger

    pool = ConnectionPool(url, min_size=1, max_size=1, kwargs=pool_kwargs(), open=True)
    pool.wait()
    return pool, PostgresLedger(pool)


def _steps(pool: Any, ledger: Any) -> dict[str, Callable[[Any, Any], None]]:
    from benchmarks._floor import PostgresFloor

    floor = PostgresFloor(pool)
    return {
        "ledger": lambda d, owner: _effects.fused(ledger, d, owner),
        "floor": floor.fused,
    }


def _throughput_worker(
    idx: int, workers: int, url: str, schedule: Sequence[str], seconds: float, start: Any, out: Any
) -> None:
    """Run one timed window per entry of ``schedule``; report effects and CPU of each."""
    from langgraph_effects._owners import current_owner

    pool, ledger = _ledger(url)
    owner = current_owner()
    steps = _steps(pool, ledger)
    with pool.connection() as conn:
        backend_pid = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
    size = max(50, math.ceil(seconds * _DRAFTS_PER_SECOND / workers))
    for n, shape in enumerate(schedule):
        step = steps[shape]
        step(_effects.draft(f"warm-{n}-{idx}"), owner)
        batch = _effects.drafts(f"r{n}-w{idx}", size)  # built before the clock
        start.wait()
        done = 0
        client0, server0 = time.process_time(), _cpu_seconds(backend_pid)
        switches0 = _preemptions()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline and done < size:
            step(batch[done], owner)
            done += 1
        out.put(
            (
                n,
                done,
                time.process_time() - client0,
                _cpu_seconds(backend_pid) - server0,
                _preemptions() - switches0,
                done == size,
            )
        )
        start.wait()  # nobody builds the next round's drafts inside another's window
    pool.close()


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of a local process, e.g. our PostgreSQL backend; 0 if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0  # PostgreSQL on another host: server CPU is not visible


def _preemptions() -> int:
    """Involuntary context switches of this process so far (the scheduler took the core)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("nonvoluntary_ctxt_switches"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _background_pids(url: str) -> list[int]:
    """PostgreSQL's own processes (postmaster, WAL writer, checkpointer, ...), if local."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type <> 'client backend'"
        ).fetchall()
    pids = [row[0] for row in rows]
    try:  # the postmaster is every backend's parent, and not in pg_stat_activity
        with open(f"/proc/{pids[0]}/stat") as fh:
            pids.append(int(fh.read().rsplit(")", 1)[1].split()[1]))
    except (OSError, ValueError, IndexError):
        pass
    return pids


def _busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all cores, everyone's processes)."""
    try:
        with open("/proc/stat") as fh:
            ticks = [int(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def cpu_bound(cpu_ms_per_effect: float, cores: int | None = None) -> float:
    """The most effects/s ``cores`` can run at this CPU cost per effect."""
    return (cores or os.cpu_count() or 1) * 1000.0 / max(cpu_ms_per_effect, 1e-9)


def throughput(
    url: str, workers: int, seconds: float, schedule: Sequence[str] = ("ledger",)
) -> dict[str, list[dict[str, float]]]:
    """Each round of ``schedule``: effects/s of ``workers`` processes and CPU per effect.

    CPU per effect is summed over the worker processes (client), their
    PostgreSQL backends (server) and PostgreSQL's background processes
    (background), all read from /proc over the timed window.
    """
    ctx = mp.get_context("spawn")  # no inherited pools or threads
    start, out = ctx.Barrier(workers + 1), ctx.Queue()
    procs = [
        ctx.Process(
            target=_throughput_worker, args=(i, workers, url, schedule, seconds, start, out)
        )
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    background = _background_pids(url)
    results: dict[str, list[dict[str, float]]] = {shape: [] for shape in schedule}
    for shape in schedule:
        start.wait(timeout=300)  # every worker connected, warmed up, holding its drafts
        began, busy0 = time.perf_counter(), _busy_seconds()
        bg0 = sum(_cpu_seconds(pid) for pid in background)
        answers = [out.get(timeout=300) for _ in procs]
        elapsed = time.perf_counter() - began
        busy = _busy_seconds() - busy0
        bg = sum(_cpu_seconds(pid) for pid in background) - bg0
        start.wait(timeout=300)
        total = sum(a[1] for a in answers)
        per = 1000 / max(total, 1)
        client, server = sum(a[2] for a in answers) * per, sum(a[3] for a in answers) * per
        cores = os.cpu_count() or 1
        results[shape].append(
            {
                "effects_per_s": total / elapsed,
                "effects": total,
                "client_cpu_ms_per_effect": client,
                "server_cpu_ms_per_effect": server,
                "background_cpu_ms_per_effect": bg * per,
                "cpu_ms_per_effect": client + server + bg * per,
                "cpu_bound_effects_per_s": cpu_bound(client + server + bg * per, cores),
                "our_cores": (client + server + bg * per) * total / 1000 / elapsed,
                "machine_busy_cores": busy / elapsed,
                "preemptions_per_effect": sum(a[4] for a in answers) / max(total, 1),
                "ran_out_of_drafts": float(any(a[5] for a in answers)),
            }
        )
    for p in procs:
        p.join(timeout=30)
    return results


def _contention_worker(idx: int, url: str, rounds: int, barrier: Any, out: Any) -> None:
    from langgraph_effects._owners import current_owner
    from langgraph_effects.errors import EffectsError

    pool, ledger = _ledger(url)
    owner = current_owner()
    for mode in ("prepare", "claim"):
        for r in range(rounds):
            d = _effects.draft(f"race-{mode}-{r}")
            barrier.wait()
            began = time.perf_counter()
            if mode == "prepare":
                won = ledger.prepare(d, owner=owner).created
            else:
                try:
                    ledger.claim(d.tenant_id, d.operation_id, owner=owner)
                    won = True
                except EffectsError:  # LeaseHeld: someone else holds it
                    won = False
            out.put((mode, r, won, time.perf_counter() - began))
    pool.close()


def contention(url: str, workers: int, rounds: int) -> dict[str, Any]:
    _pool, ledger = _ledger(url)
    for r in range(rounds):  # the claim race needs a prepared row
        ledger.prepare(_effects.draft(f"race-claim-{r}"))
    _pool.close()
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(workers), ctx.Queue()
    procs = [
        ctx.Process(target=_contention_worker, args=(i, url, rounds, barrier, out))
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    answers = [out.get(timeout=300) for _ in range(2 * rounds * workers)]
    for p in procs:
        p.join(timeout=30)
    result: dict[str, Any] = {}
    for mode in ("prepare", "claim"):
        winners = [0] * rounds
        decide = [0.0] * rounds
        for m, r, won, seconds in answers:
            if m == mode:
                winners[r] += int(won)
                decide[r] = max(decide[r], seconds)
        result[mode] = {
            "rounds": rounds,
            "rounds_with_exactly_one_winner": sum(w == 1 for w in winners),
            "max_winners": max(winners),
            "decide_ms_median": statistics.median(decide) * 1000,
            "decide_ms_max": max(decide) * 1000,
        }
    return result


def _median(samples: Sequence[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(s[key] for s in samples) for key in samples[0]}


def run(
    *,
    workers: Sequence[int] = (4, 8, 16),
    seconds: float = 3.0,
    rounds: int = 30,
    repeat: int = 2,
) -> Report:
    report = Report(
        name="concurrency on PostgreSQL (worker processes)",
        columns=[
            "workers",
            "shape",
            "effects/s",
            "CPU bound /s",
            "our cores",
            "client ms",
            "server ms",
            "bg ms",
            "preempt/effect",
            "race",
            "1 winner",
            "decide ms (median)",
        ],
    )
    if problem := postgres_available():
        report.notes.append(f"skipped: {problem}")
        return report
    from benchmarks._floor import PostgresFloor

    # ledger floor floor ledger ...: a neighbour's burst hits both shapes alike.
    schedule = [s for i in range(repeat) for s in (SHAPES if i % 2 == 0 else SHAPES[::-1])]
    for n in workers:
        with pg_schema() as url:
            pool, ledger = _ledger(url)
            ledger.setup()
            PostgresFloor(pool).setup()
            pool.close()
            flows = {
                shape: _median(s) for shape, s in throughput(url, n, seconds, schedule).items()
            }
            races = contention(url, n, rounds)
        report.data[str(n)] = {**flows, "contention": races}
        for i, shape in enumerate(SHAPES):
            flow = flows[shape]
            race = races[("prepare", "claim")[i]] if i < 2 else None
            report.add(
                n,
                shape,
                flow["effects_per_s"],
                flow["cpu_bound_effects_per_s"],
                flow["our_cores"],
                flow["client_cpu_ms_per_effect"],
                flow["server_cpu_ms_per_effect"],
                flow["background_cpu_ms_per_effect"],
                flow["preemptions_per_effect"],
                *(
                    (
                        ("prepare", "claim")[i],
                        f"{race['rounds_with_exactly_one_winner']}/{race['rounds']}",
                        race["decide_ms_median"],
                    )
                    if race
                    else ("", "", "")
                ),
            )
        ledger_flow, floor_flow = flows["ledger"], flows["floor"]
        report.ratios[f"effects_per_s_{n}"] = ledger_flow["effects_per_s"]
        report.ratios[f"cpu_bound_effects_per_s_{n}"] = ledger_flow["cpu_bound_effects_per_s"]
        report.ratios[f"floor_effects_per_s_{n}"] = floor_flow["effects_per_s"]
        report.ratios[f"floor_cpu_bound_effects_per_s_{n}"] = floor_flow["cpu_bound_effects_per_s"]
        if any(flow["ran_out_of_drafts"] for flow in flows.values()):
            report.notes.append(f"{n} workers ran out of drafts: raise _DRAFTS_PER_SECOND")
    report.notes.append(
        f"medians of {repeat} windows of {seconds:g} s per shape, ledger and floor interleaved; "
        "effects/s: prepare(owner)+confirm per effect (floor: the same two commits as raw SQL); "
        "client/server/bg ms: CPU per effect in the workers, their PostgreSQL backends and "
        "PostgreSQL's background processes (from /proc); CPU bound: "
        f"{os.cpu_count()} cores * 1000 / (client + server + bg) effects/s; our cores: the "
        "cores those processes actually got in the window (the rest went to neighbours)"
    )
    return report


def main(argv: Sequence[str] | None = None) -> Report:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=2, help="windows per shape and count")
    parser.add_argument("--workers", type=int, nargs="+", default=[4, 8, 16])
    args = parser.parse_args(argv)
    report = run(workers=args.workers, seconds=args.seconds, rounds=args.rounds, repeat=args.repeat)
    print(report.table())
    write_json("concurrency.json", report.as_dict())
    return report


if __name__ == "__main__":
    main()
