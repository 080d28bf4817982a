"""An effect inside a ``@task``, killed after the provider acted, resumed in a fresh process.

The child runs the entrypoint on a SQLite file (or a PostgreSQL schema) and a
file-backed fake CRM that kills it right after applying (``Fault.CRASH``). A fresh
process (this test's own, which never ran the graph) resumes with ``invoke(None)``:
the task runs again (LangGraph saved no result for it) under the same task id, so
``run_effect`` meets the same operation and reconciles it, or asks a person,
answered with ``Command(resume=...)``.
Effects are counted at the fake. The plain ``@task`` beside it closes the case twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _functional_child import run

from langgraph_effects.testing.providers import FakeCRM, Fault
from langgraph_effects.testing.scenario import run_in_forked_child


def killed_then(backend: tuple[str, str, str], crm_path: Path, flavour: str) -> dict[str, Any]:
    """Start in a child the provider kills after applying; resume here, a fresh process."""
    kind, mode, where = backend
    with FakeCRM(crm_path) as crm:
        crm.faults.push(Fault.CRASH)
    died = run_in_forked_child(run, kind, mode, where, str(crm_path), flavour, "A")
    assert died.crashed, died.error
    return run(kind, mode, where, str(crm_path), flavour, None)


def test_killed_after_provider_is_reconciled_once(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    crm_path = tmp_path / "crm.db"
    out = killed_then(backend, crm_path, "reconcile")
    assert out["statuses"] == ["confirmed"]
    assert out["output"] == {"closed": "A"}  # the reconciler's evidence, from the record
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 1
        assert crm.duplicates == 0


def test_killed_in_the_entrypoint_body_is_reconciled_once(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """The effect called in the entrypoint's own body, no task around it: LangGraph runs the
    body again from its start on resume, under the same task id, so the call meets the same
    operation, and its reconciler confirms the closure the killed process made."""
    crm_path = tmp_path / "crm.db"
    out = killed_then(backend, crm_path, "body")
    assert out["statuses"] == ["confirmed"]
    assert out["output"] == {"closed": "A"}  # the reconciler's evidence, from the record
    with FakeCRM(crm_path) as crm:
        assert (crm.effects, crm.duplicates) == (1, 0)


@pytest.mark.parametrize("where", ["sqlite-async", "postgres-sync"])
def test_killed_after_provider_asks_a_person_then_once(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    kind, mode = where.split("-")
    place = request.getfixturevalue("pg_url") if kind == "postgres" else str(tmp_path / "app.db")
    backend = (kind, mode, place)
    crm_path = tmp_path / "crm.db"
    out = killed_then(backend, crm_path, "review")
    assert out["statuses"] == ["unknown"]
    (request,) = out["interrupts"]
    assert request["kind"] == "effect_review"
    kind, mode, where = backend
    answer = {"decision": "confirm", "by": "alice", "result": {"closed": "A"}}
    answered = run(kind, mode, where, str(crm_path), "review", answer)
    assert answered["statuses"] == ["confirmed"]
    assert answered["interrupts"] == []
    assert answered["output"] == {"closed": "A"}
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_plain_task_control_closes_twice(mode: str, tmp_path: Path) -> None:
    """The control: the same @task calling the provider directly acts again on resume."""
    crm_path = tmp_path / "crm.db"
    killed_then(("sqlite", mode, str(tmp_path / "app.db")), crm_path, "plain")
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 2
        assert crm.duplicates == 1
