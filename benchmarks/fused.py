"""Lever 4: the ledger's receipt in the saver's own transaction (an effect-aware saver)?

A superstep of ``n`` tool calls, each its own task (``route_tool_calls``), as
the statements reach the database, with LangGraph's real savers
(``PostgresSaver`` / ``SqliteSaver``, WAL and ``synchronous=FULL``) and the
floor's raw ledger statements (``benchmarks._floor``), in one database:

- ``separate`` (today): per call, the write-ahead (prepare + claim, one durable
  commit) before the provider, the receipt (confirm, its own commit, which
  does not wait for the disk: the ledgers' ``receipt_synchronous="NORMAL"``)
  after it, then the task's writes (``put_writes``, a durable commit); then
  the superstep's checkpoint (``put``);
- ``fused``: the same, except the receipt runs inside the ``put_writes``
  transaction (one commit fewer per call; the receipt becomes as durable as
  the task's writes).

The write-ahead cannot move: it must be durable before the provider is called,
and the saver writes only after the task returned. Reported per effect: the
time of each (median over interleaved supersteps), the difference, and the
commits and round trips each sends (traced, untimed). See FUSED_SAVER.md for
what it would take to build and what it would cost in guarantees.

Run: ``python -m benchmarks.fused [--rounds 200]``.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
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
from benchmarks._floor import (
    _PG_CONFIRM,
    _PG_PREPARE_CLAIMED,
    _SQ_CONFIRM,
    _SQ_EVENT,
    PostgresFloor,
    SQLiteFloor,
)
from benchmarks.concurrency import _cpu_seconds
from benchmarks.lifecycle import _sqlite_counts
from langgraph_effects._owners import current_owner
from langgraph_effects.core.model import LeaseOwner, OperationDraft

__all__ = ["VARIANTS", "main", "run"]

VARIANTS = ("separate", "fused")

# The receipt inside the saver's transaction: no set_config('synchronous_commit',
# 'off'), which would relax the saver's own writes in the same commit.
_PG_CONFIRM_IN_SAVER = _PG_CONFIRM.replace(
    "SELECT *, set_config('synchronous_commit', 'off', true) FROM op", "SELECT * FROM op"
)


def _checkpoint(step: int, n: int) -> tuple[dict[str, Any], list[Any]]:
    """A checkpoint holding an AIMessage with ``n`` tool calls, and each call's ToolMessage."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.checkpoint.base import empty_checkpoint

    calls = [
        {"name": "create_ticket", "args": {"title": f"t{i}"}, "id": f"call-{step}-{i}"}
        for i in range(n)
    ]
    ai = AIMessage(content="", tool_calls=calls, id=f"ai-{step}")
    answers = [
        ToolMessage(content='{"ticket_id": "T-1", "status": "open"}', tool_call_id=c["id"])
        for c in calls
    ]
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": [HumanMessage("open tickets", id="h"), ai]}
    checkpoint["channel_versions"] = {"messages": step + 1}
    return dict(checkpoint), answers


class Superstep:
    """One backend: the saver, the floor's ledger statements, both variants."""

    def __init__(self, saver: Any, write_ahead: Callable[[OperationDraft, LeaseOwner], int]):
        self.saver = saver
        self.write_ahead = write_ahead
        self.owner = current_owner()
        self.server_pid = 0  # the PostgreSQL backend whose CPU we count; 0: in-process
        self.thread = f"thread-{uuid.uuid4().hex[:8]}"
        self.parent: dict[str, Any] = {
            "configurable": {"thread_id": self.thread, "checkpoint_ns": ""}
        }
        self.parent = saver.put(self.parent, _checkpoint(0, 1)[0], {"step": 0}, {})

    def run(self, variant: str, ds: Sequence[OperationDraft], step: int) -> None:
        checkpoint, answers = _checkpoint(step, len(ds))
        for d, answer in zip(ds, answers, strict=True):  # one task per call
            token = self.write_ahead(d, self.owner)  # durable before the provider
            writes = [("messages", answer)]
            task_id = f"task-{d.operation_id[-12:]}"
            if variant == "separate":
                self.receipt(d, token)
                self.saver.put_writes(self.parent, writes, task_id)
            else:
                self.fused_writes(d, token, writes, task_id)
        self.parent = self.saver.put(
            self.parent, checkpoint, {"step": step}, {"messages": step + 1}
        )

    def receipt(self, d: OperationDraft, token: int) -> None:
        raise NotImplementedError

    def fused_writes(
        self, d: OperationDraft, token: int, writes: list[tuple[str, Any]], task_id: str
    ) -> None:
        raise NotImplementedError


