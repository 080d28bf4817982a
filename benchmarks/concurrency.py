"""Benchmark 3: concurrency on PostgreSQL, with worker processes.

- Throughput: 4, 8 and 16 worker processes (each with its own pool and
  ``PostgresLedger``, as separate machines would have) confirm distinct
  operations for a fixed time, each effect as the node does it
  (``prepare(owner=...)`` + ``confirm``). Reported: confirmed effects/s.
- Contention: the same workers all race for ONE operation per round, through
  ``prepare(owner=...)`` (two resumes of one thread: the row may not exist
  yet) and through ``claim`` (the row is ``prepared``). Exactly one may win;
  reported: winners per round (must be 1) and the time to decide (start
  signal -> last worker's answer), median over rounds.

Workers are processes, not threads: the GIL would otherwise measure Python,
not the database. The machine has 2 cores, so 16 workers mostly measure
queueing; what matters is that throughput holds and the winner stays unique.

Run: ``python -m benchmarks.concurrency [--seconds 3] [--rounds 30]``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

from benchmarks import _effects
from benchmarks._common import Report, pg_schema, pool_kwargs, postgres_available, write_json

__all__ = ["main", "run"]


def _ledger(url: str) -> tuple[Any, Any]:
    from psycopg_pool import ConnectionPool

    from langgraph_effects import PostgresLedger

    pool = ConnectionPool(url, min_size=1, max_size=1, kwargs=pool_kwargs(), open=True)
    pool.wait()
    return pool, PostgresLedger(pool)


def _throughput_worker(
    idx: int, url: str, seconds: float, ready: Any, start: Any, out: Any
) -> None:
    from langgraph_effects._owners import current_owner

    pool, ledger = _ledger(url)
    owner = current_owner()
    _effects.fused(ledger, _effects.draft(f"warm-{idx}"), owner)
    with pool.connection() as conn:
        backend_pid = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
    batch = [_effects.draft(f"w{idx}-{i}") for i in range(20000)]  # built before the clock
    ready.put(idx)
    start.wait()
    done = 0
    client0, server0 = time.process_time(), _cpu_seconds(backend_pid)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline and done < len(batch):
        _effects.fused(ledger, batch[done], owner)
        done += 1
    out.put((done, time.process_time() - client0, _cpu_seconds(backend_pid) - server0))
    pool.close()


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of a local process, e.g. our PostgreSQL backend; 0 if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0  # PostgreSQL on another host: server CPU is not visible


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


def throughput(url: str, workers: int, seconds: float) -> dict[str, float]:
    """Effects/s of ``workers`` processes, and CPU per effect on each side of the socket."""
    ctx = mp.get_context("spawn")  # no inherited pools or threads
    ready, start, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_throughput_worker, args=(i, url, seconds, ready, start, out))
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    for _ in procs:  # every worker connected, warmed up and holding its drafts
        ready.get(timeout=120)
    began = time.perf_counter()
    start.set()
    answers = [out.get(timeout=120) for _ in procs]
    elapsed = time.perf_counter() - began
    for p in procs:
        p.join(timeout=30)
    total = sum(a[0] for a in answers)
    client = sum(a[1] for a in answers)
    server = sum(a[2] for a in answers)
    return {
        "effects_per_s": total / elapsed,
        "effects": total,
        "client_cpu_ms_per_effect": client * 1000 / max(total, 1),
        "server_cpu_ms_per_effect": server * 1000 / max(total, 1),
    }


def contention(url: str, workers: int, rounds: int) -> dict[str, Any]:
    from langgraph_effects.core.model import LeaseOwner

    _pool, ledger = _ledger(url)
    for r in range(rounds):  # the claim race needs a prepared row
        ledger.prepare(_effects.draft(f"race-claim-{r}"))
    _pool.close()
    _ = LeaseOwner  # imported for the child's benefit under spawn
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


def run(*, workers: Sequence[int] = (4, 8, 16), seconds: float = 3.0, rounds: int = 30) -> Report:
    report = Report(
        name="concurrency on PostgreSQL (worker processes)",
        columns=[
            "workers",
            "effects/s",
            "client CPU ms/effect",
            "server CPU ms/effect",
            "race",
            "1 winner",
            "decide ms (median)",
            "decide ms (max)",
        ],
    )
    if problem := postgres_available():
        report.notes.append(f"skipped: {problem}")
        return report
    for n in workers:
        with pg_schema() as url:
            _pool, ledger = _ledger(url)
            ledger.setup()
            _pool.close()
            flow = throughput(url, n, seconds)
            races = contention(url, n, rounds)
        report.data[str(n)] = {**flow, "contention": races}
        for mode, race in races.items():
            first = mode == "prepare"
            report.add(
                n,
                flow["effects_per_s"] if first else "",
                flow["client_cpu_ms_per_effect"] if first else "",
                flow["server_cpu_ms_per_effect"] if first else "",
                mode,
                f"{race['rounds_with_exactly_one_winner']}/{race['rounds']}",
                race["decide_ms_median"],
                race["decide_ms_max"],
            )
        report.ratios[f"effects_per_s_{n}"] = flow["effects_per_s"]
    report.notes.append(
        "effects/s: fused prepare(owner)+confirm per effect; CPU per effect summed over the "
        "worker processes (client) and their PostgreSQL backends (server, from /proc): "
        "2 cores bound throughput to 2000 / (client + server) effects/s"
    )
    return report


def main(argv: Sequence[str] | None = None) -> Report:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    report = run(seconds=args.seconds, rounds=args.rounds)
    print(report.table())
    write_json("concurrency.json", report.as_dict())
    return report


if __name__ == "__main__":
    main()
