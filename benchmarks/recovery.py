"""Benchmark 4: recovery cost beside 10k, 100k and 1M terminal rows (PostgreSQL).

A recovering worker lists the operations that are not finished (``unknown``,
``dispatching``, ``prepared``) and reconciles the unknown ones. That must cost
the same whether the ledger holds ten thousand or a million confirmed rows.

The terminal rows are bulk-loaded straight into the ledger's operation table
(one ``INSERT ... SELECT FROM generate_series``, then ``ANALYZE`` as autovacuum
would) in a throwaway schema; the open rows are made through the ledger API.
At each size: median time of ``list(status=...)`` for each open status, the
time to reconcile 40 unknown operations (``resolve`` with conclusive
evidence), and, for operators, ``stats()``.

Run: ``python -m benchmarks.recovery [--sizes 10000 100000 1000000]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

from benchmarks import _effects
from benchmarks._common import Report, pg_schema, pool_kwargs, postgres_available, write_json

__all__ = ["main", "run"]

UNKNOWN, DISPATCHING, PREPARED = 40, 30, 30

# Column -> SQL expression over the series value g, for the bulk-loaded terminal rows.
_BULK: dict[str, str] = {
    "tenant_id": "'bench'",
    "operation_id": "'bulk-' || g",
    "workflow_id": "'thread-bulk-' || (g / 4)",
    "action": "'crm.create_ticket'",
    "action_version": "1",
    "target": "'crm'",
    "payload_digest": "md5(g::text) || md5((g + 1)::text)",
    "payload": """'{"title": "bulk", "priority": "high"}'""",
    "payload_stored": "true",
    "provider": "'crm'",
    "tool_call_id": "'call-bulk-' || g",
    "status": "CASE WHEN g %% 50 = 0 THEN 'rejected' ELSE 'confirmed' END",
    "idempotency_key": "'lge-bulk-' || g",
    "provider_result_id": "'T-' || g",
    "result": """'{"ticket_id": "T", "status": "open"}'""",
    "attempts": "1",
    "fencing_token": "1",
    "record_version": "3",
    "created_at": "now() - make_interval(secs => g)",
    "updated_at": "now() - make_interval(secs => g)",
    "first_dispatched_at": "now() - make_interval(secs => g)",
    "last_dispatched_at": "now() - make_interval(secs => g)",
    "resolved_at": "now() - make_interval(secs => g)",
    "status_changed_at": "now() - make_interval(secs => g)",
}


def _operations_table(conn: Any) -> str:
    rows = conn.execute(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = current_schema() AND table_name LIKE 'lge%%operation%%' "
        "AND table_name NOT LIKE '%%event%%' ORDER BY length(table_name)"
    ).fetchall()
    if not rows:
        raise RuntimeError("no lge_*operation* table after setup(): has the schema changed?")
    return str(rows[0]["table_name"])


def bulk_load(pool: Any, start: int, stop: int) -> float:
    """Insert terminal rows ``start <= g < stop``; return seconds (load + ANALYZE)."""
    began = time.perf_counter()
    with pool.connection() as conn:
        table = _operations_table(conn)
        columns = conn.execute(
            "SELECT column_name, format_type(a.atttypid, a.atttypmod) AS type, "
            "is_nullable, column_default "
            "FROM information_schema.columns c "
            "JOIN pg_attribute a ON a.attrelid = (quote_ident(c.table_schema) || '.' || "
            "quote_ident(c.table_name))::regclass AND a.attname = c.column_name "
            "WHERE c.table_schema = current_schema() AND c.table_name = %s "
            "ORDER BY ordinal_position",
            (table,),
        ).fetchall()
        names, exprs = [], []
        for col in columns:
            name = col["column_name"]
            if name in _BULK:
                names.append(name)
                exprs.append(f"CAST({_BULK[name]} AS {col['type']})")
            elif col["is_nullable"] == "NO" and col["column_default"] is None:
                raise RuntimeError(f"bulk load does not know how to fill {table}.{name}")
        conn.execute(
            f"INSERT INTO {table} ({', '.join(names)}) "
            f"SELECT {', '.join(exprs)} FROM generate_series(%s::bigint, %s::bigint) AS g",
            (start, stop - 1),
        )
        conn.execute(f"ANALYZE {table}")
    return time.perf_counter() - began


def _open_operations(ledger: Any, tag: str) -> list[Any]:
    """Make UNKNOWN + DISPATCHING + PREPARED open operations through the ledger."""
    from langgraph_effects._owners import current_owner

    owner = current_owner()
    unknown = []
    for i in range(UNKNOWN):
        d = _effects.draft(f"{tag}-u{i}")
        op = ledger.prepare(d, owner=owner).operation
        ledger.mark_unknown(d.tenant_id, d.operation_id, token=op.fencing_token, reason="timeout")
        unknown.append(d)
    for i in range(DISPATCHING):
        ledger.prepare(_effects.draft(f"{tag}-d{i}"), owner=owner)
    for i in range(PREPARED):
        ledger.prepare(_effects.draft(f"{tag}-p{i}"))
    return unknown


def _median_ms(fn: Any, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - began)
    return statistics.median(samples) * 1000


def measure_size(pool: Any, ledger: Any, size: int, repeat: int) -> dict[str, Any]:
    from langgraph_effects.core.model import Decision, Evidence, OperationStatus, Resolution

    unknown = _open_operations(ledger, f"s{size}")
    out: dict[str, Any] = {"terminal_rows": size}
    for status in ("unknown", "dispatching", "prepared"):
        ops = ledger.list(status=status, limit=1000)
        out[f"{status}_listed"] = len(ops)
        out[f"list_{status}_ms"] = _median_ms(
            lambda status=status: ledger.list(status=status, limit=1000), repeat
        )
    if out["unknown_listed"] != UNKNOWN:
        raise AssertionError(f"listed {out['unknown_listed']} unknown, expected {UNKNOWN}")
    began = time.perf_counter()
    for op in ledger.list(status=OperationStatus.UNKNOWN, limit=1000):
        ledger.resolve(
            op.tenant_id,
            op.operation_id,
            Resolution(
                decision=Decision.CONFIRM,
                by="bench-reconciler",
                evidence=Evidence.confirmed("found at the provider", provider_result_id="T-1"),
            ),
        )
    out["reconcile_ms_per_op"] = (time.perf_counter() - began) * 1000 / len(unknown)
    out["stats_ms"] = _median_ms(ledger.stats, 3)
    return out


def run(*, sizes: Sequence[int] = (10_000, 100_000, 1_000_000), repeat: int = 30) -> Report:
    report = Report(
        name="recovery on PostgreSQL beside terminal rows",
        columns=[
            "terminal rows",
            "load s",
            "list unknown ms",
            "list dispatching ms",
            "list prepared ms",
            "reconcile ms/op",
            "stats ms",
        ],
    )
    if problem := postgres_available():
        report.notes.append(f"skipped: {problem}")
        return report
    from psycopg_pool import ConnectionPool

    from langgraph_effects import PostgresLedger

    with (
        pg_schema() as url,
        ConnectionPool(url, min_size=1, max_size=2, kwargs=pool_kwargs()) as pool,
    ):
        ledger = PostgresLedger(pool)
        ledger.setup()
        loaded = 0
        for size in sorted(sizes):
            load_s = bulk_load(pool, loaded, size)
            loaded = size
            row = measure_size(pool, ledger, size, repeat)
            row["load_s"] = load_s
            report.data[str(size)] = row
            report.add(
                size,
                load_s,
                row["list_unknown_ms"],
                row["list_dispatching_ms"],
                row["list_prepared_ms"],
                row["reconcile_ms_per_op"],
                row["stats_ms"],
            )
            report.ratios[f"list_unknown_ms_{size}"] = row["list_unknown_ms"]
    smallest, largest = min(sizes), max(sizes)
    report.ratios["list_unknown_growth"] = (
        report.data[str(largest)]["list_unknown_ms"] / report.data[str(smallest)]["list_unknown_ms"]
    )
    report.notes.append(
        f"open rows at each size: {UNKNOWN} unknown, {DISPATCHING} dispatching, {PREPARED} "
        "prepared; terminal rows: 98% confirmed, 2% rejected; no events bulk-loaded"
    )
    return report


def main(argv: Sequence[str] | None = None) -> Report:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    args = parser.parse_args(argv)
    report = run(sizes=args.sizes)
    print(report.table())
    write_json("recovery.json", report.as_dict())
    return report


if __name__ == "__main__":
    main()
