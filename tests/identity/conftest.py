"""The identity room: every row of docs/identity.md against real graphs, counted at a fake CRM.

Each test runs on SQLite and PostgreSQL, sync and async (``env``), and where a plain
``ToolNode`` shows what LangGraph alone does, it runs beside it (``plain=True``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from langgraph_effects.testing.providers import FakeCRM


@pytest.fixture
def crm(tmp_path: Path) -> Iterator[FakeCRM]:
    with FakeCRM(path=tmp_path / "crm.db") as provider:
        yield provider
