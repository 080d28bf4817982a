"""A PIN sent with store_payload=False, through a real graph in fresh processes.

Each run is a new process (``run_in_forked_child``) that reads the digest key from
``LGE_PAYLOAD_KEY``, as a deployment does: the ledger file holds no PIN and no
digest an attacker can brute-force without the key, and a restart with the same
key replays the operation while another key or PIN is refused. The declarations
themselves: ``tests/core/test_payload_key.py``.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Any

from _pin_child import send_pin

from langgraph_effects import SQLiteLedger
from langgraph_effects.core.digest import canonical_json, payload_digest
from langgraph_effects.testing.providers import FakeMail
from langgraph_effects.testing.scenario import run_in_forked_child

KEY = "k-" + "3f9a" * 8
PIN = "482913"
PHONE = "+3460000"


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


def test_the_pin_cannot_be_recovered_from_the_ledger_without_the_key(tmp_path: Path) -> None:
    """Brute force over all 10^6 PINs finds the old plain digest but not the keyed one."""
    ledger_path, mail_path = str(tmp_path / "ledger.db"), str(tmp_path / "mail.db")
    out = run_in_forked_child(send_pin, ledger_path, mail_path, "t1", "login-7", PIN, KEY)
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


def test_the_same_call_is_the_same_operation_after_a_restart(tmp_path: Path) -> None:
    """A fresh process with the same key replays the operation; another key or PIN is refused."""
    ledger_path, mail_path = str(tmp_path / "ledger.db"), str(tmp_path / "mail.db")
    first = run_in_forked_child(send_pin, ledger_path, mail_path, "t1", "login-7", PIN, KEY)
    again = run_in_forked_child(send_pin, ledger_path, mail_path, "t2", "login-7", PIN, KEY)
    assert first.error is None, first.error
    assert again.error is None, again.error
    assert again.value["ops"] == first.value["ops"]
    assert again.value["reply"] == first.value["reply"]
    assert again.value["sent"] == 1
    other_key = run_in_forked_child(
        send_pin, ledger_path, mail_path, "t3", "login-7", PIN, KEY + "x"
    )
    other_pin = run_in_forked_child(
        send_pin, ledger_path, mail_path, "t4", "login-7", "000000", KEY
    )
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
