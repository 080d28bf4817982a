"""A ``payload_key`` rotation never re-sends and orphans no record (issue 22, row 8).

``store_payload=False`` keeps a keyed digest, and the digest is part of a call's
identity. Rotated with the old key listed after the new one
(``payload_key=[new, old]``, ``LGE_PAYLOAD_OLD_KEYS``), a call prepared before the
rotation meets its record again (``decide.recognise.recognised``): a receipt lost in a
real kill is settled, not sent again (``tests/kills/test_key_rotation_kill.py``); a
pending approval is still answered; an intent key is no ``PayloadMismatch``. SMS counted
at a file-backed fake.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _graphs import Env
from _rotation_child import PHONE, pin_tool, run

from langgraph_effects.core.digest import payload_digest
from langgraph_effects.effects import effect_spec
from langgraph_effects.errors import InvalidInput
from langgraph_effects.testing.providers import FakeMail

OLD, NEW = "old-" + "3f9a" * 8, "new-" + "77c1" * 8


def sent(mail_path: Path) -> int:
    with FakeMail(mail_path) as mail:
        return mail.effects


def test_an_approval_asked_before_the_rotation_is_answered_after_it(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """Asked under the old key, answered after the rotation: the answer meets the operation
    it was asked for, which is sent once; no second record, nothing asked again."""
    kind, mode, where = backend
    mail_path = str(tmp_path / "mail.db")
    FakeMail(mail_path).close()
    first = run(kind, mode, where, mail_path, [OLD], "approval", True)
    [asked] = first["interrupts"]
    [(op_id, status)] = first["ops"]
    assert (asked["operation_id"], status) == (op_id, "prepared")
    answered = run(kind, mode, where, mail_path, [NEW, OLD], "approval", False)
    assert answered.get("error") is None, answered
    assert answered["ops"] == [(op_id, "confirmed")]
    assert answered["interrupts"] == []
    assert sent(Path(mail_path)) == 1


def test_a_new_call_after_the_rotation_is_digested_under_the_new_key(tmp_path: Path) -> None:
    """The old key only recognises: a call of another thread after the rotation is written
    under the new key, and a record from before it is not told the new key's digest."""
    kind, mode, where = "sqlite", "sync", str(tmp_path / "app.db")
    mail_path = str(tmp_path / "mail.db")
    FakeMail(mail_path).close()
    run(kind, mode, where, mail_path, [OLD], "lost", True)
    run(kind, mode, where, mail_path, [NEW, OLD], "intent", True)
    env = Env(kind, mode, path=Path(where))
    try:
        digests = {op.workflow_id: op.payload_digest for op in env.ops()}
    finally:
        env.close()
    payload = {"phone": PHONE, "attempt_id": "login-7", "pin": "482913"}

    def under(key: str) -> str:
        return payload_digest("sms.send_pin", 1, PHONE, payload, key=key.encode())

    assert digests == {"lost": under(OLD), "intent": under(NEW)}
    assert sent(Path(mail_path)) == 2


def test_without_the_old_key_an_intent_is_refused_naming_the_fix(tmp_path: Path) -> None:
    """The old key dropped too early: the intent's record is met by its key and its digest
    differs, so the call is refused (``PayloadMismatch`` naming the rotation fix), and
    nothing is sent; listing the old key again lets it replay, and only its own payload."""
    mail_path = str(tmp_path / "mail.db")
    where = str(tmp_path / "app.db")
    FakeMail(mail_path).close()
    run("sqlite", "sync", where, mail_path, [OLD], "intent", True)
    rotated = ("sqlite", "sync", where, mail_path, [NEW, OLD], "intent")
    refused = run("sqlite", "sync", where, mail_path, [NEW], "intent", True, thread="t2")
    assert "PayloadMismatch" in refused["error"]
    assert "payload_key=[new, old]" in refused["error"]
    other_pin = run(*rotated, True, "000000", "t3")
    assert "PayloadMismatch" in other_pin["error"]  # the old key recognises only its payload
    again = run(*rotated, True, thread="t4")
    assert again.get("error") is None, again
    assert [s for _, s in again["ops"]] == ["confirmed"]
    assert sent(Path(mail_path)) == 1


def _spec(keys: Any) -> Any:
    with FakeMail() as mail:
        return effect_spec(pin_tool(mail, keys, "intent"))


def test_a_list_of_keys_is_checked_like_one_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each key of the list is checked (length), an empty list is no key, repeats are dropped,
    keys never show in a repr; without a key in code the deployment's keys are read:
    ``LGE_PAYLOAD_KEY`` first, then ``LGE_PAYLOAD_OLD_KEYS`` (comma-separated)."""
    spec = _spec([NEW, OLD, NEW])
    assert (spec.payload_key, spec.older_payload_keys) == (NEW.encode(), (OLD.encode(),))
    assert OLD not in repr(spec)
    assert NEW not in repr(spec)
    with pytest.raises(InvalidInput, match="is 5 bytes"):
        _spec([NEW, "short"])
    with pytest.raises(InvalidInput, match="needs a secret key"):
        _spec([])
    monkeypatch.setenv("LGE_PAYLOAD_KEY", NEW)
    monkeypatch.setenv("LGE_PAYLOAD_OLD_KEYS", f"{OLD},{OLD[::-1]}")
    spec = _spec(None)
    assert (spec.payload_key, spec.older_payload_keys) == (
        NEW.encode(),
        (OLD.encode(), OLD[::-1].encode()),
    )
    monkeypatch.delenv("LGE_PAYLOAD_KEY")
    with pytest.raises(InvalidInput, match="LGE_PAYLOAD_KEY"):
        _spec(None)  # old keys alone are no current key


def test_an_approval_answered_without_the_old_key_is_refused_naming_it(
    backend: tuple[str, str, str], tmp_path: Path
) -> None:
    """Asked under the old key, answered after the old key was dropped: the answer would
    approve a new operation and orphan the asked one; the call is refused
    (``PayloadKeyMissing`` naming the fix), nothing is sent, and the asked record is
    still answered once the old key is listed again."""
    kind, mode, where = backend
    mail_path = str(tmp_path / "mail.db")
    FakeMail(mail_path).close()
    first = run(kind, mode, where, mail_path, [OLD], "approval", True)
    [(op_id, _)] = first["ops"]
    refused = run(kind, mode, where, mail_path, [NEW], "approval", False)
    assert "PayloadKeyMissing" in refused["error"]
    assert op_id in refused["error"]
    assert sent(Path(mail_path)) == 0
    answered = run(kind, mode, where, mail_path, [NEW, OLD], "approval", False)
    assert answered.get("error") is None, answered
    assert answered["ops"] == [(op_id, "confirmed")]
    assert sent(Path(mail_path)) == 1
