"""The recovery campaign in CI: 0 duplicates and 0 mislabelled unknowns; the control duplicates.

Heavy (about two to three minutes on 2 cores in all): marked ``slow``. The
randomized part runs 2,000 seeded schedules once per session and several
tests read its result; a failing schedule's seed is in the failure message
(replay: ``python -m langgraph_effects.testing.campaign --seed SEED --schedules 1``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from langgraph_effects.testing.campaign import (
    CampaignResult,
    concurrency,
    kill_cases,
    kill_matrix,
    main,
    run_campaign,
)
from langgraph_effects.testing.faults import CrashPoint
from langgraph_effects.testing.scenario import ProviderKind

pytestmark = pytest.mark.slow

SCHEDULES = 2000


@pytest.fixture(scope="module")
def randomized() -> CampaignResult:
    """2,000 schedules through EffectToolNode, and the same through a plain ToolNode."""
    return run_campaign(schedules=SCHEDULES, parts=("randomized", "control"), workers=2)


def _problems(result: CampaignResult) -> str:
    return "\n".join(line for row in result.node_rows for line in row.problems)


def test_randomized_schedules_apply_no_effect_twice(randomized: CampaignResult) -> None:
    """Across 2,000 schedules of crashes, faults and racing resumers: no duplicate effect."""
    (node,) = randomized.node_rows
    assert node.runs == SCHEDULES
    assert node.crashes > SCHEDULES // 2  # the schedules do crash
    assert node.duplicates == 0, _problems(randomized)


def test_randomized_schedules_leave_no_mislabelled_unknown(randomized: CampaignResult) -> None:
    """No operation is confirmed without an effect, rejected with one, or rejected unevidenced."""
    assert randomized.mislabelled == 0, _problems(randomized)


def test_the_control_toolnode_duplicates_under_the_same_schedules(
    randomized: CampaignResult,
) -> None:
    """A plain ToolNode applies effects twice under the same schedules: the zero means something."""
    assert randomized.control is not None
    assert randomized.control.runs == SCHEDULES
    assert randomized.control.duplicates > SCHEDULES // 10


@pytest.mark.postgres
def test_real_kills_at_every_point_resume_without_duplicates(tmp_path: Path, pg_url: str) -> None:
    """Every crash point x provider x {SQLite file, PostgreSQL} x {sync, async}, killed for real."""
    cases = kill_cases(("sqlite", "postgres"), tmp_path, postgres_url=pg_url)
    assert len(cases) == 2 * 2 * (3 * len(CrashPoint) - 1)
    assert {c.kind for c in cases} == set(ProviderKind)
    groups = kill_matrix(cases, workers=2)
    problems = "\n".join(line for r in groups.values() for line in r.problems)
    assert sum(r.crashes for r in groups.values()) == len(cases), problems  # every point reached
    assert sum(r.duplicates for r in groups.values()) == 0, problems
    assert sum(r.mislabelled for r in groups.values()) == 0, problems
    assert sum(r.unknown for r in groups.values()) == 0, problems


@pytest.mark.postgres
def test_eight_processes_resuming_the_same_threads_dispatch_each_intent_once(
    tmp_path: Path, pg_url: str
) -> None:
    """8 processes resume the same 100 crashed threads on PostgreSQL: one effect per intent."""
    report = concurrency(pg_url, tmp_path, processes=8, threads=100)
    assert report.problems == ()
    assert (report.intents, report.effects, report.duplicates) == (200, 200, 0)
    assert report.completed == 100


def test_the_command_prints_the_table_and_its_status_says_pass_or_fail(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The command prints one row per part and exits 0 only without duplicates or mislabels."""
    status = main(["--parts", "randomized,control", "--schedules", "30", "--backends", "sqlite"])
    out = capsys.readouterr().out
    assert "randomized EffectToolNode" in out
    assert "randomized ToolNode (control)" in out
    clean = "EffectToolNode: 0 duplicates, 0 mislabelled" in out
    assert status == (0 if clean else 1)
    assert main(["--parts", "nonsense"]) == 2
