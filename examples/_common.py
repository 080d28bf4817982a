"""Shared pieces of the examples: the scripted chat model, file paths, a tiny table printer.

Nothing here is part of the library. The package's test harness
``ScriptedChatModel`` (``langgraph_effects.testing``) stands in for a real LLM so
every example runs with no API key: it reads the conversation and proposes the
next step of a fixed plan, so a fresh process that rebuilds the graph proposes
exactly what the crashed one did. ``chat_model`` returns a real
model instead when you pass ``--model provider:name`` (``langchain`` and the
provider's package installed, its API key in the environment).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from langgraph_effects.testing import ScriptedChatModel

ToolCallPlan = Sequence[dict[str, Any]]
"""One turn of the plan: the tool calls to propose, as ``{"name": ..., "args": {...}}``."""


def scripted(plan: list[list[dict[str, Any]]]) -> ScriptedChatModel:
    """The package's scripted model on ``plan``, summing up with the last tool result."""
    return ScriptedChatModel(plan=plan, final="Done.", quote_result=True)


def chat_model(spec: str | None, plan: list[list[dict[str, Any]]]) -> BaseChatModel:
    """The scripted model, or a real one for ``spec`` like ``"openai:gpt-4o-mini"``."""
    if not spec:
        return scripted(plan)
    from langchain.chat_models import init_chat_model  # the 'agents' extra

    return init_chat_model(spec, temperature=0)


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        metavar="PROVIDER:NAME",
        help="use a real chat model (e.g. openai:gpt-4o-mini) instead of the scripted one; "
        "needs langchain, the provider's package and its API key",
    )


MARKER = ".langgraph-effects-example"


def work_dir(name: str, given: str | None, *, fresh: bool) -> Path:
    """The example's directory: ``--dir``, or for a new run a fresh one of its own under
    the system temp dir (``lge-NAME-...``), so two runs never share one; it is kept (a
    crash's ``--resume --dir`` and the CLI read it) and the run says where.

    ``fresh`` empties a given ``--dir`` first (a new run); a resume keeps what the
    crash left. Only a directory an example created (it holds a marker file) or an
    empty one is ever emptied: a ``--dir`` pointing at anything else is refused.
    """
    if given is None:
        path = Path(tempfile.mkdtemp(prefix=f"lge-{name}-"))
        (path / MARKER).touch()
        print(f"files in {path} (kept after the run: remove it when done)")
        return path
    path = Path(given)
    if fresh and path.exists() and any(path.iterdir()):
        if not (path / MARKER).exists():
            raise SystemExit(f"refusing to empty {path}: not a directory an example created")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).touch()
    return path


def saver_connection(path: Path) -> sqlite3.Connection:
    """The checkpointer's OWN connection (never share the ledger's: SqliteSaver commits it)."""
    return sqlite3.connect(path, check_same_thread=False)


# --------------------------------------------------------------------------- PostgreSQL

SCHEMA_FILE = "postgres-schema"


def add_postgres_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="keep the ledger, checkpoints and application tables in PostgreSQL "
        "(e.g. postgresql://postgres@127.0.0.1:5432/test), in a schema of this run's own",
    )


def postgres_url(base: str | None, directory: Path, *, fresh: bool) -> str | None:
    """``base`` narrowed to this run's own schema (None without ``--postgres``).

    A fresh run creates a new schema (``lge_example_<hex>``) and writes its name
    to ``directory``; ``--resume`` reads it back, so crash and resume meet the
    same tables and two runs never see each other's threads or operations. The
    schema stays (a resume needs it) and the run says so, with the statement that drops it.
    """
    marker = directory / SCHEMA_FILE
    if base is None:
        if not fresh and marker.exists():
            raise SystemExit(
                f"the run in {directory} keeps its state in PostgreSQL: resume it with"
                " --postgres and the same URL"
            )
        return None
    import psycopg

    if fresh:
        schema = f"lge_example_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        marker.write_text(schema)
        drop = f'DROP SCHEMA "{schema}" CASCADE'
        print(f"PostgreSQL schema {schema} (kept for --resume: {drop} when done)")
    elif marker.exists():
        schema = marker.read_text().strip()
    else:
        raise SystemExit(f"{directory} holds no PostgreSQL run: start one with --postgres first")
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema}')}"


