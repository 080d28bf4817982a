"""LangGraph's re-run paths with real process deaths, counted at a file-backed fake CRM.

LangGraph's default durability ("async", no ``durability=`` passed) may lose the
checkpoint holding the AIMessage when the process dies; the model then proposes
the call again with a new tool-call id. A person's answer applied just before a
death is handed back to the re-run task by LangGraph. Neither may reach the
provider twice. The CRM honours no idempotency key: every send is an effect.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _rerun_child import run

from langgraph_effects.testing.faults import CrashPoint
from langgraph_effects.testing.providers import FakeCRM, Fault
from langgraph_effects.testing.scenario import run_in_forked_child

# Each backend and each mode once (test_answers_and_identity.py runs all four in-process).
BACKENDS = [("sqlite", "sync"), ("postgres", "async")]


def step(backend: tuple[str, str, str], crm_path: Path, name: str, **crash: Any) -> Any:
    kind, mode, where = backend
    return run_in_forked_child(run, kind, mode, where, str(crm_path), name, **crash)


def effects(crm_path: Path) -> int:
    with FakeCRM(crm_path) as crm:
        return crm.effects


def test_killed_after_the_provider_acted_then_sent_again(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """Default durability, killed right after the CRM applied: whether the AIMessage was
    saved or not, resuming and sending the request again never closes the case twice."""
    crm_path = tmp_path / "crm.db"
    with FakeCRM(crm_path) as crm:
        crm.faults.push(Fault.CRASH)
    died = step(backend, crm_path, "send")
    assert died.crashed, died.error
    assert effects(crm_path) == 1
    resumed = step(backend, crm_path, "resume")
    assert resumed.ok, resumed.error
    again = step(backend, crm_path, "send")  # the user asks again, the model re-issues
    assert again.ok, again.error
    assert effects(crm_path) == 1
    assert again.value["statuses"] == ["unknown"]  # no reconciler: a person decides
    assert [i["kind"] for i in again.value["interrupts"]] == ["effect_review"]


def test_an_answer_applied_before_a_death_is_not_applied_again(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """Review -> retry -> killed after the resend reached the CRM -> resume in a new
    process: LangGraph hands the retry back; it is recognised, not sent a third time."""
    crm_path = tmp_path / "crm.db"
    with FakeCRM(crm_path) as crm:
        crm.faults.script([Fault.LOSE_RESPONSE, Fault.CRASH])
    first = step(backend, crm_path, "send")
    assert first.ok, first.error
    assert [i["kind"] for i in first.value["interrupts"]] == ["effect_review"]
    died = step(backend, crm_path, "retry")
    assert died.crashed, died.error
    assert effects(crm_path) == 2  # the first send and the ordered resend
    resumed = step(backend, crm_path, "resume-no-tenant")
    assert resumed.ok, resumed.error
    assert effects(crm_path) == 2
    assert resumed.value["statuses"] == ["unknown"]
    rejected = step(backend, crm_path, "reject")
    assert rejected.ok, rejected.error
    assert effects(crm_path) == 2
    assert rejected.value["statuses"] == ["rejected"]
    assert rejected.value["interrupts"] == []


def test_a_crash_point_after_the_claim_with_default_durability(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """Killed after the claim, before the CRM heard anything: the re-issued call meets the
    same operation and sends once."""
    crm_path = tmp_path / "crm.db"
    FakeCRM(crm_path).close()
    died = step(backend, crm_path, "send", crash_at=CrashPoint.AFTER_CLAIM)
    assert died.crashed, died.error
    again = step(backend, crm_path, "send")
    assert again.ok, again.error
    assert effects(crm_path) <= 1
    assert len(again.value["statuses"]) == 1