class PostgresSuperstep(Superstep):
    def __init__(self, pool: Any) -> None:
        from langgraph.checkpoint.postgres import PostgresSaver

        saver = PostgresSaver(pool)
        saver.setup()
        self.pool = pool
        floor = PostgresFloor(pool)
        floor.setup()
        super().__init__(saver, self._write_ahead)
        with pool.connection() as conn:
            self.server_pid = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]

    def _write_ahead(self, d: OperationDraft, owner: LeaseOwner) -> int:
        from benchmarks._floor import _LEASE, _row_values

        actor = owner.encode()
        columns = [[v] for v in _row_values(d)]
        with self.pool.connection() as conn:
            row = conn.execute(_PG_PREPARE_CLAIMED, (*columns, actor, _LEASE, actor)).fetchone()
        return int(row["fencing_token"])

    def receipt(self, d: OperationDraft, token: int) -> None:
        with self.pool.connection() as conn:
            conn.execute(_PG_CONFIRM, ('{"ok": 1}', d.tenant_id, d.operation_id, token))

    def fused_writes(
        self, d: OperationDraft, token: int, writes: list[tuple[str, Any]], task_id: str
    ) -> None:
        """``PostgresSaver.put_writes``'s own statements, the receipt first, in one transaction."""
        saver = self.saver
        configurable = self.parent["configurable"]
        with saver._cursor(pipeline=True) as cur:
            # BEGIN / COMMIT as statements: transaction() would sync the pipeline at
            # each end (three more round trips); these ride in its one round trip.
            cur.execute("BEGIN")
            cur.execute(_PG_CONFIRM_IN_SAVER, ('{"ok": 1}', d.tenant_id, d.operation_id, token))
            cur.executemany(
                saver.UPSERT_CHECKPOINT_WRITES_SQL,
                saver._dump_writes(
                    configurable["thread_id"],
                    configurable["checkpoint_ns"],
                    configurable["checkpoint_id"],
                    task_id,
                    "",
                    writes,
                ),
            )
            cur.execute("COMMIT")


class SQLiteSuperstep(Superstep):
    """Saver and ledger in one WAL file, ``synchronous=FULL``; the floor on its own connection."""

    def __init__(self, path: str) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(path, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        saver = SqliteSaver(conn)
        saver.setup()
        self.floor = SQLiteFloor(path)
        self.floor.setup()
        self.conns = [conn, self.floor.conn]
        super().__init__(saver, self._write_ahead)

    def close(self) -> None:
        for conn in self.conns:
            conn.close()

    def _write_ahead(self, d: OperationDraft, owner: LeaseOwner) -> int:
        c = self.floor.conn
        c.execute("BEGIN IMMEDIATE")
        token = self.floor._insert(d, owner)
        c.execute("COMMIT")
        return token

    def receipt(self, d: OperationDraft, token: int) -> None:
        self.floor._receipts([(d, token)])

    def fused_writes(
        self, d: OperationDraft, token: int, writes: list[tuple[str, Any]], task_id: str
    ) -> None:
        """``SqliteSaver.put_writes``'s statement, the receipt first, in one transaction."""
        from langgraph.checkpoint.base import WRITES_IDX_MAP

        from benchmarks._floor import _now, _result

        saver = self.saver
        configurable = self.parent["configurable"]
        with saver.cursor() as cur:
            now = _now()
            (version,) = cur.execute(
                _SQ_CONFIRM, (_result(d), now, now, d.tenant_id, d.operation_id, token)
            ).fetchone()
            cur.execute(
                _SQ_EVENT,
                (
                    *(d.tenant_id, d.operation_id, version, "confirm", "dispatching"),
                    *("confirmed", "l", token, now),
                ),
            )
            cur.executemany(
                "INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, "
                "task_id, task_path, idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        configurable["thread_id"],
                        configurable["checkpoint_ns"],
                        configurable["checkpoint_id"],
                        task_id,
                        "",
                        WRITES_IDX_MAP.get(channel, idx),
                        channel,
                        *saver.serde.dumps_typed(value),
                    )
                    for idx, (channel, value) in enumerate(writes)
                ],
            )


@contextmanager
def _backend(name: str) -> Iterator[tuple[Superstep, Callable[[], Any]]]:
    """The superstep of one backend, and how to trace what it sends."""
    if name == "postgres":
        from psycopg_pool import ConnectionPool

        conns: list[Any] = []
        with (
            pg_schema() as url,
            ConnectionPool(
                url, min_size=1, max_size=1, kwargs=pool_kwargs(), configure=conns.append
            ) as pool,
        ):
            pool.wait()
            yield PostgresSuperstep(pool), lambda: PgTrace.capture(conns[0])
        return
    with sqlite_dir() as directory, ExitStack() as stack:
        step = SQLiteSuperstep(str(directory / "graph.db"))
        stack.callback(step.close)
        yield step, lambda: _trace_sqlite(step.conns)


