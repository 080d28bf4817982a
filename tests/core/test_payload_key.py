"""store_payload=False keeps a keyed digest (HMAC-SHA256): a PIN cannot be brute-forced from it.

The declarations and digests, in process. Through a real graph in fresh processes (the key
read from ``LGE_PAYLOAD_KEY`` as in a deployment, a restart replaying the operation):
``tests/kills/test_payload_key_restart.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from langgraph_effects import InMemoryLedger, effect
from langgraph_effects.decide import EffectCall
from langgraph_effects.effects import effect_spec
from langgraph_effects.errors import InvalidInput, PayloadMismatch

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
