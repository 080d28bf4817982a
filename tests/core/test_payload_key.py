"""store_payload=False keeps a keyed digest (HMAC-SHA256): a PIN cannot be brute-forced from it."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Any

import pytest
from _pin_child import send_pin

from langgraph_effects import InMemoryLedger, SQLiteLedger, effect
from langgraph_effects.core.digest import canonical_json, payload_digest
from langgraph_effects.decide import EffectCall
from langgraph_effects.effects import effect_spec
from langgraph_effects.errors import InvalidInput, PayloadMismatch
from langgraph_effects.testing.faults import run_in_child
from langgraph_effects.testing.providers import FakeMail

KEY = "k-" + "3f9a" * 8
PIN = "482913"
PHONE = "+3460000"


def _pin_tool(**kw: Any) -> Any:
    kw.setdefault("store_payload", False)

    @effect("auth.send_pin", target=lambda a: a["phone"], **kw)
    def text_pin(phone: str, attempt_id: str, pin: str) -> str:
        """Text a one-time PIN to a phone."""
        return "sent"

    return text_pin


def _search(digest: str, digest_of: Any) -> str | None:
    """Try every 6-digit PIN the way an attacker holding the ledger row would."""
    for n in range(1_000_000):
        pin = f"{n:06d}"
        if digest_of(pin) == digest:
            return pin
    return None


def _brute_forcers(attempt_id: str) -> tuple[Any, Any]:
    """Fast 'digest of this PIN' functions (plain SHA-256, and HMAC given a key)."""
    envelope = {
        "action": "auth.send_pin",
        "version": 1,
        "target": PHONE,
        "payload": {"phone": PHONE, "attempt_id": attempt_id, "pin": "000000"},
    }
    head, tail = canonical_json(envelope).split(b'"000000"')
    plain = hashlib.sha256(head)

    def sha(pin: str) -> str:
        h = plain.copy()
        h.update(b'"' + pin.encode() + b'"' + tail)
        return h.hexdigest()

    def keyed(key: bytes) -> Any:
        base = hmac.new(key, head, hashlib.sha256)

        def digest(pin: str) -> str:
            h = base.copy()
            h.update(b'"' + pin.encode() + b'"' + tail)
            return "hmac:" + h.hexdigest()

        return digest

    return sha, keyed


def test_store_payload_false_without_a_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Declaring store_payload=False with no key fails naming payload_key and LGE_PAYLOAD_KEY."""
    monkeypatch.delenv("LGE_PAYLOAD_KEY", raising=False)
    with pytest.raises(InvalidInput, match=r"payload_key=.*LGE_PAYLOAD_KEY") as refused:
        _pin_tool()
    assert "'auth.send_pin'" in str(refused.value)
    with pytest.raises(InvalidInput, match="is 5 bytes; use at least 16"):
        _pin_tool(payload_key="short")
    with pytest.raises(InvalidInput, match="payload_key is for store_payload=False"):
        effect("a.b", store_payload=True, payload_key=KEY)
    monkeypatch.setenv("LGE_PAYLOAD_KEY", KEY)
    spec = effect_spec(_pin_tool())
    assert spec is not None
    assert spec.payload_key == KEY.encode()
    assert KEY not in repr(spec)


def test_the_pin_cannot_be_recovered_from_the_ledger_without_the_key(tmp_path: Path) -> None:
    """Brute force over all 10^6 PINs finds the old plain digest but not the keyed one."""
    ledger_path, mail_path = str(tmp_path / "ledger.db"), str(tmp_path / "mail.db")
    out = run_in_child(send_pin, ledger_path, mail_path, "t1", "login-7", PIN, KEY)
    assert out.error is None, out.error
    assert out.value["sent"] == 1
    [(op_id, status, digest)] = out.value["ops"]
    assert status == "confirmed"
    assert digest.startswith("hmac:")
    with SQLiteLedger.from_conn_string(ledger_path) as ledger:
        op = ledger.get("default", op_id)
        assert op is not None
        assert (op.payload, op.payload_stored) == (None, False)
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("ledger.db*"))
    assert PIN.encode() not in raw

    sha, keyed = _brute_forcers("login-7")
    legacy = payload_digest(
        "auth.send_pin", 1, PHONE, {"phone": PHONE, "attempt_id": "login-7", "pin": PIN}
    )
    assert _search(legacy, sha) == PIN  # the attack works on what used to be stored
    assert _search(digest, sha) is None  # and finds nothing in the keyed digest
    assert _search(digest, keyed(KEY.encode())) == PIN  # only the key's holder can test guesses


