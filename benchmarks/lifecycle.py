"""Benchmark 2: an effect's ledger lifecycle against the database floor.

For each shape (three steps, fused, a batch of 10 parallel calls, replay of a
confirmed effect) we time our ledger and the same transitions written as raw
statements (``benchmarks._floor``: same rows, indexes and durability),
interleaved in one loop, and report per-effect medians and ledger / floor.

Then, untimed, we count per effect what each side sends to PostgreSQL: round
trips, transactions and write commits (from libpq's protocol trace of the only
connection in the pool), and on SQLite the write transactions (from sqlite3's
statement trace).

Run: ``python -m benchmarks.lifecycle [--rounds 300]``.
"""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

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
from langgraph_effects._owners import current_owner
from langgraph_effects.core.model import LeaseOwner

__all__ = ["main", "run"]

SHAPES: dict[str, int] = {
    "three_step": 1,
    "fused": 1,
    "batch10": 10,
    "batch10_confirm_many": 10,
    "replay": 1,
}
"""Each shape and the number of effects one iteration handles."""


def shapes() -> dict[str, int]:
    """The shapes this ledger version supports (``confirm_many`` may be absent)."""
    from langgraph_effects.ledger.base import Ledger

    if hasattr(Ledger, "confirm_many"):
        return SHAPES
    return {k: v for k, v in SHAPES.items() if k != "batch10_confirm_many"}


@dataclass
class Side:
    """One side of the comparison: a ledger (or the floor) and its shapes."""

    three_step: Callable[[Any, LeaseOwner], None]
    fused: Callable[[Any, LeaseOwner], None]
    batch10: Callable[[Any, LeaseOwner], None]
    batch10_confirm_many: Callable[[Any, LeaseOwner], None]
    replay: Callable[[Any, LeaseOwner], None]


def _ledger_side(ledger: Any) -> Side:
    return Side(
        three_step=lambda d, o: _effects.three_step(ledger, d, o),
        fused=lambda d, o: _effects.fused(ledger, d, o),
        batch10=lambda ds, o: _effects.batch(ledger, ds, o),
        batch10_confirm_many=lambda ds, o: _effects.batch_confirmed(ledger, ds, o),
        replay=lambda d, o: _effects.replay(ledger, d, o),
    )


def _floor_side(floor: Any) -> Side:
    return Side(floor.three_step, floor.fused, floor.batch, floor.batch_confirmed, floor.replay)


@contextmanager
def _postgres(trace: bool) -> Iterator[tuple[Side, Side, Callable[[], Any]]]:
    """Ledger and floor on one pool; with ``trace`` the pool holds exactly one connection."""
    from psycopg_pool import ConnectionPool

    from langgraph_effects import PostgresLedger

    conns: list[Any] = []
    size = {"min_size": 1, "max_size": 1} if trace else {"min_size": 2, "max_size": 4}
    with (
        pg_schema() as url,
        ConnectionPool(url, kwargs=pool_kwargs(), configure=conns.append, **size) as pool,
    ):
        ledger = PostgresLedger(pool)
        ledger.setup()
        floor = PostgresFloor(pool)
        floor.setup()
        pool.wait()
        yield _ledger_side(ledger), _floor_side(floor), lambda: PgTrace.capture(conns[0])


@contextmanager
def _sqlite(trace: bool) -> Iterator[tuple[Side, Side, Callable[[], Any]]]:
    """Ledger and floor in separate WAL files, ``synchronous=FULL`` on both (receipts
    NORMAL on both: the ledger's default under WAL)."""
    from langgraph_effects import SQLiteLedger

    with sqlite_dir() as directory, ExitStack() as stack:
        # The ledger gets a connection we own, so its statements can be traced.
        conn = sqlite3.connect(
            directory / "ledger.db", check_same_thread=False, isolation_level=None
        )
        stack.callback(conn.close)
        ledger = SQLiteLedger(conn, synchronous="FULL")
        ledger.setup()
        floor = SQLiteFloor(str(directory / "floor.db"))
        stack.callback(floor.close)
        floor.setup()
        connections = {"ledger": conn, "floor": floor.conn}
        yield (
            _ledger_side(ledger),
            _floor_side(floor),
            lambda: _sqlite_trace(list(connections.values())),
        )


@contextmanager
def _sqlite_trace(conns: list[sqlite3.Connection]) -> Iterator[list[PgTrace]]:
    """Count write commits via sqlite3's statement trace (only one side runs at a time)."""
    statements: list[str] = []
    for conn in conns:
        conn.set_trace_callback(statements.append)
    holder: list[PgTrace] = []
    try:
        yield holder
    finally:
        for conn in conns:
            conn.set_trace_callback(None)
        holder.append(_sqlite_counts(statements))


def _sqlite_counts(statements: list[str]) -> PgTrace:
    """Write commits: COMMITs after a write, plus writes outside a transaction.

    Durable commits: those not made under ``PRAGMA synchronous=NORMAL`` (a
    receipt, by the ledger's default under WAL); the last such PRAGMA seen counts,
    so the saver's FULL connection is right as long as it does not interleave a
    ledger's receipt transaction (one thread per trace).
    """
    out = PgTrace(statements=statements)
    in_tx = wrote = relaxed = False
    for sql in statements:
        head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        if head == "PRAGMA" and "synchronous" in sql.lower():
            relaxed = sql.replace(" ", "").upper().endswith("=NORMAL")
        elif head == "BEGIN":
            in_tx, wrote = True, False
        elif head in ("COMMIT", "END"):
            out.transactions += 1
            out.write_commits += int(wrote)
            out.durable_commits += int(wrote and not relaxed)
            in_tx = wrote = False
        elif head == "ROLLBACK":
            in_tx = wrote = False
        elif head in ("INSERT", "UPDATE", "DELETE", "REPLACE", "WITH"):
            wrote = True
            if not in_tx:
                out.transactions += 1
                out.write_commits += 1
                out.durable_commits += int(not relaxed)
                wrote = False
    return out


