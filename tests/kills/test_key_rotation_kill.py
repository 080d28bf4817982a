"""A receipt lost in a real kill before a ``payload_key`` rotation is settled after it.

Killed between the provider and the receipt under the old key, resumed in a new
process with ``payload_key=[new, old]``: the call meets its old record, reconciles it
and sends nothing (issue 22, row 8). The rest of the rotation, in one process:
``tests/decide/test_key_rotation.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _rotation_child import run

from langgraph_effects.testing.providers import FakeMail, Fault
from langgraph_effects.testing.scenario import run_in_forked_child

OLD, NEW = "old-" + "3f9a" * 8, "new-" + "77c1" * 8
MODES = [("sqlite", "sync"), ("sqlite", "async"), ("postgres", "sync"), ("postgres", "async")]


def sent(mail_path: Path) -> int:
    with FakeMail(mail_path) as mail:
        return mail.effects


# Each backend with the default identity; an intent key on one sync and one async backend
# (two child processes a case: the kills are what costs).
KILLED = [(*m, "lost") for m in MODES] + [
    ("sqlite", "sync", "intent"),
    ("postgres", "async", "intent"),
]


@pytest.mark.parametrize("case", KILLED, ids=lambda c: "-".join(c))
def test_a_receipt_lost_before_the_rotation_is_settled_after_it(
    case: tuple[str, str, str], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Killed between the provider and the receipt under the old key; a new process with
    ``[new, old]`` meets the old record, reconciles it confirmed and sends nothing: one
    SMS, one record, settled (with an intent key too: no ``PayloadMismatch``)."""
    kind, mode, flavour = case
    where = request.getfixturevalue("pg_url") if kind == "postgres" else str(tmp_path / "app.db")
    mail_path = tmp_path / "mail.db"
    with FakeMail(mail_path) as mail:
        mail.faults.push(Fault.CRASH)  # applies, then kills the calling process
    died = run_in_forked_child(run, kind, mode, where, str(mail_path), [OLD], flavour, True)
    assert died.crashed, died.error
    resumed = run_in_forked_child(
        run, kind, mode, where, str(mail_path), [NEW, OLD], flavour, False
    )
    assert resumed.ok, resumed.error
    assert "error" not in resumed.value, resumed.value["error"]
    [(_, status)] = resumed.value["ops"]
    assert status == "confirmed"
    assert sent(mail_path) == 1


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(m))
def test_a_resume_without_the_old_key_is_refused_naming_it_and_sends_nothing(
    mode: tuple[str, str], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The old key dropped before the record settled (issue 22, row 8): the resumed task's
    call derives another id, but its own record is found open (its task and tool call,
    another keyed digest): refused with ``PayloadKeyMissing`` naming the fix, nothing
    written or sent. With the old key listed again: settled, one SMS, one record."""
    kind, mode_ = mode
    where = request.getfixturevalue("pg_url") if kind == "postgres" else str(tmp_path / "app.db")
    mail_path = tmp_path / "mail.db"
    with FakeMail(mail_path) as mail:
        mail.faults.push(Fault.CRASH)
    died = run_in_forked_child(run, kind, mode_, where, str(mail_path), [OLD], "lost", True)
    assert died.crashed, died.error
    refused = run_in_forked_child(run, kind, mode_, where, str(mail_path), [NEW], "lost", False)
    assert refused.ok, refused.error
    assert "PayloadKeyMissing" in refused.value["error"]
    assert "payload_key=[new, old]" in refused.value["error"]
    assert sent(mail_path) == 1
    fixed = run_in_forked_child(run, kind, mode_, where, str(mail_path), [NEW, OLD], "lost", False)
    assert fixed.ok, fixed.error
    assert "error" not in fixed.value, fixed.value["error"]
    assert [s for _, s in fixed.value["ops"]] == ["confirmed"]
    assert sent(mail_path) == 1
