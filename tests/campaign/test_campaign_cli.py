"""The campaign's command line keeps its PostgreSQL tables in a schema of its own."""

from __future__ import annotations

import psycopg
from _pg import POSTGRES_URL, require_postgres

from langgraph_effects import PostgresLedger
from langgraph_effects.testing.campaign import own_schema


def _schemas_and_public_tables() -> tuple[set[str], set[str]]:
    with psycopg.connect(POSTGRES_URL) as conn:
        schemas = {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace")}
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        public = {r[0] for r in rows}
    return schemas, public


def test_the_command_lines_tables_live_in_a_schema_dropped_afterwards() -> None:
    """``python -m langgraph_effects.testing.campaign`` defaults to the database ``test``:
    its ledgers and checkpointers set their tables up in ``public`` and left them there,
    rows and all, for every later run and ad-hoc script to meet. Now the run's URL names
    a fresh schema (its tables go there, none in ``public``), dropped at the end."""
    require_postgres()
    schemas_before, public_before = _schemas_and_public_tables()
    with own_schema(POSTGRES_URL) as url:
        [schema] = [s for s in _schemas_and_public_tables()[0] - schemas_before if "campaign" in s]
        with PostgresLedger.from_conn_string(url) as ledger:
            ledger.setup()
        with psycopg.connect(POSTGRES_URL) as conn:
            tables = {
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
                )
            }
        assert "lge_operations" in tables
    schemas_after, public_after = _schemas_and_public_tables()
    assert schema not in schemas_after
    assert public_after == public_before


def test_a_url_naming_its_search_path_is_used_as_given() -> None:
    url = f"{POSTGRES_URL}?options=-csearch_path%3Dmine"
    with own_schema(url) as given:
        assert given == url