def resume_command(script: str, directory: Path, pg: str | None) -> str:
    """What to type to resume this run."""
    return f"python {script} --resume --dir {directory}" + (" --postgres URL" if pg else "")


def drop_schema(base: str, directory: Path) -> None:
    """Drop the schema a run in ``directory`` created (tests clean up with it)."""
    import psycopg

    marker = directory / SCHEMA_FILE
    if marker.exists():
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{marker.read_text().strip()}" CASCADE')


@contextmanager
def open_ledger(directory: Path, pg: str | None) -> Iterator[Any]:
    """The ledger, set up: ``effects.db`` in ``directory``, or PostgreSQL."""
    if pg is None:
        from langgraph_effects import SQLiteLedger

        with SQLiteLedger.from_conn_string(str(directory / "effects.db")) as ledger:
            ledger.setup()
            yield ledger
    else:
        from langgraph_effects import PostgresLedger

        with PostgresLedger.from_conn_string(pg) as ledger:
            ledger.setup()
            yield ledger


@contextmanager
def open_saver(directory: Path, pg: str | None) -> Iterator[Any]:
    """LangGraph's checkpointer, set up, on its OWN connection (never the ledger's)."""
    if pg is None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = saver_connection(directory / "checkpoints.db")
        try:
            yield SqliteSaver(conn)
        finally:
            conn.close()
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(pg) as saver:
            saver.setup()
            yield saver


@asynccontextmanager
async def open_async_ledger(directory: Path, pg: str | None) -> AsyncIterator[Any]:
    """``open_ledger`` for an async graph: the same ledger, through its async class."""
    if pg is None:
        from langgraph_effects import AsyncSQLiteLedger

        async with AsyncSQLiteLedger.from_conn_string(str(directory / "effects.db")) as ledger:
            await ledger.setup()
            yield ledger
    else:
        from langgraph_effects import AsyncPostgresLedger

        async with AsyncPostgresLedger.from_conn_string(pg) as ledger:
            await ledger.setup()
            yield ledger


@asynccontextmanager
async def open_async_saver(directory: Path, pg: str | None) -> AsyncIterator[Any]:
    """``open_saver`` for an async graph (``ainvoke``): LangGraph's async checkpointer."""
    if pg is None:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with aiosqlite.connect(directory / "checkpoints.db") as conn:
            saver = AsyncSqliteSaver(conn)
            await saver.setup()
            yield saver
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(pg) as pg_saver:
            await pg_saver.setup()
            yield pg_saver


def ledger_url(directory: Path, pg: str | None) -> str:
    """The ledger as the ``langgraph-effects`` CLI names it (``--db``)."""
    return pg if pg is not None else f"sqlite:///{directory / 'effects.db'}"


# --------------------------------------------------------------------------- the app's database


def app_connection(directory: Path, pg: str | None) -> Any:
    """The application's own database: ``app.db`` in ``directory``, or PostgreSQL (autocommit)."""
    if pg is None:
        return sqlite3.connect(
            directory / "app.db", isolation_level=None, check_same_thread=False, timeout=30
        )
    import psycopg

    return psycopg.connect(pg, autocommit=True)


def app_sql(conn: Any, statement: str) -> str:
    """``statement`` written with ``?`` placeholders, in ``conn``'s paramstyle."""
    return statement if isinstance(conn, sqlite3.Connection) else statement.replace("?", "%s")


@contextmanager
def app_transaction(conn: Any) -> Iterator[None]:
    """One local transaction of the application: everything in it commits, or nothing does."""
    if not isinstance(conn, sqlite3.Connection):
        with conn.transaction():
            yield
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def app_relay(directory: Path, pg: str | None, **kwargs: Any) -> Any:
    """An ``OutboxRelay`` on its own connection to the application's database."""
    from langgraph_effects.outbox import OutboxRelay

    return OutboxRelay.from_conn_string(pg if pg is not None else directory / "app.db", **kwargs)


