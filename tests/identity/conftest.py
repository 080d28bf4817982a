"""The identity room: every row of docs/identity.md against real graphs, counted at a fake CRM.

Each test runs on SQLite and PostgreSQL, sync and async (``env``), and where a plain
``ToolNode`` shows what LangGraph alone does, it runs beside it (``plain=True``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _graphs import Env

from langgraph_effects.testing.providers import FakeCRM

BACKENDS = [(k, m) for k in ("sqlite", "postgres") for m in ("sync", "async")]


@pytest.fixture(params=BACKENDS, ids=[f"{k}-{m}" for k, m in BACKENDS])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    kind, mode = request.param
    url = request.getfixturevalue("pg_url") if kind == "postgres" else None
    e = Env(kind, mode, path=tmp_path / "app.db", url=url)
    yield e
    e.close()


@pytest.fixture
def crm(tmp_path: Path) -> Iterator[FakeCRM]:
    with FakeCRM(path=tmp_path / "crm.db") as provider:
        yield provider
