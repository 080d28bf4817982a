"""A ledger named by a URL, and one configured from the environment for servers.

One URL syntax for every place a ledger is named (the CLI's ``--db``, the
server recipe's ``LGE_LEDGER_URL``):

* ``sqlite:///relative/effects.db``, ``sqlite:////abs/effects.db`` (SQLAlchemy's
  convention), or a plain path: a SQLite file;
* ``postgresql://user@host:5432/db`` (``postgres://`` and
  ``postgresql+psycopg://`` too): PostgreSQL.

``ledger_from_env()`` is for a graph module that LangGraph Server imports
(``langgraph.json``). Importing the module must not touch the database, and the
server runs graphs on its event loop, where a blocking call stalls every run
(``langgraph dev`` raises ``BlockingError`` on one). So the factory returns an
``AsyncLedger`` that does nothing until its first call, then opens the backend
*in the running loop* without blocking it (SQLite in a worker thread, PostgreSQL
on an ``AsyncConnectionPool``), runs ``setup()`` once, and serves every later
call::

    # graph.py, loaded by the server
    from langgraph_effects import EffectToolNode, ledger_from_env

    ledger = ledger_from_env()   # LGE_LEDGER_URL, default sqlite:///effects.db
    tools = EffectToolNode([close_case], ledger=ledger)
    graph = builder.compile()    # no checkpointer: the server supplies it
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import os
import re
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar
from urllib.parse import urlsplit

from langgraph_effects.core.model import utcnow
from langgraph_effects.errors import InvalidInput
from langgraph_effects.ledger._defaults import LEDGER_URL_ENV
from langgraph_effects.ledger.base import AsyncLedger, PrepareSynchronous, check_prepare_synchronous

__all__ = [
    "DEFAULT_LEDGER_URL",
    "LEDGER_URL_ENV",
    "LazyLedger",
    "LedgerLocation",
    "ledger_from_env",
    "ledger_from_url",
    "parse_ledger_url",
    "redacted",
    "table_connection",
]

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_LEDGER_URL = "sqlite:///effects.db"
"""``ledger_from_env``'s ledger when no variable is set: ``effects.db`` in the working dir."""


@dataclass(frozen=True)
class LedgerLocation:
    """Where a ledger URL points: a SQLite file or a PostgreSQL connection string."""

    backend: Literal["sqlite", "postgres"]
    target: str
    """The SQLite file path, or a libpq connection URL (``postgresql://...``)."""


def parse_ledger_url(url: str) -> LedgerLocation:
    """Read a ledger URL (see the module docstring). Pure: nothing is opened.

    Raises:
        InvalidInput: the URL is malformed or names an unsupported scheme.
    """
    scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    if scheme in ("postgresql", "postgres") or scheme.startswith("postgresql+"):
        if _authority(url).count("@") > 1:
            # libpq would cut the password at its first '@' and take the rest for a host.
            raise InvalidInput(
                "the ledger URL's user name or password holds an '@': percent-encode it as %40"
            )
        return LedgerLocation("postgres", re.sub(r"^postgresql\+\w+://", "postgresql://", url))
    if scheme == "sqlite":
        # SQLAlchemy's convention: sqlite:///rel/path, sqlite:////abs/path.
        path = url[len("sqlite:///") :] if url.lower().startswith("sqlite:///") else ""
        if not path:
            raise InvalidInput(
                f"malformed SQLite URL {redacted(url)!r}: use sqlite:///path/to/effects.db"
            )
        return LedgerLocation("sqlite", path)
    if scheme == "" and url.strip():
        return LedgerLocation("sqlite", url)
    raise InvalidInput(
        f"unsupported ledger URL {redacted(url)!r}: use sqlite:///path/to/effects.db "
        "or postgresql://user@host:5432/db"
    )


@contextlib.contextmanager
def table_connection(url: str | Path) -> Iterator[Any]:
    """A connection of its own on the database a ledger URL names (``parse_ledger_url``),
    for the outbox relay and the run journal, closed after the block: SQLite in autocommit
    mode, waiting up to 30 s for another writer; PostgreSQL (psycopg) in autocommit mode.

    Raises:
        InvalidInput: the URL is malformed or names an unsupported scheme.
    """
    location = parse_ledger_url(str(url))
    if location.backend == "postgres":
        import psycopg

        with psycopg.connect(location.target, autocommit=True) as pg:
            yield pg
        return
    import sqlite3

    conn = sqlite3.connect(
        location.target, isolation_level=None, timeout=30.0, check_same_thread=False
    )
    try:
        conn.execute("PRAGMA busy_timeout = 30000")
        yield conn
    finally:
        conn.close()