class RollBack(Exception):
    """Raised inside ``app_transaction`` to roll it back on purpose."""


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    """A plain text table."""
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def narrate(graph: Any, graph_input: Any, config: dict[str, Any]) -> list[Any]:
    """Run the graph (``durability="sync"``), printing each step; return pending interrupts.

    ``durability="sync"`` saves the AIMessage (and its tool-call ids) before a
    tool runs, so a resumed run meets the same calls, and so the same operations.
    """
    interrupts: list[Any] = []
    for chunk in graph.stream(graph_input, config, stream_mode="updates", durability="sync"):
        for node, update in chunk.items():
            if node == "__interrupt__":
                interrupts.extend(update)
                print("  [interrupt] the graph waits for a person (see the request below)")
                continue
            messages = update.get("messages", []) if isinstance(update, dict) else []
            for message in messages:
                print(f"  [{node}] {describe(message)}")
    return interrupts


async def anarrate(graph: Any, graph_input: Any, config: dict[str, Any]) -> list[Any]:
    """``narrate`` for an async graph (``astream``)."""
    interrupts: list[Any] = []
    stream = graph.astream(graph_input, config, stream_mode="updates", durability="sync")
    async for chunk in stream:
        for node, update in chunk.items():
            if node == "__interrupt__":
                interrupts.extend(update)
                print("  [interrupt] the graph waits for a person (see the request below)")
                continue
            messages = update.get("messages", []) if isinstance(update, dict) else []
            for message in messages:
                print(f"  [{node}] {describe(message)}")
    return interrupts


def describe(message: BaseMessage) -> str:
    """One line for a message: tool calls, a tool result, or the text."""
    if isinstance(message, AIMessage) and message.tool_calls:
        calls = ", ".join(
            f"{c['name']}({', '.join(f'{k}={v!r}' for k, v in c['args'].items())})"
            for c in message.tool_calls
        )
        return f"model proposes {calls}"
    text = message.text if isinstance(message.content, list) else str(message.content)
    text = text if len(text) <= 160 else text[:157] + "..."
    if isinstance(message, ToolMessage):
        flag = " (error)" if message.status == "error" else ""
        return f"{message.name}{flag} -> {text}"
    return f"model says: {text}"


def parse_crash(value: str | None) -> tuple[Any, int] | None:
    """``POINT[:HIT]`` (a ``CrashPoint`` value, hit counting from 1) or None."""
    from langgraph_effects.testing.faults import CrashPoint

    if not value:
        return None
    point, _, hit = value.partition(":")
    return CrashPoint(point), int(hit or 1)


NOT_REACHED = 3
"""Exit code of a run whose armed crash point was never reached (nothing died)."""


def crash_argument(points: Sequence[str]) -> Any:
    """An argparse ``type`` for ``POINT[:N]``: POINT one of the example's ``points``."""

    def check(value: str) -> str:
        point, _, hit = value.partition(":")
        if point not in points or not (hit == "" or (hit.isdigit() and int(hit) >= 1)):
            raise argparse.ArgumentTypeError(
                f"{value!r}: expected POINT or POINT:N (N >= 1), POINT one of {', '.join(points)}"
            )
        return value

    return check


# --------------------------------------------------------------------------- the command line


