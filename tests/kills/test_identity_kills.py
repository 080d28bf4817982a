"""Identity across real process kills (issue 22): the provider acts, the process dies.

1. LangGraph's default durability (or ``"exit"``) loses the AIMessage with the
   process; the user sends the request again and the model proposes the call with a
   new id: the earlier operation is met (its answer never reached this timeline) and
   settled by its reconciler, never sent twice. A plain ``ToolNode`` sends twice.
2. A trimmed thread (``RemoveMessage``) asks again after the first answer: a new
   operation, acting once more; the process dies after the provider acted, and the
   resume in a fresh process settles it without a third send. A ``ToolNode`` sends a
   third time.
3. Two identical calls without an id in one AIMessage (one task for both under
   ``tools_condition``, a task per call under ``route_tool_calls`` and ``create_agent``
   with ``EffectMiddleware``): the process dies as the provider acts on the first; the
   resume re-runs the task(s), and each call meets its own record once: two effects,
   both settled. A ``ToolNode`` sends again.
4. 300 identical calls with distinct ids in one AIMessage (the same request asked for
   300 times): the process dies as the CRM acts on the 151st; the resume in a fresh
   process settles every one, none sent twice: 300 effects in all, one prepare per call
   at most. A ``ToolNode`` sends the task's calls again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _identity_child import many_twins, turn

from langgraph_effects.testing.providers import FakeCRM, Fault
from langgraph_effects.testing.scenario import run_in_forked_child

EFFECTS = [("sqlite", "sync", False), ("postgres", "async", False), ("sqlite", "sync", True)]
"""The effect on both backends (sync, async: each child costs a run), the control once."""


def _where(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> str:
    return request.getfixturevalue("pg_url") if kind == "postgres" else str(tmp_path / "app.db")


@pytest.mark.parametrize("durability", [None, "exit"], ids=["default-durability", "exit"])
@pytest.mark.parametrize(
    ("kind", "mode", "plain"), EFFECTS, ids=[f"{k}-{m}{'-toolnode' * p}" for k, m, p in EFFECTS]
)
def test_a_request_re_sent_after_a_lost_aimessage_meets_its_operation(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    kind: str,
    mode: str,
    plain: bool,
    durability: str | None,
) -> None:
    if durability == "exit" and (kind, mode) != ("sqlite", "sync"):
        pytest.skip("durability='exit' is exercised on one backend")
    where, crm_path = _where(request, kind, tmp_path), tmp_path / "crm.db"
    with FakeCRM(crm_path) as crm:
        crm.faults.push(Fault.CRASH)
    ask = (turn, kind, mode, where, str(crm_path), plain, "close case A", False, durability)
    died = run_in_forked_child(*ask)
    assert died.crashed, died.error
    again = run_in_forked_child(*ask)  # the user sends the request again
    assert again.ok, again.error
    with FakeCRM(crm_path) as crm:
        assert crm.effects == (2 if plain else 1)
    if not plain:
        assert again.value["statuses"] == ["confirmed"]


@pytest.mark.parametrize(
    ("kind", "mode", "plain"), EFFECTS, ids=[f"{k}-{m}{'-toolnode' * p}" for k, m, p in EFFECTS]
)
def test_a_trimmed_thread_asking_again_acts_once_more_across_a_kill(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str, mode: str, plain: bool
) -> None:
    where, crm_path = _where(request, kind, tmp_path), tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    thread = (turn, kind, mode, where, str(crm_path), plain)
    first = run_in_forked_child(*thread, "close case A", True)
    assert first.ok, first.error
    with FakeCRM(crm_path) as crm:
        crm.faults.push(Fault.CRASH)
    died = run_in_forked_child(*thread, "close case A again", True)
    assert died.crashed, died.error
    resumed = run_in_forked_child(*thread, None, True)  # a fresh process resumes the thread
    assert resumed.ok, resumed.error
    with FakeCRM(crm_path) as crm:
        assert crm.effects == (3 if plain else 2)
    if not plain:
        assert resumed.value["statuses"] == ["confirmed", "confirmed"]


TWIN_FACES = [
    (face, *effects)
    for face in ("tools_condition", "route_tool_calls", "create_agent")
    for effects in EFFECTS
    if face != "route_tool_calls" or not effects[2]  # its control is tools_condition's ToolNode
]
"""Each face on both backends; the plain control under tools_condition and create_agent."""


@pytest.mark.parametrize(
    ("face", "kind", "mode", "plain"),
    TWIN_FACES,
    ids=[f"{f}-{k}-{m}{'-plain' * p}" for f, k, m, p in TWIN_FACES],
)
def test_two_id_less_twins_killed_mid_task_resume_to_two_effects(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str, mode: str, plain: bool, face: str
) -> None:
    where, crm_path = _where(request, kind, tmp_path), tmp_path / "crm.db"
    with FakeCRM(crm_path) as crm:
        crm.faults.push(Fault.CRASH)
    thread = (turn, kind, mode, where, str(crm_path), plain)
    died = run_in_forked_child(*thread, "close case A twice", False, "sync", True, face)
    assert died.crashed, died.error
    # The same task(s), re-run.
    resumed = run_in_forked_child(*thread, None, False, "sync", True, face)
    assert resumed.ok, resumed.error
    with FakeCRM(crm_path) as crm:
        if plain:
            assert crm.effects > 2  # the killed call (at least) is sent again
        else:
            assert crm.effects == 2
    if not plain:
        assert resumed.value["statuses"] == ["confirmed", "confirmed"]


MANY_FACES = [
    ("tools_condition", "sqlite", "sync", False),
    ("tools_condition", "postgres", "async", False),
    ("route_tool_calls", "sqlite", "sync", False),
    ("route_tool_calls", "postgres", "async", False),
    ("tools_condition", "sqlite", "sync", True),
]
"""Both faces on both backends; the plain ``ToolNode`` control once."""
MANY = 300


@pytest.mark.parametrize(
    ("face", "kind", "mode", "plain"),
    MANY_FACES,
    ids=[f"{f}-{k}-{m}{'-toolnode' * p}" for f, k, m, p in MANY_FACES],
)
def test_300_identical_calls_killed_mid_batch_resume_to_300_effects(
    request: pytest.FixtureRequest, tmp_path: Path, face: str, kind: str, mode: str, plain: bool
) -> None:
    where, crm_path = _where(request, kind, tmp_path), tmp_path / "crm.db"
    with FakeCRM(crm_path) as crm:
        crm.faults.script([None] * (MANY // 2) + [Fault.CRASH])  # the 151st act kills it
    twins = (many_twins, kind, mode, where, str(crm_path), plain, face, MANY)
    died = run_in_forked_child(*twins, True, timeout=300)
    assert died.crashed, died.error
    with FakeCRM(crm_path) as crm:
        assert crm.effects == MANY // 2 + 1
    resumed = run_in_forked_child(*twins, False, timeout=300)  # a fresh process resumes
    assert resumed.ok, resumed.error
    with FakeCRM(crm_path) as crm:
        if plain:
            assert crm.effects > MANY  # the task's calls are sent again
            return
        assert crm.effects == MANY
    assert resumed.value["statuses"] == {"confirmed": MANY}
    assert resumed.value["answers"] == MANY
    assert resumed.value["prepares"] <= MANY  # each call meets its own record at its start
