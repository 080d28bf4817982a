"""Crash points: armed in-process, through the environment, and as real process deaths."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest

from langgraph_effects.testing import faults
from langgraph_effects.testing.faults import (
    CRASH_EXIT_CODE,
    CrashMode,
    CrashPlan,
    CrashPoint,
    InjectedCrash,
    crash_env,
    crash_point,
    run_in_child,
    scaled,
    timeout_scale,
)
from langgraph_effects.testing.providers import FakeTicketing

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _disarmed() -> Iterator[None]:
    CrashPlan.disarm()
    yield
    CrashPlan.disarm()


def _effect_with_boundaries(tickets: FakeTicketing) -> str:
    """A miniature runner: a crash point before and after the provider call."""
    crash_point(CrashPoint.AFTER_CLAIM)
    ticket: str = tickets.create_ticket("Printer on fire", "3rd floor")["ticket_id"]
    crash_point(CrashPoint.AFTER_PROVIDER)
    return ticket


def test_unarmed_crash_points_do_nothing() -> None:
    """With no plan armed every crash point returns and the effect happens once."""
    tickets = FakeTicketing()
    for point in CrashPoint:
        crash_point(point)
    assert _effect_with_boundaries(tickets) == "T-000001"
    assert CrashPlan.current() is None


def _swallowing_exceptions(tickets: FakeTicketing) -> str:
    """What a tool or a framework writes: catch every Exception."""
    try:
        return _effect_with_boundaries(tickets)
    except Exception:
        return "swallowed"


def test_armed_point_raises_injected_crash_past_except_exception() -> None:
    """RAISE mode raises InjectedCrash at the armed point only, through `except Exception`."""
    tickets = FakeTicketing()
    with CrashPlan.arm(CrashPoint.AFTER_PROVIDER) as plan, pytest.raises(InjectedCrash) as raised:
        _swallowing_exceptions(tickets)
    assert raised.value.point is CrashPoint.AFTER_PROVIDER
    assert plan.fired
    assert plan.hits == {CrashPoint.AFTER_CLAIM: 1, CrashPoint.AFTER_PROVIDER: 1}
    assert tickets.effects == 1
    assert CrashPlan.current() is None


def test_hit_counts_reaches_and_a_plan_fires_once() -> None:
    """hit=2 spares the first reach, crashes on the second, and never fires again."""
    tickets = FakeTicketing()
    with CrashPlan.arm(CrashPoint.AFTER_CLAIM, hit=2):
        _effect_with_boundaries(tickets)
        with pytest.raises(InjectedCrash):
            _effect_with_boundaries(tickets)
        _effect_with_boundaries(tickets)
    assert tickets.effects == 2


def test_observe_counts_points_without_crashing() -> None:
    """An observing plan records every boundary reached and never crashes."""
    with CrashPlan.observe() as plan:
        _effect_with_boundaries(FakeTicketing())
        crash_point(CrashPoint.AFTER_CLAIM)
    assert plan.hits == {CrashPoint.AFTER_CLAIM: 2, CrashPoint.AFTER_PROVIDER: 1}
    assert not plan.fired


def test_env_value_round_trips_and_bad_values_say_what_is_expected() -> None:
    """LGE_CRASH_AT parses point[:mode[:hit]] (mode defaults to exit) and rejects junk clearly."""
    plan = CrashPlan.from_env("after_claim")
    assert plan is not None
    assert (plan.point, plan.mode, plan.hit) == (CrashPoint.AFTER_CLAIM, CrashMode.EXIT, 1)
    parsed = CrashPlan.from_env(
        crash_env(CrashPoint.DURING_REVIEW_RESUME, "kill", hit=3)[faults.ENV_VAR]
    )
    assert parsed is not None
    assert (parsed.point, parsed.mode, parsed.hit) == (
        CrashPoint.DURING_REVIEW_RESUME,
        CrashMode.KILL,
        3,
    )
    assert CrashPlan.from_env("") is None
    with pytest.raises(ValueError, match="after_claim"):
        CrashPlan.from_env("after_lunch")


def test_env_var_kills_a_subprocess_at_the_point(tmp_path: Path) -> None:
    """A script run with crash_env(...) exits 137 at the point; work after it never runs."""
    path = tmp_path / "tickets.db"
    script = (
        "import sys\n"
        "from langgraph_effects.testing.faults import crash_point, CrashPoint\n"
        "from langgraph_effects.testing.providers import FakeTicketing\n"
        "t = FakeTicketing(sys.argv[1])\n"
        "t.create_ticket('a', 'b')\n"
        "crash_point(CrashPoint.AFTER_PROVIDER)\n"
        "t.create_ticket('c', 'd')\n"
    )
    env = {**os.environ, **crash_env(CrashPoint.AFTER_PROVIDER)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], env=env, check=False, timeout=scaled(60)
    )
    assert done.returncode == CRASH_EXIT_CODE
    assert FakeTicketing(path).effects == 1


def test_run_in_child_dies_at_the_point_and_resumes_in_a_fresh_process(tmp_path: Path) -> None:
    """The child exits 137 at AFTER_PROVIDER having applied once; a fresh child completes."""
    tickets = FakeTicketing(tmp_path / "tickets.db")

    died = run_in_child(_effect_with_boundaries, tickets, crash_at=CrashPoint.AFTER_PROVIDER)

    assert (died.exitcode, died.crashed, died.crashed_at) == (
        CRASH_EXIT_CODE,
        True,
        CrashPoint.AFTER_PROVIDER,
    )
    assert tickets.effects == 1

    resumed = run_in_child(_effect_with_boundaries, tickets)

    assert (resumed.ok, resumed.value, resumed.crashed_at) == (True, "T-000002", None)
    # The naive miniature runner re-sent after the crash: the harness shows the duplicate.
    assert (tickets.effects, tickets.duplicates) == (2, 1)
    tickets.close()


def test_run_in_child_kill_mode_is_a_real_sigkill(tmp_path: Path) -> None:
    """KILL mode SIGKILLs the child before the provider is called: nothing applied."""
    tickets = FakeTicketing(tmp_path / "tickets.db")
    died = run_in_child(
        _effect_with_boundaries, tickets, crash_at=CrashPoint.AFTER_CLAIM, mode="kill"
    )
    assert (died.exitcode, died.crashed, died.crashed_at) == (
        -signal.SIGKILL,
        True,
        CrashPoint.AFTER_CLAIM,
    )
    assert tickets.effects == 0
    tickets.close()


def _boom(message: str) -> None:
    raise RuntimeError(message)


def test_run_in_child_reports_an_exception_as_an_error_not_a_crash() -> None:
    """A child that raises exits 1 with its traceback, and is not counted as a crash."""
    result = run_in_child(_boom, "no such case")
    assert (result.exitcode, result.crashed, result.ok) == (1, False, False)
    assert result.error is not None
    assert "RuntimeError: no such case" in result.error


class _State(TypedDict):
    tickets: list[str]


def test_injected_crash_escapes_a_langgraph_node_and_the_node_reruns_on_resume() -> None:
    """InjectedCrash propagates out of graph.invoke, and resuming re-runs the crashed node."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph

    tickets = FakeTicketing()

    def node(state: _State) -> dict[str, Any]:
        return {"tickets": [_effect_with_boundaries(tickets)]}

    builder = StateGraph(_State)
    builder.add_node("act", node)
    builder.add_edge(START, "act")
    builder.add_edge("act", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t1"}}

    with CrashPlan.arm(CrashPoint.AFTER_PROVIDER), pytest.raises(InjectedCrash):
        graph.invoke({"tickets": []}, config)
    final = graph.invoke(None, config)

    assert final["tickets"] == ["T-000002"]
    assert (tickets.effects, tickets.duplicates) == (2, 1)


# --------------------------------------------------------------------------- waits


def test_the_timeout_scale_is_the_knob_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """LGE_TEST_TIMEOUT_SCALE multiplies every wait, whatever the machine's load."""
    monkeypatch.setenv(faults.TIMEOUT_SCALE_VAR, "2.5")
    assert timeout_scale() == 2.5
    assert scaled(10) == 25.0


@pytest.mark.parametrize("bad", ["fast", "0", "-1", "nan"])
def test_a_bad_timeout_scale_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    """A knob that is not a number > 0 is an error naming the variable and the value."""
    monkeypatch.setenv(faults.TIMEOUT_SCALE_VAR, bad)
    refused = f"LGE_TEST_TIMEOUT_SCALE must be a number > 0, got '{bad}'"
    with pytest.raises(ValueError, match=refused):
        scaled(1)


def test_without_the_knob_the_scale_follows_the_load_per_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unset, the scale is the larger load average per core, never below 1."""
    monkeypatch.delenv(faults.TIMEOUT_SCALE_VAR, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 9.0, 1.0))
    assert timeout_scale() == 4.5
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.2, 0.1))
    assert timeout_scale() == 1.0


def test_run_in_child_waits_by_the_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child's timeout is a hang guard multiplied by the scale: 0.2 s scaled by 600 lets a
    child that sleeps a second (after starting up) finish."""
    monkeypatch.setenv(faults.TIMEOUT_SCALE_VAR, "600")
    assert run_in_child(_sleep_then_answer, 1.0, timeout=0.2).value == "done"


def _sleep_then_answer(seconds: float) -> str:
    import time

    time.sleep(seconds)
    return "done"


def test_each_tests_timeout_is_scaled(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/conftest.py multiplies each test's pytest-timeout (its marker, else the default)
    by the scale, before pytest-timeout arms it."""
    tests = Path(__file__).parents[1]
    # Under .ci/run (LGE_CI_GATES=1) the copied conftest would run the house gates on
    # pytester's directory, whose files are not the repository's: not this test's concern.
    monkeypatch.delenv("LGE_CI_GATES", raising=False)
    pytester.makeconftest((tests / "conftest.py").read_text())
    pytester.makepyfile(  # what conftest.py imports
        _pg=(tests / "_pg.py").read_text(), _gates=(tests / "_gates.py").read_text()
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.timeout(7)
        def test_marked(request):
            assert request.node.get_closest_marker("timeout").args == (28.0,)

        def test_default(request):
            assert request.node.get_closest_marker("timeout").args == (1200.0,)
        """
    )
    monkeypatch.setenv(faults.TIMEOUT_SCALE_VAR, "4")
    result = pytester.runpytest_subprocess("-p", "no:xdist", "--timeout", "300", "-q")
    result.assert_outcomes(passed=2)
