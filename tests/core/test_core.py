"""Property tests of the pure core: digests, ids and the state machine."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from langgraph_effects.core.digest import payload_digest
from langgraph_effects.core.ids import idempotency_key, intent_operation_id, operation_id
from langgraph_effects.core.model import (
    Decision,
    Evidence,
    LeaseOwner,
    OperationStatus,
    ProviderContract,
    Resolution,
)
from langgraph_effects.core.transitions import TRANSITIONS
from langgraph_effects.errors import EffectsError, InvalidInput
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.testing.contract import make_draft
from langgraph_effects.testing.providers import FakeClock

S = OperationStatus

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, min_size=1, max_size=6)


# -- digests ------------------------------------------------------------------------


@given(json_objects, st.randoms(use_true_random=False))
def test_digest_ignores_dict_order(payload: dict[str, Any], random: Any) -> None:
    """The digest of a dict is the same whatever the insertion order of its keys."""
    items = list(payload.items())
    random.shuffle(items)
    assert payload_digest("a", 1, "t", dict(items)) == payload_digest("a", 1, "t", payload)


@given(json_values)
def test_equal_json_values_have_equal_digests(value: Any) -> None:
    """A value and its JSON round trip (a different object, the same JSON) share a digest."""
    copy = json.loads(json.dumps(value))
    assert payload_digest("a", 1, None, copy) == payload_digest("a", 1, None, value)


@given(json_objects, st.text(min_size=1, max_size=8), json_values)
def test_any_changed_field_changes_the_digest(
    payload: dict[str, Any], key: str, value: Any
) -> None:
    """Changing the payload, action, version or target changes the digest."""
    base = payload_digest("a", 1, "t", payload)
    changed = {**payload, key: value}
    if json.dumps(changed, sort_keys=True) != json.dumps(payload, sort_keys=True):
        assert payload_digest("a", 1, "t", changed) != base
    assert payload_digest("b", 1, "t", payload) != base
    assert payload_digest("a", 2, "t", payload) != base
    assert payload_digest("a", 1, "u", payload) != base
    assert payload_digest("a", 1, None, payload) != base


@given(st.sampled_from([float("nan"), float("inf"), {1, 2}, object(), b"x", {1: "int key"}]))
def test_the_digest_refuses_what_is_not_json(bad: Any) -> None:
    """NaN, infinities, sets, bytes, objects and non-string keys raise InvalidInput."""
    try:
        payload_digest("a", 1, None, {"v": bad})
    except InvalidInput:
        return
    raise AssertionError(f"{bad!r} was accepted")


# -- ids ------------------------------------------------------------------------------

id_parts = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=30).filter(
    lambda s: s.strip() != ""
)


@given(id_parts, id_parts, id_parts, id_parts)
def test_operation_ids_are_stable_and_opaque(
    tenant: str, thread: str, call: str, action: str
) -> None:
    """The same inputs give the same id, which contains none of them when they are long."""
    digest = payload_digest(action, 1, None, {"t": tenant})
    kw = {
        "tenant_id": tenant,
        "workflow_id": thread,
        "tool_call_id": call,
        "action": action,
        "payload_digest": digest,
    }
    first = operation_id(**kw)
    assert operation_id(**kw) == first
    assert first.startswith("op-")
    for part in (tenant, thread, call, action):
        if len(part) >= 8:
            assert part not in first
    assert idempotency_key(first) == idempotency_key(first)


@given(id_parts, id_parts, id_parts, id_parts)
def test_ids_differ_when_inputs_differ(a: str, b: str, c: str, d: str) -> None:
    """Two different input tuples never share an id (and joining is unambiguous)."""
    one = intent_operation_id(tenant_id=a, action=b, intent_key=c)
    two = intent_operation_id(tenant_id=a, action=b, intent_key=d)
    assert (one == two) == (c == d)
    assert intent_operation_id(tenant_id=a + "|" + b, action=c, intent_key=d) != (
        intent_operation_id(tenant_id=a, action=b + "|" + c, intent_key=d)
    )


# -- the state machine against the transition table ----------------------------------

OWNER = LeaseOwner(host="h", pid=1, started_at=1.0, nonce="n")
T = "tenant-a"
VERBS = [
    "claim",
    "confirm",
    "reject",
    "reject_prepared",
    "release",
    "mark_unknown",
    "resolve_confirm",
    "resolve_reject",
    "resolve_retry",
    "reconcile_reject",
    "reconcile_inconclusive_reject",
    "evidence",
]


class LedgerMachine(RuleBasedStateMachine):
    """Random verbs, with current or stale tokens, on one operation of an InMemoryLedger."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.ledger = InMemoryLedger(clock=self.clock.now)
        self.ledger.setup()
        self.ledger.prepare(make_draft())
        self.moves: list[tuple[S, S]] = []

    def current(self) -> Any:
        op = self.ledger.get(T, "op-1")
        assert op is not None
        return op

    @rule(verb=st.sampled_from(VERBS), stale=st.booleans())
    def act(self, verb: str, stale: bool) -> None:
        before = self.current()
        token = before.fencing_token - (1 if stale else 0)
        self.clock.advance(1)
        calls = {
            "claim": lambda: self.ledger.claim(T, "op-1", owner=OWNER),
            "confirm": lambda: self.ledger.confirm(T, "op-1", token=token, result={"ok": 1}),
            "reject": lambda: self.ledger.reject(T, "op-1", token=token, reason="no"),
            "reject_prepared": lambda: self.ledger.reject(T, "op-1", token=None, reason="no"),
            "release": lambda: self.ledger.release(T, "op-1", token=token, reason="503"),
            "mark_unknown": lambda: self.ledger.mark_unknown(T, "op-1", token=token, reason="?"),
            "resolve_confirm": lambda: self.ledger.resolve(
                T, "op-1", Resolution(decision=Decision.CONFIRM, by="ops")
            ),
            "resolve_reject": lambda: self.ledger.resolve(
                T, "op-1", Resolution(decision=Decision.REJECT, by="ops")
            ),
            "resolve_retry": lambda: self.ledger.resolve(
                T, "op-1", Resolution(decision=Decision.RETRY, by="ops")
            ),
            "reconcile_reject": lambda: self.ledger.resolve(
                T,
                "op-1",
                Resolution(decision=Decision.REJECT, by="bot", evidence=Evidence.rejected("gone")),
            ),
            "reconcile_inconclusive_reject": lambda: self.ledger.resolve(
                T,
                "op-1",
                Resolution(
                    decision=Decision.REJECT, by="bot", evidence=Evidence.inconclusive("empty")
                ),
            ),
            "evidence": lambda: self.ledger.record_evidence(
                T, "op-1", Evidence.inconclusive("empty")
            ),
        }
        try:
            after = calls[verb]()
        except EffectsError:
            assert self.current() == before  # a refusal changes nothing
            return
        if after.status is not before.status:
            self.moves.append((before.status, after.status))
            assert (before.status, after.status) in TRANSITIONS
        assert not before.status.terminal or after.status is before.status
        assert verb != "reconcile_inconclusive_reject"

    @invariant()
    def events_match_the_row(self) -> None:
        op = self.current()
        events = self.ledger.events(T, "op-1")
        assert len(events) == op.record_version
        assert events[-1].to_status is op.status
        for event in events:
            if event.from_status is not None and event.from_status is not event.to_status:
                assert (event.from_status, event.to_status) in TRANSITIONS
                assert not event.from_status.terminal


LedgerMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
TestLedgerMachine = LedgerMachine.TestCase


def test_an_unvalidated_row_is_the_validated_one() -> None:
    """``unvalidated`` (rows of our own schema on the hot path) builds exactly what
    validation builds: equal, hashed alike, dumped alike, still frozen."""
    from pydantic import ValidationError

    from langgraph_effects.core.model import Operation, unvalidated
    from langgraph_effects.ledger.memory import InMemoryLedger
    from langgraph_effects.testing.contract import OWNER, make_draft

    ledger = InMemoryLedger()
    ledger.setup()
    op = ledger.prepare(make_draft("op-1"), owner=OWNER).operation
    values = {name: getattr(op, name) for name in Operation.model_fields}
    fast = unvalidated(Operation, dict(values))
    assert fast == Operation.model_validate(values) == op
    assert fast.model_dump() == op.model_dump()
    assert fast.model_dump_json() == op.model_dump_json()
    assert fast.key == op.key
    with pytest.raises(ValidationError):
        fast.status = op.status  # type: ignore[misc]


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (
            lambda: ProviderContract(idempotency_window="a day"),
            "ProviderContract: idempotency_window",
        ),
        (lambda: ProviderContract(max_transient_retries=99), "max_transient_retries"),
        (lambda: Evidence.confirmed(123), "Evidence: summary"),
        (lambda: Resolution(decision="maybe", by="ana"), "Resolution: decision"),
    ],
)
def test_a_value_built_from_bad_input_names_the_model_and_the_field(
    build: Callable[[], object], named: str
) -> None:
    """Bad input to a public value raises ``InvalidInput`` (a ``ValueError``) naming the
    model and the field, in one sentence without pydantic's report and links."""
    with pytest.raises(InvalidInput, match=named) as refused:
        build()
    assert "errors.pydantic.dev" not in str(refused.value)
    assert "\n" not in str(refused.value)


def test_an_approval_ref_names_its_approver_and_nothing_else_does() -> None:
    """``approver`` reads back exactly who ``approval_ref`` recorded; any other ref names nobody."""
    from langgraph_effects.core.actors import approval_ref, approver

    assert approval_ref("alice") == "approved-by:alice"
    assert approver(approval_ref("alice")) == "alice"
    assert approver(approval_ref("a:b")) == "a:b"
    assert [approver(ref) for ref in (None, "", "alice", "takeover:x")] == [None] * 4


@given(st.binary(min_size=20, max_size=20))
def test_ids_are_the_hash_in_lower_case_base32(raw: bytes) -> None:
    """An id's 32 letters are the hash's first 20 bytes in RFC 4648 base32, lower case,
    exactly as ``base64.b32encode`` writes them (the ids earlier releases derived)."""
    import base64

    from langgraph_effects.core.ids import _base32_160

    assert _base32_160(raw) == base64.b32encode(raw).decode().lower()


def test_the_records_and_events_the_memory_ledger_writes_validate_as_they_are() -> None:
    """The in-memory ledger's records, events and owners, built unvalidated from validated
    values (``core.model.unvalidated``), equal what validating their fields builds."""
    from langgraph_effects._owners import current_owner
    from langgraph_effects.core.model import Operation, OperationEvent, Prepared

    ledger = InMemoryLedger()
    ledger.setup()
    owner = current_owner()
    assert LeaseOwner.model_validate(owner.model_dump()) == owner
    prepared = ledger.prepare(make_draft("op-1"), owner=owner)
    assert Prepared.model_validate(prepared.model_dump()) == prepared
    op = prepared.operation
    done = ledger.confirm(op.tenant_id, op.operation_id, token=op.fencing_token, result={"ok": 1})
    for record in (op, done):
        assert Operation.model_validate(record.model_dump()) == record
        assert list(record.__dict__) == list(Operation.model_fields)
    events = ledger.events(op.tenant_id, op.operation_id)
    assert [e.kind.value for e in events] == ["prepare", "claim", "confirm"]
    for event in events:
        assert OperationEvent.model_validate(event.model_dump()) == event
