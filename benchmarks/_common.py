"""Shared plumbing for the benchmarks: throwaway databases, timing, counting, output.

Every benchmark runs against a throwaway PostgreSQL schema (or database, for
DBOS) and temporary SQLite files, all removed afterwards. The machine is shared,
so figures are noisy: what we report are medians, and ratios measured in the
same run with the two variants interleaved (A B, B A, A B, ...) so that a burst
of load from a neighbour hits both sides alike.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

__all__ = [
    "COMMITTED_RESULTS",
    "POSTGRES_URL",
    "PgTrace",
    "Report",
    "interleaved",
    "machine",
    "median_ms",
    "pg_database",
    "pg_schema",
    "pool_kwargs",
    "postgres_available",
    "results_dir",
    "sqlite_dir",
    "timed",
    "use_results_dir",
    "write_json",
]

POSTGRES_URL = os.environ.get(
    "LGE_BENCH_POSTGRES_URL",
    os.environ.get("LGE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
)


COMMITTED_RESULTS = Path(__file__).resolve().parent / "results"
"""The results kept in the repository (``latest.json``, the docs' pictures): replaced only
when a run asks (``python -m benchmarks --save``)."""

_chosen: list[Path] = []


def results_dir() -> Path:
    """Where JSON results go: the directory a run chose (``use_results_dir``), else
    ``$LGE_BENCH_RESULTS_DIR``, else a temporary directory of this process: never the
    committed ``benchmarks/results`` unless asked."""
    if _chosen:
        return _chosen[-1]
    if os.environ.get("LGE_BENCH_RESULTS_DIR"):
        return Path(os.environ["LGE_BENCH_RESULTS_DIR"])
    _chosen.append(Path(tempfile.mkdtemp(prefix="lge-bench-results-")))
    return _chosen[-1]


@contextmanager
def use_results_dir(path: Path) -> Iterator[Path]:
    """Write the results of the benchmarks run inside the block into ``path``."""
    _chosen.append(path)
    try:
        yield path
    finally:
        _chosen.remove(path)


def pool_kwargs() -> dict[str, Any]:
    """Connection settings LangGraph's PostgresSaver needs; the ledger shares them."""
    from psycopg.rows import dict_row

    return {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}


# -- throwaway databases ------------------------------------------------------


def postgres_available() -> str | None:
    """Return why PostgreSQL cannot be used, or None when it can."""
    try:
        import psycopg

        with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # any failure means: not usable here
        return f"PostgreSQL at {POSTGRES_URL} is unreachable: {exc}"
    return None


@contextmanager
def pg_schema(prefix: str = "lge_bench") -> Iterator[str]:
    """Yield a URL whose search_path is a fresh schema; drop the schema afterwards."""
    import psycopg

    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in POSTGRES_URL else "?"
    try:
        yield f"{POSTGRES_URL}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def pg_database(name: str) -> Iterator[str]:
    """Yield the URL of a fresh database ``name`` on the same server; drop it afterwards."""
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(POSTGRES_URL)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def sqlite_dir() -> Iterator[Path]:
    """A temporary directory for SQLite files, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="lge_bench_"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- timing -------------------------------------------------------------------


def timed(fn: Callable[[], object]) -> float:
    """Run ``fn`` once; return the wall time in seconds."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(
    variants: dict[str, Callable[[int], object]], rounds: int
) -> dict[str, list[float]]:
    """Time each variant ``rounds`` times, alternating their order every round.

    ``variants[name](i)`` runs iteration ``i`` once. Round ``i`` runs the
    variants in order on even rounds and reversed on odd ones, so neither side
    systematically runs first (cache warmth, a neighbour's burst).
    """
    names = list(variants)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        order = names if i % 2 == 0 else names[::-1]
        for name in order:
            fn = variants[name]
            samples[name].append(timed(lambda fn=fn, i=i: fn(i)))  # type: ignore[misc]
    return samples


def median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1000.0


# -- counting round trips and commits on PostgreSQL ---------------------------

_WRITE_SQL = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE)\b", re.IGNORECASE)
_FIELD = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ASYNC_COMMIT = re.compile(r"set_config\('synchronous_commit', 'off'", re.IGNORECASE)