def example_parser(
    doc: str,
    points: Sequence[str] = (),
    *,
    counted: bool = True,
    crash_help: str | None = None,
    resume_help: str = "continue after a crash",
    model: bool = False,
) -> argparse.ArgumentParser:
    """The command line every example shares: ``--dir`` and ``--postgres``; with crash
    ``points``, ``--crash-at`` and ``--resume``; with ``model``, ``--model``.

    ``doc`` is the example's module docstring (its first line describes the command).
    ``--crash-at`` takes ``POINT[:N]``, a runner's ``CrashPoint`` that ``Run.arm`` arms;
    with ``counted=False`` it takes one of ``points`` as it is, for an example that dies
    at points of its own. The example adds its own flags to the parser it is given.
    """
    parser = argparse.ArgumentParser(description=doc.split("\n", 1)[0])
    parser.add_argument("--dir", help="where the run's files go (default: a new temp dir)")
    if points:
        parser.add_argument(
            "--crash-at",
            metavar="POINT[:N]" if counted else None,
            type=crash_argument(points) if counted else None,
            choices=None if counted else points,
            help=crash_help or f"die at a crash point: {', '.join(points)}",
        )
        parser.add_argument("--resume", action="store_true", help=resume_help)
    if model:
        add_model_argument(parser)
    add_postgres_argument(parser)
    return parser


@dataclass(frozen=True)
class Run:
    """One run of an example as its command line asks it: the parsed ``args``, the
    run's ``directory`` and ``pg``, the PostgreSQL URL narrowed to the run's own
    schema (None: SQLite files in ``directory``)."""

    args: argparse.Namespace
    directory: Path
    pg: str | None

    @property
    def resume(self) -> bool:
        return bool(getattr(self.args, "resume", False))

    @property
    def crash_at(self) -> str | None:
        return getattr(self.args, "crash_at", None)

    def resume_command(self) -> str:
        """What to type to resume this run."""
        return resume_command(sys.argv[0], self.directory, self.pg)

    def arm(self) -> Any:
        """The runner's ``CrashPlan`` for ``--crash-at``, armed to exit there; None unarmed."""
        from langgraph_effects.testing import CrashPlan

        crash = parse_crash(self.crash_at)
        return None if crash is None else CrashPlan.arm(crash[0], "exit", hit=crash[1])

    def exit_code(self, plan: Any, code: int) -> int:
        """``code``, or ``NOT_REACHED`` (said) when ``--crash-at`` was given and ``plan``,
        its armed plan, never fired: this run ended where it was meant to die."""
        if self.crash_at and (plan is None or not plan.fired):
            print(f"The crash point {self.crash_at} was not reached in this run: nothing died.")
            return NOT_REACHED
        return code


def begin(
    name: str,
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    *,
    fresh: bool | None = None,
    stores: str | None = None,
    needs: str | None = None,
) -> Run:
    """The run ``args`` ask for: its directory (``work_dir``) and PostgreSQL schema
    (``postgres_url``), fresh unless it resumes; stdout line-buffered, so that what it
    printed is there when it dies.

    A resume needs ``--dir`` (a usage error says so), and with ``needs`` that file in it.
    With ``stores`` (what goes to PostgreSQL under ``--postgres``, as "ledger, checkpoints")
    the run says where its files are and, armed with ``--crash-at``, where it dies and the
    command that resumes it.
    """
    run_fresh = not getattr(args, "resume", False) if fresh is None else fresh
    if not run_fresh and args.dir is None:
        parser.error("--resume needs --dir DIR (the directory the crash printed)")
    if not run_fresh and needs is not None and not (Path(args.dir) / needs).exists():
        parser.error(f"--resume --dir {args.dir}: no run there (start one without --resume)")
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    directory = work_dir(name, args.dir, fresh=run_fresh)
    run = Run(args, directory, postgres_url(args.postgres, directory, fresh=run_fresh))
    if stores is not None:
        print(f"Files in {directory}" + (f" ({stores}: PostgreSQL)" if run.pg else ""))
        if run.crash_at:
            print(f"Armed: this process dies at {run.crash_at}. Then run:")
            print(f"  {run.resume_command()}")
    return run


def who(actor: str) -> str:
    """An event's actor; a lease owner (``[takeover:]host|pid|started|nonce``) as "process PID"."""
    if "|" not in actor:
        return actor
    head, pid = actor.split("|")[:2]
    return f"{'takeover by ' if head.startswith('takeover:') else ''}process {pid}"