def test_another_payload_under_the_same_intent_key_is_still_a_mismatch() -> None:
    """Same intent key, another PIN: the keyed digests differ and prepare raises PayloadMismatch."""
    spec = effect_spec(_pin_tool(payload_key=KEY, intent_key=lambda a: a["attempt_id"]))
    assert spec is not None
    ledger = InMemoryLedger()
    ledger.setup()

    def draft(pin: str, call_id: str) -> Any:
        args = {"phone": PHONE, "attempt_id": "login-7", "pin": pin}
        return EffectCall.build(
            spec,
            tool_name="text_pin",
            tool_call_id=call_id,
            args=args,
            tenant_id="acme",
            workflow_id="t1",
        ).draft()

    first = ledger.prepare(draft(PIN, "c1"))
    again = ledger.prepare(draft(PIN, "c2"))
    assert (again.created, again.operation.operation_id) == (False, first.operation.operation_id)
    with pytest.raises(PayloadMismatch):
        ledger.prepare(draft("000000", "c3"))
    assert len(ledger.list(tenant_id="acme")) == 1


def test_a_record_with_a_plain_digest_meets_a_mismatch_that_says_why() -> None:
    """A record from before the policy (plain SHA-256) is refused, not replayed, and named so."""
    ledger = InMemoryLedger()
    ledger.setup()
    args = {"phone": PHONE, "attempt_id": "login-7", "pin": PIN}
    drafts = []
    for tool in (
        _pin_tool(store_payload=True, intent_key="login-7"),
        _pin_tool(payload_key=KEY, intent_key="login-7"),
    ):
        spec = effect_spec(tool)
        assert spec is not None
        call = EffectCall.build(
            spec, tool_name="text_pin", tool_call_id="c1", args=args, tenant_id="t", workflow_id="w"
        )
        drafts.append(call.draft())
    ledger.prepare(drafts[0])
    with pytest.raises(PayloadMismatch, match="store_payload policy changed"):
        ledger.prepare(drafts[1])


def test_the_same_call_is_the_same_operation_after_a_restart(tmp_path: Path) -> None:
    """A fresh process with the same key replays the operation; another key or PIN is refused."""
    ledger_path, mail_path = str(tmp_path / "ledger.db"), str(tmp_path / "mail.db")
    first = run_in_child(send_pin, ledger_path, mail_path, "t1", "login-7", PIN, KEY)
    again = run_in_child(send_pin, ledger_path, mail_path, "t2", "login-7", PIN, KEY)
    assert first.error is None, first.error
    assert again.error is None, again.error
    assert again.value["ops"] == first.value["ops"]
    assert again.value["reply"] == first.value["reply"]
    assert again.value["sent"] == 1
    other_key = run_in_child(send_pin, ledger_path, mail_path, "t3", "login-7", PIN, KEY + "x")
    other_pin = run_in_child(send_pin, ledger_path, mail_path, "t4", "login-7", "000000", KEY)
    for refused in (other_key, other_pin):
        assert refused.error is not None
        assert "PayloadMismatch" in refused.error, refused.error
    mail = FakeMail(mail_path)
    try:
        assert mail.effects == 1
    finally:
        mail.close()
    with SQLiteLedger.from_conn_string(ledger_path) as ledger:
        assert len(ledger.list(tenant_id="default")) == 1
