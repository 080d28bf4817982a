"""The PostgreSQL server the tests use: its URL, whether it answers, and a schema's URL.

Beside ``conftest.py`` rather than in it: a test module imports these by name
(``from _pg import POSTGRES_URL``), and another room's ``conftest.py`` would
shadow a ``conftest`` module.
"""

from __future__ import annotations

import os
from typing import NoReturn
from urllib.parse import quote

import pytest

POSTGRES_URL = os.environ.get("LGE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_POSTGRES = os.environ.get("LGE_REQUIRE_POSTGRES") == "1"


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
    unavailable(problem, "set LGE_TEST_POSTGRES_URL, or start the server")


def unavailable(problem: str, hint: str) -> NoReturn:
    """Skip for ``problem`` (with the ``hint``), or fail under LGE_REQUIRE_POSTGRES=1 (CI): a
    PostgreSQL test that CI cannot run is a failure there, never a silent skip."""
    if REQUIRE_POSTGRES:
        pytest.fail(f"LGE_REQUIRE_POSTGRES=1 but {problem}")
    pytest.skip(f"{problem} ({hint})")


def _with_search_path(url: str, schema: str) -> str:
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}')}"
