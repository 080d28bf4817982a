"""Shared fixtures: a fresh SQLite file or PostgreSQL schema per test.

PostgreSQL: ``LGE_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``). Unreachable -> the tests skip
with the reason, unless ``LGE_REQUIRE_POSTGRES=1`` (CI), where they fail.

Timeouts are hang guards, not budgets: each test's ``pytest-timeout`` (the ini
value or its ``timeout`` marker) and every wait a test starts (a subprocess, a
child process, a thread) is multiplied by ``langgraph_effects.testing.faults.
timeout_scale()``: ``LGE_TEST_TIMEOUT_SCALE`` when set, else the machine's load
per core. A loaded machine runs the suite slower, never red.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from langgraph_effects.testing.faults import timeout_scale

POSTGRES_URL = os.environ.get("LGE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_POSTGRES = os.environ.get("LGE_REQUIRE_POSTGRES") == "1"
DEFAULT_WORKERS = 2  # the suite's parallelism when the command line does not choose


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns -n into workers
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Run on two xdist workers by default, only when xdist is there and nothing else was asked.

    Not in ``addopts``: there ``-n 2`` breaks ``pytest -p no:xdist`` and any
    machine without pytest-xdist. An explicit ``-n``/``--dist``/``--tx``,
    ``--pdb`` or ``--collect-only`` keeps its meaning.
    """
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    option = config.option
    chosen = option.numprocesses is not None or option.dist != "no" or option.tx
    if not (chosen or option.usepdb or option.collectonly):
        option.numprocesses = DEFAULT_WORKERS


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # before pytest-timeout reads the item
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """The test's timeout (marker, else ini), multiplied by the machine's ``timeout_scale()``."""
    marker = item.get_closest_marker("timeout")
    kwargs = dict(marker.kwargs) if marker is not None else {}
    seconds = marker.args[0] if marker is not None and marker.args else kwargs.pop("timeout", None)
    if marker is None:
        seconds = item.config.getoption("timeout", None) or item.config.getini("timeout")
    if seconds and float(seconds) > 0:
        scaled = pytest.mark.timeout(float(seconds) * timeout_scale(), **kwargs)
        item.add_marker(scaled, append=False)
    yield


_pg_error: str | None = None
_pg_checked = False


def _postgres_problem() -> str | None:
    """Return why PostgreSQL cannot be used, or None when it can (checked once)."""
    global _pg_checked, _pg_error
    if not _pg_checked:
        _pg_checked = True
        try:
            import psycopg

            with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        except Exception as exc:  # any failure means: not usable here
            _pg_error = f"PostgreSQL at {POSTGRES_URL} is unreachable: {exc!s}".strip()
    return _pg_error


def require_postgres() -> None:
    """Skip (or, with LGE_REQUIRE_POSTGRES=1, fail) when PostgreSQL is unreachable."""
    problem = _postgres_problem()
    if problem is None:
        return
    if REQUIRE_POSTGRES:
        pytest.fail(f"LGE_REQUIRE_POSTGRES=1 but {problem}")
    pytest.skip(f"{problem} (set LGE_TEST_POSTGRES_URL, or start the server)")


def _with_search_path(url: str, schema: str) -> str:
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}')}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema, dropped afterwards."""
    require_postgres()
    import psycopg

    schema = f"lge_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield _with_search_path(POSTGRES_URL, schema)
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    """A fresh SQLite file path (not yet created)."""
    return tmp_path / "effects.db"
