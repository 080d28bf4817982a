"""Benchmark 6: the peer. Our cost per effect against a DBOS Transact step.

DBOS (an optional benchmark dependency, never a runtime one) runs on the same
PostgreSQL server in a database of its own; our ``PostgresLedger`` runs in a
throwaway schema. In one loop, interleaved: a DBOS workflow with 1 step, one
with 10 steps, one effect through our ledger as the node does it
(``prepare(owner=...)`` + ``confirm``) and a batch of 10 (``prepare_many`` +
10 confirms).

A DBOS step's cost is the marginal one, ``(t(10 steps) - t(1 step)) / 9``: the
price of one more step inside a running workflow, as ours is the price of one
more effect inside a running graph. The ratio is ours ÷ theirs.

Run: ``python -m benchmarks.dbos_peer [--rounds 100]``.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Sequence
from typing import Any

from benchmarks import _effects
from benchmarks._common import (
    Report,
    interleaved,
    median_ms,
    pg_database,
    pg_schema,
    pool_kwargs,
    postgres_available,
    write_json,
)

__all__ = ["main", "run"]


def _dbos_available() -> str | None:
    try:
        import dbos  # noqa: F401
    except ImportError:
        return "dbos is not installed (pip install dbos; an optional benchmark dependency)"
    return None


def run(*, rounds: int = 100) -> Report:
    report = Report(
        name="peer: our ledger per effect vs a DBOS Transact step (same server, interleaved)",
        columns=["what", "median ms", "per effect/step ms"],
    )
    problem = postgres_available() or _dbos_available()
    if problem:
        report.notes.append(f"skipped: {problem}")
        return report

    from dbos import DBOS
    from psycopg_pool import ConnectionPool

    from langgraph_effects import PostgresLedger
    from langgraph_effects._owners import current_owner

    # Registered per run (not at import) so the benchmark can run twice in one
    # process: DBOS.destroy(destroy_registry=True) forgets them.
    @DBOS.step()
    def step(i: int) -> int:
        return i

    @DBOS.workflow()
    def workflow(n: int) -> int:
        return sum(step(i) for i in range(n))

    database = f"lge_bench_dbos_{uuid.uuid4().hex[:8]}"
    with (
        pg_database(database) as dbos_url,
        pg_schema() as url,
        ConnectionPool(url, min_size=2, max_size=4, kwargs=pool_kwargs()) as pool,
    ):
        ledger = PostgresLedger(pool)
        ledger.setup()
        owner = current_owner()
        singles = _effects.drafts("peer1", rounds + 5)
        batches = [_effects.drafts(f"peer10-{i}", 10) for i in range(rounds + 5)]
        confirmed = [_effects.drafts(f"peer10c-{i}", 10) for i in range(rounds + 5)]
        DBOS(
            config={
                "name": "lge-bench",
                "system_database_url": dbos_url,
                "log_level": "WARNING",
                "enable_otlp": False,
            }
        )
        try:
            DBOS.launch()
            variants: dict[str, Any] = {
                "dbos workflow, 1 step": lambda i: workflow(1),
                "dbos workflow, 10 steps": lambda i: workflow(10),
                "ledger effect (prepare+confirm)": lambda i: _effects.fused(
                    ledger, singles[i], owner
                ),
                "ledger 10 effects (prepare_many)": lambda i: _effects.batch(
                    ledger, batches[i], owner
                ),
            }
            if hasattr(ledger, "confirm_many"):
                # What EffectToolNode does for the parallel calls of one AIMessage.
                variants["ledger 10 effects (prepare_many + confirm_many)"] = lambda i: (
                    _effects.batch_confirmed(ledger, confirmed[i], owner)
                )
            for fn in variants.values():  # warm up: prepared statements, pools
                fn(rounds)
                fn(rounds + 1)
            samples = interleaved(variants, rounds)
        finally:
            DBOS.destroy(destroy_registry=True)

    med = {name: median_ms(s) for name, s in samples.items()}
    dbos_step = (med["dbos workflow, 10 steps"] - med["dbos workflow, 1 step"]) / 9
    ours_single = med["ledger effect (prepare+confirm)"]
    ours_batch = med["ledger 10 effects (prepare_many)"] / 10
    report.add("dbos workflow, 1 step", med["dbos workflow, 1 step"], med["dbos workflow, 1 step"])
    report.add("dbos workflow, 10 steps", med["dbos workflow, 10 steps"], dbos_step)
    report.add("ledger effect (prepare+confirm)", ours_single, ours_single)
    report.add(
        "ledger 10 effects (prepare_many)", med["ledger 10 effects (prepare_many)"], ours_batch
    )
    report.ratios["ledger_vs_dbos_step"] = ours_single / dbos_step
    report.ratios["ledger_batch_vs_dbos_step"] = ours_batch / dbos_step
    both = "ledger 10 effects (prepare_many + confirm_many)"
    if both in med:
        report.add(both, med[both], med[both] / 10)
        report.ratios["ledger_batch_confirm_many_vs_dbos_step"] = med[both] / 10 / dbos_step
    report.data = {"medians_ms": med, "dbos_step_ms": dbos_step, "rounds": rounds}
    report.notes.append(
        "dbos step = (t(10 steps) - t(1 step)) / 9, the marginal step; ledger_vs_dbos_step "
        "uses one effect alone (N = 1), the batch ratios the parallel calls of one AIMessage"
    )
    return report


def main(argv: Sequence[str] | None = None) -> Report:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args(argv)
    report = run(rounds=args.rounds)
    print(report.table())
    write_json("dbos_peer.json", report.as_dict())
    return report


if __name__ == "__main__":
    main()