@contextmanager
def _trace_sqlite(conns: list[sqlite3.Connection]) -> Iterator[list[PgTrace]]:
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


def measure(backend: str, n: int, rounds: int) -> dict[str, Any]:
    """Per effect: median ms of each variant (interleaved), and what each sends (traced)."""
    with _backend(backend) as (step, trace):
        drafts = {
            v: [_effects.drafts(f"{v}-{n}-{i}", n) for i in range(rounds + 3)] for v in VARIANTS
        }
        counter = {"step": 1}
        cpu = dict.fromkeys(VARIANTS, 0.0)

        def one(variant: str) -> Callable[[int], None]:
            def go(i: int) -> None:
                counter["step"] += 1
                began = time.process_time() + _cpu_seconds(step.server_pid)
                step.run(variant, drafts[variant][i], counter["step"])
                cpu[variant] += time.process_time() + _cpu_seconds(step.server_pid) - began

            return go

        for variant in VARIANTS:  # warm up: statements prepared, caches filled
            one(variant)(rounds)
        cpu.update(dict.fromkeys(VARIANTS, 0.0))
        samples = interleaved({v: one(v) for v in VARIANTS}, rounds)
        paired = [a - b for a, b in zip(samples["separate"], samples["fused"], strict=True)]
        out: dict[str, Any] = {"saved_ms_per_effect_paired": statistics.median(paired) * 1000 / n}
        for k, variant in enumerate(VARIANTS):
            with trace() as holder:
                one(variant)(rounds + 1 + k)
            counts = holder[0]
            out[variant] = {
                "ms_per_effect": median_ms(samples[variant]) / n,
                "cpu_ms_per_effect": cpu[variant] * 1000 / (rounds * n),
                "round_trips_per_effect": counts.round_trips / n,
                "commits_per_effect": counts.write_commits / n,
                "durable_commits_per_effect": counts.durable_commits / n,
            }
    return out


def run(*, rounds: int = 200, calls: Sequence[int] = (1, 10)) -> Report:
    report = Report(
        name="lever 4: receipt fused into the saver's transaction (per effect)",
        columns=[
            "backend",
            "N",
            "separate ms",
            "fused ms",
            "saved ms",
            "saved ms (paired)",
            "fused/separate",
            "CPU ms sep/fused",
            "RT sep/fused",
            "commits sep/fused",
            "durable sep/fused",
        ],
    )
    backends = ["sqlite"]
    if problem := postgres_available():
        report.notes.append(f"postgres skipped: {problem}")
    else:
        backends.insert(0, "postgres")
    for backend in backends:
        for n in calls:
            m = measure(backend, n, rounds)
            sep, fus = m["separate"], m["fused"]
            report.data[f"{backend}_n{n}"] = m
            report.ratios[f"{backend}_n{n}_fused_vs_separate"] = (
                fus["ms_per_effect"] / sep["ms_per_effect"]
            )
            report.ratios[f"{backend}_n{n}_saved_ms_per_effect"] = m["saved_ms_per_effect_paired"]
            report.add(
                backend,
                n,
                sep["ms_per_effect"],
                fus["ms_per_effect"],
                sep["ms_per_effect"] - fus["ms_per_effect"],
                m["saved_ms_per_effect_paired"],
                fus["ms_per_effect"] / sep["ms_per_effect"],
                f"{sep['cpu_ms_per_effect']:.3f}/{fus['cpu_ms_per_effect']:.3f}",
                "-"
                if backend == "sqlite"
                else f"{sep['round_trips_per_effect']:g}/{fus['round_trips_per_effect']:g}",
                f"{sep['commits_per_effect']:g}/{fus['commits_per_effect']:g}",
                f"{sep['durable_commits_per_effect']:g}/{fus['durable_commits_per_effect']:g}",
            )
    report.notes.append(
        "one task per call (route_tool_calls), then the superstep's checkpoint; per effect = "
        "superstep / N; medians of interleaved supersteps; saved (paired): median over "
        "rounds of separate - fused; CPU: client + PostgreSQL backend, mean per effect; "
        "counts traced (libpq protocol trace, sqlite3 statement trace) over one superstep each"
    )
    return report


def main(argv: Sequence[str] | None = None) -> Report:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args(argv)
    report = run(rounds=args.rounds)
    print(report.table())
    write_json("fused.json", report.as_dict())
    return report


if __name__ == "__main__":
    main()
