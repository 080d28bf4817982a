"""Crash scenarios with real process deaths: die at a boundary, resume in a fresh process.

The child builds the graph on a SQLite file (or a PostgreSQL schema) and a
file-backed fake CRM, and dies (``os._exit``) at a crash point or when the
provider kills it right after applying. A second fresh process resumes with
``invoke(None, config)``; effects are counted at the fake provider.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _crash_child import run

from langgraph_effects.testing.faults import CrashPoint
from langgraph_effects.testing.providers import FakeCRM, Fault
from langgraph_effects.testing.scenario import run_in_forked_child


def crash_then_resume(
    backend: tuple[str, str, str], crm_path: Path, flavour: str, **crash: Any
) -> dict[str, Any]:
    kind, mode, where = backend
    died = run_in_forked_child(run, kind, mode, where, str(crm_path), flavour, True, **crash)
    assert died.crashed, died.error
    resumed = run_in_forked_child(run, kind, mode, where, str(crm_path), flavour, False)
    assert resumed.ok, resumed.error
    value: dict[str, Any] = resumed.value
    return value


def test_crash_after_prepare_dispatches_once(backend: tuple[str, str, str], tmp_path: Path) -> None:
    """Scenario 1: killed after the record is prepared, before the claim: resume sends once."""
    crm_path = tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    out = crash_then_resume(backend, crm_path, "authorize", crash_at=CrashPoint.AFTER_PREPARE)
    assert out["statuses"] == ["confirmed"]
    assert out["attempts"] == [1]
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 1


def test_applied_then_killed_is_reconciled(backend: tuple[str, str, str], tmp_path: Path) -> None:
    """Scenario 2: the provider applies, the process dies: resume reconciles; counts 1."""
    crm_path = tmp_path / "crm.db"
    with FakeCRM(crm_path) as crm:
        crm.faults.push(Fault.CRASH)
    out = crash_then_resume(backend, crm_path, "reconcile")
    assert out["statuses"] == ["confirmed"]
    assert out["attempts"] == [1]
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 1


def test_applied_then_killed_is_retried_under_key(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """Scenario 3: same, key window open: resume resends under the same key; counts 1."""
    crm_path = tmp_path / "crm.db"
    with FakeCRM(crm_path) as crm:
        crm.faults.push(Fault.CRASH)
    out = crash_then_resume(backend, crm_path, "key")
    assert out["statuses"] == ["confirmed"]
    assert out["attempts"] == [2]
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 1
        assert crm.duplicates == 0


def test_applied_then_killed_without_means_goes_to_review(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """Scenario 4: no reconciler, no key contract: resume interrupts for review, sends nothing."""
    if backend[0] == "postgres":
        pytest.skip("covered on SQLite; PostgreSQL runs the crash/lost-response/concurrency set")
    crm_path = tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    out = crash_then_resume(backend, crm_path, "bare", crash_at=CrashPoint.AFTER_PROVIDER)
    assert out["statuses"] == ["unknown"]
    assert [i["kind"] for i in out["interrupts"]] == ["effect_review"]
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 1


def test_two_processes_resume_at_once(backend: tuple[str, str, str], tmp_path: Path) -> None:
    """Scenario 6: two fresh processes resume the same crashed thread together: one dispatch."""
    import concurrent.futures

    kind, mode, where = backend
    crm_path = tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    died = run_in_forked_child(
        run, kind, mode, where, str(crm_path), "authorize", True, crash_at=CrashPoint.AFTER_PREPARE
    )
    assert died.crashed
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(
            pool.map(
                lambda _: run_in_forked_child(
                    run, kind, mode, where, str(crm_path), "authorize", False
                ),
                range(2),
            )
        )
    assert all(r.ok for r in results), [r.error for r in results]
    with FakeCRM(crm_path) as crm:
        assert crm.effects == 1


def test_control_plain_toolnode_duplicates_after_crash(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """Scenario 12: a plain ToolNode killed after the provider applied re-sends on resume."""
    if backend[0] == "postgres":
        pytest.skip("the control runs on SQLite")
    crm_path = tmp_path / "crm.db"
    with FakeCRM(crm_path) as crm:
        crm.faults.push(Fault.CRASH)
    crash_then_resume(backend, crm_path, "plain")
    with FakeCRM(crm_path) as crm:
        assert crm.effects > 1
