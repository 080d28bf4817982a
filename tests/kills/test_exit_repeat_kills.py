"""Under ``durability="exit"``, on the faces whose state lists no answers, a run killed after
its answer resumes without a second send, and a later turn asking again acts (issue 22).

``"exit"`` saves a run's end and none of its steps. The faces here (``run_effect`` in the
Functional API, an ``EffectToolNode`` on ``MessagesState``, a worker subgraph fed only the
latest request) keep no list of answers in their state, so a record's own run says where
it was delivered (``core.identity.Run``): a later turn starts from the checkpoint saved at
the first turn's end, which names that run's start as its parent; a run killed after the
answer saved nothing, so the request sent again (all a user can do: ``invoke(None)`` finds
nothing pending) meets the killed run's record again. Counted at a file-backed fake CRM:

    turn 1 (acts: 1)  ->  turn 2 killed after its answer (2)  ->  turn 2 sent again (2)
    ->  turn 3, the same request (3)

A plain ``@task`` / ``ToolNode`` beside it sends on every try: 1, 2, 3, 4.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _exit_repeat_child import FACES, ask

from langgraph_effects.testing.providers import FakeCRM
from langgraph_effects.testing.scenario import run_in_forked_child

BACKENDS = [("sqlite", "sync"), ("sqlite", "async"), ("postgres", "sync"), ("postgres", "async")]


@pytest.mark.parametrize("plain", [False, True], ids=["effects", "control"])
@pytest.mark.parametrize(("kind", "mode"), BACKENDS, ids=[f"{k}-{m}" for k, m in BACKENDS])
@pytest.mark.parametrize("face", FACES)
def test_a_run_killed_after_its_answer_resumes_once_and_a_later_turn_acts(
    request: pytest.FixtureRequest, tmp_path: Path, face: str, kind: str, mode: str, plain: bool
) -> None:
    if plain and (kind, mode) != ("sqlite", "sync"):
        pytest.skip("the control runs on SQLite")
    where = request.getfixturevalue("pg_url") if kind == "postgres" else str(tmp_path / "app.db")
    crm_path = tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    thread = (ask, kind, mode, where, str(crm_path), face, plain)

    def acted() -> int:
        with FakeCRM(crm_path) as crm:
            return crm.effects

    first = run_in_forked_child(*thread, False, "close case A")
    assert first.ok, first.error
    assert acted() == 1
    died = run_in_forked_child(*thread, True, "close case A, please")
    assert died.crashed, died.error
    assert acted() == 2  # the second request acted; its run died before "exit" saved it
    again = run_in_forked_child(*thread, False, "close case A, please")  # sent again
    assert again.ok, again.error
    assert acted() == (3 if plain else 2)  # met the killed run's record: never sent twice
    later = run_in_forked_child(*thread, False, "and close case A once more")
    assert later.ok, later.error
    assert acted() == (4 if plain else 3)  # a deliberate repeat in a later turn acts
    if not plain:
        assert later.value["statuses"] == ["confirmed"] * 3


@pytest.mark.parametrize("plain", [False, True], ids=["effects", "control"])
@pytest.mark.parametrize(
    ("kind", "mode"), [BACKENDS[0], BACKENDS[3]], ids=["sqlite-sync", "postgres-async"]
)
@pytest.mark.parametrize("face", FACES)
def test_a_run_killed_inside_the_provider_call_is_never_taken_for_delivered(
    request: pytest.FixtureRequest, tmp_path: Path, face: str, kind: str, mode: str, plain: bool
) -> None:
    """The CRM applies the second request's closure and the process dies inside the call
    (``Fault.CRASH``): the record stays dispatching, its outcome never recorded. The next
    request proposes nothing (``never mind``) and its run ends in a checkpoint saved at exit
    from the same start; a later request asking again meets the dispatching record (no run
    delivered an answer it never had), which its reconciler confirms: 2 at the CRM, not 3.
    The plain control: 3."""
    from _exit_repeat_child import NEVER_MIND

    from langgraph_effects.testing.providers import Fault

    if plain and (kind, mode) != ("sqlite", "sync"):
        pytest.skip("the control runs on SQLite")
    where = request.getfixturevalue("pg_url") if kind == "postgres" else str(tmp_path / "app.db")
    crm_path = tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    thread = (ask, kind, mode, where, str(crm_path), face, plain, False)
    assert run_in_forked_child(*thread, "close case A").ok
    with FakeCRM(crm_path) as crm:
        crm.faults.push(Fault.CRASH)
    died = run_in_forked_child(*thread, "close case A, please")
    assert died.crashed, died.error
    calm = run_in_forked_child(*thread, NEVER_MIND)
    assert calm.ok, calm.error
    later = run_in_forked_child(*thread, "close case A")
    assert later.ok, later.error
    with FakeCRM(crm_path) as crm:
        assert crm.effects == (3 if plain else 2)
    if not plain:
        assert later.value["statuses"] == ["confirmed"] * 2


@pytest.mark.parametrize("plain", [False, True], ids=["effects", "control"])
@pytest.mark.parametrize(
    ("kind", "mode"), [BACKENDS[0], BACKENDS[3]], ids=["sqlite-sync", "postgres-async"]
)
@pytest.mark.parametrize("face", ["functional", "messages-state"])
def test_a_resumed_run_killed_after_its_answer_is_resumed_again_without_a_second_send(
    request: pytest.FixtureRequest, tmp_path: Path, face: str, kind: str, mode: str, plain: bool
) -> None:
    """Each request stops before it acts, and ``"exit"`` saves the stop; the resume
    (``invoke(None)``, ``Command(resume=...)``) acts and is killed after the answer, so the
    thread stays at the stop. Resumed again from that last saved checkpoint, the same task
    meets its own record: 2 at the CRM, not 3. A third request, resumed, acts (3). The
    plain control: 1, 2, 3, 4."""
    if plain and (kind, mode) != ("sqlite", "sync"):
        pytest.skip("the control runs on SQLite")
    where = request.getfixturevalue("pg_url") if kind == "postgres" else str(tmp_path / "app.db")
    crm_path = tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    thread = (ask, kind, mode, where, str(crm_path), face, plain)

    def acted() -> int:
        with FakeCRM(crm_path) as crm:
            return crm.effects

    for text in ("close case A", None):
        assert run_in_forked_child(*thread, False, text, True).ok
    assert acted() == 1
    assert run_in_forked_child(*thread, False, "close case A again", True).ok  # stops
    died = run_in_forked_child(*thread, True, None, True)  # resumed: acts, killed
    assert died.crashed, died.error
    assert acted() == 2
    again = run_in_forked_child(*thread, False, None, True)  # resumed again from the stop
    assert again.ok, again.error
    assert acted() == (3 if plain else 2)
    for text in ("and once more", None):
        later = run_in_forked_child(*thread, False, text, True)
        assert later.ok, later.error
    assert acted() == (4 if plain else 3)
    if not plain:
        assert later.value["statuses"] == ["confirmed"] * 3