def redacted(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part shown as ``***``, for messages."""
    head, sep, rest = url.partition("://")
    authority = _authority(url)
    userinfo, at, hostport = authority.rpartition("@")
    if not (sep and at and ":" in userinfo):
        return url
    user = userinfo.split(":", 1)[0]
    return f"{head}://{user}:***@{hostport}{rest[len(authority) :]}"


def _authority(url: str) -> str:
    """``user:password@host:port`` of a URL (empty without ``://``)."""
    _, sep, rest = url.partition("://")
    return re.split(r"[/?#]", rest, maxsplit=1)[0] if sep else ""


# -- the lazy async ledger -------------------------------------------------------------


def _delegate(
    verb: Callable[Concatenate[AsyncLedger, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[LazyLedger, P], Coroutine[Any, Any, T]]:
    """``LazyLedger``'s method for an ``AsyncLedger`` verb: its parameters, checked by mypy."""
    name = verb.__name__

    async def method(self: LazyLedger, /, *args: P.args, **kwargs: P.kwargs) -> T:
        ledger = await self.opened()
        return await getattr(ledger, name)(*args, **kwargs)  # type: ignore[no-any-return]

    method.__name__ = name
    method.__qualname__ = f"LazyLedger.{name}"
    method.__doc__ = f"``AsyncLedger.{name}`` on the ledger opened for the running loop."
    method.__signature__ = inspect.signature(verb)  # type: ignore[attr-defined]
    return method


class LazyLedger:
    """An ``AsyncLedger`` that opens its backend on first use, in the loop that uses it.

    Constructing one does no I/O, so a module may create it at import time. The
    first call in an event loop opens the backend there without blocking the
    loop (SQLite: ``AsyncSQLiteLedger`` over a connection opened in a worker
    thread; PostgreSQL: ``AsyncPostgresLedger`` on an ``AsyncConnectionPool``)
    and, unless ``setup=False``, awaits ``setup()`` (idempotent and locked, so
    several server processes may race it). Concurrent first calls open it once.

    A connection pool belongs to the loop that opened it, so each running loop
    gets its own backend (a server has one loop; a test calling ``asyncio.run``
    twice gets two). Async only: a graph run with ``invoke`` needs a sync
    ``Ledger`` (``SQLiteLedger``, ``PostgresLedger``).

    Args:
        location: where the ledger lives (``parse_ledger_url``).
        setup: create or migrate the ``lge_`` tables on first use (default).
            ``False`` for a database migrated by a deploy step.
        clock: the ledger's time source.
        max_size: the PostgreSQL pool's largest size.
        prepare_synchronous: the PostgreSQL ledger's (``PrepareSynchronous``): ``"ON"``
            (default) or ``"SERVER"``. A SQLite ledger commits every decision with its
            own ``synchronous`` (``FULL``) whichever is given.

    Raises:
        InvalidInput: ``prepare_synchronous`` is neither ``"ON"`` nor ``"SERVER"``.
    """

    def __init__(
        self,
        location: LedgerLocation,
        *,
        setup: bool = True,
        clock: Callable[[], datetime] = utcnow,
        max_size: int = 10,
        prepare_synchronous: PrepareSynchronous | None = None,
    ) -> None:
        check_prepare_synchronous(prepare_synchronous)  # now, not at the first call
        self.location = location
        self._setup = setup
        self._clock = clock
        self._max_size = max_size
        self._prepare_synchronous = prepare_synchronous
        # Import the backend now (a module's import time, before any loop runs): an
        # import in the loop on first use would read files there, a blocking call.
        importlib.import_module(f"langgraph_effects.ledger.{location.backend}")
        self._open: dict[asyncio.AbstractEventLoop, tuple[Any, contextlib.AsyncExitStack]] = {}
        self._opening: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    def __repr__(self) -> str:
        where = self.location.target if self.location.backend == "sqlite" else "postgresql://..."
        return f"LazyLedger({self.location.backend}: {where})"

    async def opened(self) -> Any:
        """The backend ledger of the running loop, opened (and set up) on first call."""
        loop = asyncio.get_running_loop()
        entry = self._open.get(loop)
        if entry is not None:
            return entry[0]
        for gone in [other for other in self._opening if other.is_closed()]:
            # A finished asyncio.run(): its backend died with its loop.
            self._open.pop(gone, None)
            self._opening.pop(gone, None)
        lock = self._opening.setdefault(loop, asyncio.Lock())
        async with lock:
            entry = self._open.get(loop)
            if entry is None:
                stack = contextlib.AsyncExitStack()
                try:
                    ledger = await stack.enter_async_context(self._backend())
                    if self._setup:
                        await ledger.setup()
                except BaseException:
                    await stack.aclose()
                    raise
                entry = self._open[loop] = (ledger, stack)
        return entry[0]

    def _backend(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """The backend ledger for the running loop, to be entered."""
        if self.location.backend == "postgres":
            return _postgres(
                self.location.target, self._clock, self._max_size, self._prepare_synchronous
            )
        return _sqlite(self.location.target, self._clock, self._max_size)

    async def aclose(self) -> None:
        """Close the backend opened for the running loop (a later call opens it again)."""
        entry = self._open.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            await entry[1].aclose()

    setup = _delegate(AsyncLedger.setup)
    prepare = _delegate(AsyncLedger.prepare)
    prepare_many = _delegate(AsyncLedger.prepare_many)
    approve = _delegate(AsyncLedger.approve)
    claim = _delegate(AsyncLedger.claim)
    renew = _delegate(AsyncLedger.renew)
    confirm = _delegate(AsyncLedger.confirm)
    confirm_many = _delegate(AsyncLedger.confirm_many)
    reject = _delegate(AsyncLedger.reject)
    release = _delegate(AsyncLedger.release)
    mark_unknown = _delegate(AsyncLedger.mark_unknown)
    resolve = _delegate(AsyncLedger.resolve)
    record_evidence = _delegate(AsyncLedger.record_evidence)
    bind_thread = _delegate(AsyncLedger.bind_thread)
    adopt = _delegate(AsyncLedger.adopt)
    get = _delegate(AsyncLedger.get)
    list = _delegate(AsyncLedger.list)
    open_operations = _delegate(AsyncLedger.open_operations)
    events = _delegate(AsyncLedger.events)
    feed = _delegate(AsyncLedger.feed)
    stats = _delegate(AsyncLedger.stats)


def _sqlite(
    path: str, clock: Callable[[], datetime], max_size: int
) -> contextlib.AbstractAsyncContextManager[Any]:
    """``AsyncSQLiteLedger`` on ``path``, every blocking step (connect, the connection's
    pragmas, close) in a worker thread."""
    from langgraph_effects.ledger.sqlite import AsyncSQLiteLedger, _connect

    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[Any]:
        def open_() -> tuple[Any, Any]:
            conn = _connect(str(Path(path)))
            try:
                return conn, AsyncSQLiteLedger(conn, clock=clock)
            except BaseException:
                conn.close()
                raise

        conn, ledger = await asyncio.to_thread(open_)
        try:
            yield ledger
        finally:
            await asyncio.to_thread(conn.close)

    return opened()


def _postgres(
    url: str,
    clock: Callable[[], datetime],
    max_size: int,
    prepare_synchronous: PrepareSynchronous | None,
) -> contextlib.AbstractAsyncContextManager[Any]:
    """``AsyncPostgresLedger`` on its own ``AsyncConnectionPool``, opened in the running loop."""
    from langgraph_effects.ledger.postgres import AsyncPostgresLedger

    return AsyncPostgresLedger.from_conn_string(
        url, clock=clock, max_size=max_size, prepare_synchronous=prepare_synchronous
    )


def ledger_from_url(
    url: str,
    *,
    setup: bool = True,
    clock: Callable[[], datetime] = utcnow,
    max_size: int = 10,
    prepare_synchronous: PrepareSynchronous | None = None,
) -> LazyLedger:
    """A ``LazyLedger`` for ``url``: checked now, opened on first use (no I/O here).

    ``prepare_synchronous``: how the PostgreSQL ledger commits its write-ahead record and
    every decision (``PrepareSynchronous``): ``"ON"`` (default) or ``"SERVER"``, the opt-out
    (``docs/production-failover.md``); a SQLite ledger commits them with its own
    ``synchronous`` whichever is given.

    Raises:
        InvalidInput: the URL is malformed or names an unsupported scheme, or
            ``prepare_synchronous`` is neither ``"ON"`` nor ``"SERVER"``.
    """
    return LazyLedger(
        parse_ledger_url(url),
        setup=setup,
        clock=clock,
        max_size=max_size,
        prepare_synchronous=prepare_synchronous,
    )


def ledger_from_env(
    default: str = DEFAULT_LEDGER_URL,
    *,
    setup: bool = True,
    clock: Callable[[], datetime] = utcnow,
    max_size: int = 10,
    prepare_synchronous: PrepareSynchronous | None = None,
) -> LazyLedger:
    """The ledger ``LGE_LEDGER_URL`` names (else ``LGE_DB``, else ``default``), opened lazily.

    Safe at import time and under a running event loop: see ``LazyLedger``;
    ``prepare_synchronous`` as ``ledger_from_url``'s.

    Raises:
        InvalidInput: the URL is malformed or names an unsupported scheme, or
            ``prepare_synchronous`` is neither ``"ON"`` nor ``"SERVER"``.
    """
    url = next((os.environ[v] for v in LEDGER_URL_ENV if os.environ.get(v)), default)
    return ledger_from_url(
        url,
        setup=setup,
        clock=clock,
        max_size=max_size,
        prepare_synchronous=prepare_synchronous,
    )
