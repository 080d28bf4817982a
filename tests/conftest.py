"""Shared fixtures: a fresh SQLite file or PostgreSQL schema per test, and the backend fixtures.

``env`` (an open ``_graphs.Env``: a ledger and a checkpointer) and ``backend`` (``(kind, mode,
where)``, for tests that open their own in a child process) run once per backend of the module's
``BACKENDS``, a list of ``(kind, mode)``: kind ``memory``, ``sqlite`` or ``postgres``, mode
``sync`` or ``async``; without one, SQLite and PostgreSQL, sync and async. A test's own
``parametrize("env", [...], indirect=True)`` chooses for that test.

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
from typing import Any

import _gates
import pytest
from _pg import (
    POSTGRES_URL,
    SetUpSchema,
    _with_search_path,
    require_postgres,
)

from langgraph_effects.testing.faults import timeout_scale

ALL_BACKENDS = [(k, m) for k in ("sqlite", "postgres") for m in ("sync", "async")]
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


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under ``LGE_CI_GATES=1`` (``.ci/run``), the house gates first (``_gates``): once, in
    the controller, before xdist starts its workers; a failing gate ends the session."""
    if os.environ.get(_gates.ENV_VAR) != "1" or hasattr(session.config, "workerinput"):
        return
    failed = _gates.run_gates()
    if failed is not None:
        pytest.exit(f"a house gate failed:\n{failed}", returncode=1)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("house gates passed: ruff check, ruff format, mypy, mkdocs --strict")


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


def _parametrized(metafunc: pytest.Metafunc, name: str) -> bool:
    """The test (or its class or module) parametrizes ``name`` itself."""
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs["argnames"]
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if name in names:
            return True
    return False


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``env`` and ``backend`` once per backend of the module's ``BACKENDS`` (module docstring)."""
    for name in ("env", "backend"):
        if name not in metafunc.fixturenames or _parametrized(metafunc, name):
            continue
        if hasattr(metafunc.module, name):  # the module's own fixture of that name
            continue
        modes = getattr(metafunc.module, "BACKENDS", ALL_BACKENDS)
        metafunc.parametrize(name, modes, indirect=True, ids=[f"{k}-{m}" for k, m in modes])


def _where(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> str:
    """A fresh PostgreSQL schema's URL, else a fresh SQLite file's path."""
    return (
        str(request.getfixturevalue("pg_url")) if kind == "postgres" else str(tmp_path / "app.db")
    )


def _env_where(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> str:
    """``_where`` for ``env``: on PostgreSQL the process's set-up schema handed on as new
    (``_pg.SetUpSchema``: ``env`` sets it up anyway), unless the test also asks for
    ``pg_url`` (then that schema, which it opens itself)."""
    if kind != "postgres" or "pg_url" in request.fixturenames:
        return _where(request, kind, tmp_path)
    schema: SetUpSchema = request.getfixturevalue("_set_up_schema")
    return schema.fresh()


@pytest.fixture(scope="session")
def _set_up_schema() -> Iterator[SetUpSchema]:
    require_postgres()
    schema = SetUpSchema()
    yield schema
    schema.drop()


@pytest.fixture
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, str]:
    """``(kind, mode, where)`` of one backend, nothing opened."""
    kind, mode = request.param
    return kind, mode, _where(request, kind, tmp_path)


@pytest.fixture
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """One backend's ledger and checkpointer, opened sync or async (``_graphs.Env``)."""
    from _graphs import Env

    kind, mode = request.param
    where = _env_where(request, kind, tmp_path)
    opened = Env(kind, mode, path=Path(where), url=where if kind == "postgres" else None)
    yield opened
    opened.close()


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