@dataclass
class PgTrace:
    """Round trips and transactions seen on the wire (libpq protocol trace).

    A round trip is one block of frontend messages followed by the backend's
    answer. A transaction ends at each ``ReadyForQuery I``; it is a *write*
    transaction (a commit that must reach the WAL) when a statement in it
    inserts, updates or deletes (judged from the statement text, so
    ``WITH ... INSERT`` counts too). A *durable* commit is a write commit that
    waits for the disk: none of its statements turned ``synchronous_commit``
    off (a receipt, by the ledgers' default ``receipt_synchronous``).
    """

    round_trips: int = 0
    transactions: int = 0
    write_commits: int = 0
    durable_commits: int = 0
    statements: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str, prepared: dict[str, str] | None = None) -> PgTrace:
        out = cls()
        names: dict[str, str] = dict(prepared or {})
        last_dir = ""
        wrote = active = relaxed = False
        for line in text.splitlines():
            parts = line.split("\t")
            if len(parts) < 3:
                continue
            direction, kind = parts[0], parts[2]
            rest = parts[3] if len(parts) > 3 else ""
            if direction == "F" and last_dir != "F":
                out.round_trips += 1
            last_dir = direction
            if direction == "F" and kind == "Parse":
                fields = _FIELD.findall(rest)
                if len(fields) >= 2:
                    names[fields[0]] = fields[1]
            elif direction == "F" and kind in ("Bind", "Query"):
                fields = _FIELD.findall(rest)
                sql = names.get(fields[1], "") if kind == "Bind" and len(fields) > 1 else ""
                if kind == "Query" and fields:
                    sql = fields[0]
                active = True
                if sql:
                    out.statements.append(sql)
                    wrote = wrote or bool(_WRITE_SQL.search(sql))
                    relaxed = relaxed or bool(_ASYNC_COMMIT.search(sql))
            elif direction == "B" and kind == "ReadyForQuery" and rest.strip() == "I":
                # A Parse-only exchange (statement preparation) is no transaction.
                out.transactions += int(active)
                out.write_commits += int(wrote)
                out.durable_commits += int(wrote and not relaxed)
                wrote = active = relaxed = False
        return out

    @staticmethod
    @contextmanager
    def capture(conn: Any) -> Iterator[list[PgTrace]]:
        """Trace ``conn`` (psycopg) inside the block; yields a list holding the result at exit."""
        from psycopg import pq

        holder: list[PgTrace] = []
        fd, path = tempfile.mkstemp(prefix="lge_pgtrace_")
        conn.pgconn.trace(fd)
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield holder
        finally:
            conn.pgconn.untrace()
            os.close(fd)
            text = Path(path).read_text(errors="replace")
            os.unlink(path)
            # Statements prepared before the trace began are known only by name.
            cur = conn.pgconn.exec_(b"SELECT name, statement FROM pg_prepared_statements")
            prepared = {
                cur.get_value(i, 0).decode(): cur.get_value(i, 1).decode()
                for i in range(cur.ntuples)
            }
            holder.append(PgTrace.parse(text, prepared))


# -- output -------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_avg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    try:
        import psycopg

        with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            info["postgres"] = row[0] if row else None
    except Exception:  # the report still says what it could
        info["postgres"] = None
    import sqlite3

    info["sqlite"] = sqlite3.sqlite_version
    return info


@dataclass
class Report:
    """One benchmark's result: a table for people, a dict for machines."""

    name: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, *row: Any) -> None:
        self.rows.append(list(row))

    def table(self) -> str:
        def cell(value: Any) -> str:
            if isinstance(value, float):
                return f"{value:.3f}" if abs(value) < 100 else f"{value:.0f}"
            return str(value)

        cells = [self.columns, *[[cell(v) for v in row] for row in self.rows]]
        widths = [max(len(r[i]) for r in cells) for i in range(len(self.columns))]
        lines = [f"== {self.name} =="]
        for n, row in enumerate(cells):
            lines.append(
                "  ".join(v.rjust(w) if n else v.ljust(w) for v, w in zip(row, widths, strict=True))
            )
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        if self.ratios:
            lines.append("ratios: " + ", ".join(f"{k}={v:.3f}" for k, v in self.ratios.items()))
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "columns": self.columns,
            "rows": self.rows,
            "ratios": self.ratios,
            "data": self.data,
            "notes": self.notes,
        }


def write_json(filename: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``results_dir()/filename`` (created if needed)."""
    directory = results_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path