BACKENDS = {"postgres": _postgres, "sqlite": _sqlite}


def _inputs(prefix: str, rounds: int) -> dict[str, list[Any]]:
    return {
        "three_step": _effects.drafts(f"{prefix}-3", rounds),
        "fused": _effects.drafts(f"{prefix}-2", rounds),
        "batch10": [_effects.drafts(f"{prefix}-b{i}", 10) for i in range(rounds)],
        "batch10_confirm_many": [_effects.drafts(f"{prefix}-c{i}", 10) for i in range(rounds)],
        "replay": _effects.drafts(f"{prefix}-r", rounds),
    }


def measure(backend: str, rounds: int) -> dict[str, Any]:
    """Time every shape on both sides (interleaved), then count statements per effect."""
    owner = current_owner()
    with BACKENDS[backend](False) as (ledger, floor, _):
        sides = {"ledger": ledger, "floor": floor}
        inputs = {name: _inputs(name, rounds + 2) for name in sides}
        for name, side in sides.items():
            for d in inputs[name]["replay"]:
                side.fused(d, owner)  # confirmed operations for the replay shape
            for shape in shapes():  # warm up: prepared statements, caches
                getattr(side, shape)(inputs[name][shape][rounds], owner)
        variants = {
            f"{shape}/{name}": (
                lambda i, side=side, shape=shape, name=name: getattr(side, shape)(
                    inputs[name][shape][i], owner
                )
            )
            for shape in shapes()
            for name, side in sides.items()
        }
        samples = interleaved(variants, rounds)
    per_effect = {
        key: median_ms(values) / shapes()[key.split("/")[0]] for key, values in samples.items()
    }
    counts = _count(backend, owner)
    return {"per_effect_ms": per_effect, "counts": counts}


def _count(backend: str, owner: LeaseOwner) -> dict[str, dict[str, float]]:
    """Round trips, transactions and write commits per effect, for every shape and side."""
    out: dict[str, dict[str, float]] = {}
    with BACKENDS[backend](True) as (ledger, floor, capture):
        for name, side in {"ledger": ledger, "floor": floor}.items():
            fresh = _inputs(f"count-{name}", 3)
            for d in fresh["replay"][:2]:
                side.fused(d, owner)
            for shape, per in shapes().items():
                getattr(side, shape)(fresh[shape][0], owner)  # first use prepares statements
                with capture() as holder:
                    getattr(side, shape)(fresh[shape][1], owner)
                trace = holder[0]
                out[f"{shape}/{name}"] = {
                    "round_trips": trace.round_trips / per,
                    "transactions": trace.transactions / per,
                    "write_commits": trace.write_commits / per,
                    "durable_commits": trace.durable_commits / per,
                }
    return out


def run(*, rounds: int = 300, backends: Sequence[str] | None = None) -> Report:
    report = Report(
        name="ledger lifecycle vs the raw-SQL floor (per effect, interleaved)",
        columns=[
            "backend",
            "shape",
            "ledger ms",
            "floor ms",
            "ratio",
            "ledger RT",
            "floor RT",
            "ledger commits",
            "floor commits",
            "ledger durable",
            "floor durable",
        ],
    )
    chosen = list(backends or BACKENDS)
    if "postgres" in chosen and (problem := postgres_available()):
        chosen.remove("postgres")
        report.notes.append(f"postgres skipped: {problem}")
    for backend in chosen:
        result = measure(backend, rounds)
        report.data[backend] = result
        t, c = result["per_effect_ms"], result["counts"]
        for shape in shapes():
            ledger_ms, floor_ms = t[f"{shape}/ledger"], t[f"{shape}/floor"]
            lc, fc = c[f"{shape}/ledger"], c[f"{shape}/floor"]
            rt = (lc["round_trips"], fc["round_trips"]) if backend == "postgres" else ("-", "-")
            report.add(
                backend,
                shape,
                ledger_ms,
                floor_ms,
                ledger_ms / floor_ms,
                *rt,
                lc["write_commits"],
                fc["write_commits"],
                lc["durable_commits"],
                fc["durable_commits"],
            )
            suffix = "" if shape == "fused" else f"_{shape}"
            report.ratios[f"ledger_vs_floor_{backend}{suffix}"] = ledger_ms / floor_ms
    report.notes.append(
        "fused = prepare(owner=...) + confirm, what the node does for a first-time call; "
        "RT = round trips (PostgreSQL), commits = write transactions, durable = the commits "
        "among them that wait for the disk (receipts do not, by default), all per effect"
    )
    return report


def main(argv: Sequence[str] | None = None) -> Report:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args(argv)
    report = run(rounds=args.rounds)
    print(report.table())
    write_json("lifecycle.json", report.as_dict())
    return report


if __name__ == "__main__":
    main()
