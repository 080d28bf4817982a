"""The ledger contract suite: the behaviour every ``Ledger`` must show, as pytest tests.

Third-party ledgers run it by subclassing ``LedgerContract`` in a test module
and providing one fixture, ``open_ledger``: a callable that takes a clock and
returns a ledger *not yet set up* over the test's storage. Calling it twice
must open the same storage again (a new connection or pool): that is how
persistence is checked. Set ``durable = False`` for a ledger that keeps
nothing (the persistence test is then skipped)::

    class TestMyLedger(LedgerContract):
        @pytest.fixture
        def open_ledger(self, tmp_path):
            return lambda clock: MyLedger(tmp_path / "db", clock=clock)

An ``AsyncLedger`` runs the same tests through ``SyncFacade``, which drives
each coroutine to completion on one event loop (``asyncio.Runner``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, cast

import pytest

from langgraph_effects.core.digest import payload_digest
from langgraph_effects.core.model import (
    Decision,
    EventKind,
    Evidence,
    LeaseOwner,
    Operation,
    OperationDraft,
    OperationStatus,
    Resolution,
)
from langgraph_effects.core.plan import key_expires_at, recorded_contract, retry_allowed
from langgraph_effects.errors import (
    IllegalTransition,
    InvalidInput,
    LeaseHeld,
    LedgerNotSetUp,
    OperationNotFound,
    PayloadMismatch,
    StaleFencingToken,
)
from langgraph_effects.ledger.base import AsyncLedger, Confirmation, Ledger
from langgraph_effects.testing.providers.clocks import FakeClock

__all__ = ["LedgerContract", "SyncFacade", "make_draft"]

S = OperationStatus
LEASE = timedelta(seconds=30)
START = datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
"""The ledger clock's first reading: microseconds too, so each backend must keep them."""


class SyncFacade:
    """A synchronous view of an ``AsyncLedger``: each call runs on ``runner``'s loop."""

    def __init__(self, ledger: AsyncLedger, runner: asyncio.Runner) -> None:
        self.ledger = ledger
        self.runner = runner

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.ledger, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.runner.run(method(*args, **kwargs))

        return call

    @classmethod
    def wrap(cls, ledger: AsyncLedger, runner: asyncio.Runner) -> Ledger:
        """An async ledger seen as a sync ``Ledger``, its coroutines run on ``runner``."""
        return cast(Ledger, cls(ledger, runner))


def make_draft(
    operation_id: str = "op-1",
    *,
    tenant_id: str = "tenant-a",
    action: str = "crm.create_contact",
    payload: Any = None,
    **extra: Any,
) -> OperationDraft:
    """A valid draft whose digest matches its payload."""
    payload = {"email": "ada@example.com"} if payload is None else payload
    return OperationDraft(
        tenant_id=tenant_id,
        operation_id=operation_id,
        action=action,
        payload=payload,
        payload_digest=payload_digest(action, 1, extra.get("target"), payload),
        idempotency_key=f"lge-{operation_id}",
        **extra,
    )


OWNER = LeaseOwner(host="worker-1", pid=101, started_at=1.0, nonce="aaaa")
OTHER = LeaseOwner(host="worker-2", pid=202, started_at=2.0, nonce="bbbb")
T = "tenant-a"


class LedgerContract:
    """The contract of ``ledger.base``, checked against a real backend."""

    durable: ClassVar[bool] = True

    @pytest.fixture
    def clock(self) -> FakeClock:
        """The ledger's clock: a ``FakeClock`` the tests move by hand (the ledger reads
        ``clock.now()``)."""
        return FakeClock(START)

    @pytest.fixture
    def open_ledger(self) -> Callable[[Callable[[], datetime]], Ledger]:
        """Override: return a function that opens a fresh, empty ledger on the given clock."""
        raise NotImplementedError("subclasses provide open_ledger(clock) -> Ledger")

    @pytest.fixture
    def ledger(
        self, open_ledger: Callable[[Callable[[], datetime]], Ledger], clock: FakeClock
    ) -> Ledger:
        """A fresh ledger from ``open_ledger``, set up."""
        ledger = open_ledger(clock.now)
        ledger.setup()
        return ledger

    # -- helpers ------------------------------------------------------------------

    @staticmethod
    def dispatching(ledger: Ledger, op_id: str = "op-1", **kw: Any) -> Operation:
        """A new operation, prepared already claimed by ``OWNER`` (status ``dispatching``)."""
        return ledger.prepare(make_draft(op_id, **kw), owner=OWNER, lease_for=LEASE).operation

    @staticmethod
    def unknown(ledger: Ledger, op_id: str = "op-1") -> Operation:
        """A new operation, claimed and then marked ``unknown`` (a timeout)."""
        op = ledger.prepare(make_draft(op_id), owner=OWNER, lease_for=LEASE).operation
        return ledger.mark_unknown(T, op_id, token=op.fencing_token, reason="timeout")

    @staticmethod
    def assert_consistent(ledger: Ledger, op: Operation) -> None:
        """Assert the event log matches the record: one event per version, ending in its status."""
        events = ledger.events(op.tenant_id, op.operation_id)
        assert [e.seq for e in events] == list(range(1, op.record_version + 1))
        assert events[-1].to_status is op.status

    # -- setup ----------------------------------------------------------------------

    def test_setup_is_idempotent(self, ledger: Ledger) -> None:
        """A second setup() changes nothing and the ledger keeps working."""
        ledger.prepare(make_draft())
        ledger.setup()
        op = ledger.get(T, "op-1")
        assert op is not None
        assert op.status is S.PREPARED

    def test_use_before_setup_says_to_call_setup(
        self, open_ledger: Callable[[Callable[[], datetime]], Ledger], clock: FakeClock
    ) -> None:
        """Any call before setup() raises LedgerNotSetUp naming setup()."""
        ledger = open_ledger(clock.now)
        with pytest.raises(LedgerNotSetUp, match=r"setup\(\)"):
            ledger.get(T, "op-1")
        with pytest.raises(LedgerNotSetUp):
            ledger.prepare(make_draft())

    # -- prepare --------------------------------------------------------------------

    def test_prepare_writes_a_prepared_row_and_one_event(
        self, ledger: Ledger, clock: FakeClock
    ) -> None:
        """prepare inserts a prepared row with every draft field and one prepare event."""
        draft = make_draft(
            workflow_id="thread-1",
            target="contact:ada",
            tool_call_id="call-1",
            key_retention_seconds=86100.5,
            origin='[{"task":"t1","call":"call-1","steps":[["","c1"]]}]',
        )
        prepared = ledger.prepare(draft)
        op = prepared.operation
        assert prepared.created
        assert (op.status, op.attempts, op.fencing_token) == (S.PREPARED, 0, 0)
        assert op.record_version == 1
        for name, value in draft.model_dump().items():
            assert getattr(op, name) == value, name
        assert op.created_at == op.updated_at == op.status_changed_at == clock.now()
        assert op.created_at.utcoffset() == timedelta(0)
        assert ledger.get(T, "op-1") == op
        (event,) = ledger.events(T, "op-1")
        assert (event.kind, event.from_status, event.to_status) == (
            EventKind.PREPARE,
            None,
            S.PREPARED,
        )

    def test_prepare_again_returns_the_row_unchanged(
        self, ledger: Ledger, clock: FakeClock
    ) -> None:
        """A second prepare of the same key and digest returns the stored row, created=False."""
        first = ledger.prepare(make_draft()).operation
        clock.advance(5)
        again = ledger.prepare(make_draft(), owner=OWNER)
        assert not again.created
        assert again.operation == first
        assert len(ledger.events(T, "op-1")) == 1

    def test_prepare_with_another_payload_raises_and_overwrites_nothing(
        self, ledger: Ledger
    ) -> None:
        """The same key with another payload digest raises PayloadMismatch; the row stays."""
        first = ledger.prepare(make_draft(payload={"email": "ada@example.com"})).operation
        with pytest.raises(PayloadMismatch) as info:
            ledger.prepare(make_draft(payload={"email": "eve@example.com"}))
        assert info.value.expected == first.payload_digest
        assert ledger.get(T, "op-1") == first

    def test_prepare_with_owner_claims_in_one_go(self, ledger: Ledger, clock: FakeClock) -> None:
        """prepare(owner=...) inserts the row dispatching, token 1, attempt 1, with two events."""
        op = ledger.prepare(make_draft(), owner=OWNER, lease_for=LEASE).operation
        assert (op.status, op.fencing_token, op.attempts, op.record_version) == (
            S.DISPATCHING,
            1,
            1,
            2,
        )
        assert op.lease_owner == OWNER.encode()
        assert op.lease_expires_at == clock.now() + LEASE
        assert op.first_dispatched_at == op.last_dispatched_at == clock.now()
        events = ledger.events(T, "op-1")
        assert [(e.kind, e.from_status, e.to_status) for e in events] == [
            (EventKind.PREPARE, None, S.PREPARED),
            (EventKind.CLAIM, S.PREPARED, S.DISPATCHING),
        ]
        assert events[1].actor == OWNER.encode()
        assert events[1].fencing_token == 1

    def test_prepare_many_is_all_or_nothing(self, ledger: Ledger) -> None:
        """One mismatching draft fails the whole batch: no other draft is written."""
        ledger.prepare(make_draft("op-1", payload={"n": 1}))
        with pytest.raises(PayloadMismatch):
            ledger.prepare_many(
                [make_draft("op-2"), make_draft("op-1", payload={"n": 2}), make_draft("op-3")]
            )
        assert ledger.get(T, "op-2") is None
        assert ledger.get(T, "op-3") is None

    def test_prepare_many_creates_each_once(self, ledger: Ledger) -> None:
        """A batch creates new drafts, returns existing ones and counts a repeat as existing."""
        ledger.prepare(make_draft("op-1"))
        out = ledger.prepare_many(
            [make_draft("op-1"), make_draft("op-2"), make_draft("op-3"), make_draft("op-2")],
            owner=OWNER,
        )
        assert [p.created for p in out] == [False, True, True, False]
        assert [p.operation.status for p in out] == [
            S.PREPARED,
            S.DISPATCHING,
            S.DISPATCHING,
            S.DISPATCHING,
        ]
        assert out[1].operation == out[3].operation
        for p in out:
            self.assert_consistent(ledger, p.operation)

    # -- approve ------------------------------------------------------------------

    def test_approve_binds_to_the_payload_digest(self, ledger: Ledger) -> None:
        """An approval for another digest is refused; the right one is recorded with who."""
        op = ledger.prepare(make_draft()).operation
        with pytest.raises(PayloadMismatch):
            ledger.approve(T, "op-1", payload_digest="0" * 64, by="alice")
        assert ledger.get(T, "op-1") == op
        approved = ledger.approve(
            T, "op-1", payload_digest=op.payload_digest, by="alice", reason="ok"
        )
        assert approved.authorization_ref == "approved-by:alice"
        assert approved.status is S.PREPARED
        event = ledger.events(T, "op-1")[-1]
        assert (event.kind, event.actor, event.detail) == (
            EventKind.APPROVE,
            "alice",
            {"reason": "ok"},
        )
        with pytest.raises(InvalidInput):
            ledger.approve(T, "op-1", payload_digest=op.payload_digest, by="  ")

    def test_approve_after_claim_is_a_no_op_and_refused_when_terminal(self, ledger: Ledger) -> None:
        """Approving a claimed operation returns it unchanged; a terminal one is illegal."""
        op = self.dispatching(ledger)
        assert ledger.approve(T, "op-1", payload_digest=op.payload_digest, by="alice") == op
        done = ledger.confirm(T, "op-1", token=op.fencing_token)
        with pytest.raises(IllegalTransition):
            ledger.approve(T, "op-1", payload_digest=op.payload_digest, by="alice")
        assert ledger.get(T, "op-1") == done

    # -- claim and renew ----------------------------------------------------------

    def test_claim_takes_the_lease_with_the_next_token(
        self, ledger: Ledger, clock: FakeClock
    ) -> None:
        """claim moves prepared to dispatching with a lease, token + 1 and attempts + 1."""
        ledger.prepare(make_draft())
        clock.advance(1)
        op = ledger.claim(T, "op-1", owner=OWNER, lease_for=LEASE, actor="runner-x")
        assert (op.status, op.fencing_token, op.attempts) == (S.DISPATCHING, 1, 1)
        assert op.lease_expires_at == clock.now() + LEASE
        event = ledger.events(T, "op-1")[-1]
        assert (event.kind, event.from_status, event.actor) == (
            EventKind.CLAIM,
            S.PREPARED,
            "runner-x",
        )
        self.assert_consistent(ledger, op)

    def test_claim_of_a_dispatching_operation_raises_lease_held(self, ledger: Ledger) -> None:
        """A second claim while dispatching raises LeaseHeld naming the owner; nothing changes."""
        op = self.dispatching(ledger)
        with pytest.raises(LeaseHeld) as info:
            ledger.claim(T, "op-1", owner=OTHER)
        assert info.value.owner == OWNER.encode()
        assert ledger.get(T, "op-1") == op

    def test_claim_of_a_missing_operation_raises_not_found(self, ledger: Ledger) -> None:
        """Claiming an id that was never prepared raises OperationNotFound."""
        with pytest.raises(OperationNotFound):
            ledger.claim(T, "nope", owner=OWNER)

    def test_claim_from_unknown_is_a_retry(self, ledger: Ledger) -> None:
        """unknown -> dispatching records the status it left and fences the old holder."""
        self.unknown(ledger)
        op = ledger.claim(T, "op-1", owner=OTHER)
        assert (op.status, op.fencing_token, op.attempts) == (S.DISPATCHING, 3, 2)
        assert ledger.events(T, "op-1")[-1].from_status is S.UNKNOWN

    def test_renew_extends_a_live_lease_without_an_event(
        self, ledger: Ledger, clock: FakeClock
    ) -> None:
        """renew moves lease_expires_at from now, keeps the version and writes no event."""
        op = self.dispatching(ledger)
        clock.advance(20)
        renewed = ledger.renew(T, "op-1", token=op.fencing_token, lease_for=LEASE)
        assert renewed.lease_expires_at == clock.now() + LEASE
        assert renewed.record_version == op.record_version
        assert len(ledger.events(T, "op-1")) == 2
        with pytest.raises(StaleFencingToken):
            ledger.renew(T, "op-1", token=op.fencing_token + 1)

    def test_renew_after_release_is_illegal(self, ledger: Ledger) -> None:
        """A released lease cannot be renewed, even with the current token."""
        op = self.dispatching(ledger)
        released = ledger.release(T, "op-1", token=op.fencing_token, reason="429")
        with pytest.raises(IllegalTransition):
            ledger.renew(T, "op-1", token=op.fencing_token)
        assert ledger.get(T, "op-1") == released

    # -- fenced moves out of dispatching ------------------------------------------

    def test_confirm_records_the_receipt(self, ledger: Ledger, clock: FakeClock) -> None:
        """confirm stores result and provider ids, clears the lease and stamps resolved_at."""
        op = self.dispatching(ledger)
        clock.advance(2)
        done = ledger.confirm(
            T,
            "op-1",
            token=op.fencing_token,
            result={"id": 42, "tags": ["a", "é"], "ok": True, "x": 1.5},
            provider_result_id="c_42",
            provider_request_id="req_1",
        )
        assert done.status is S.CONFIRMED
        assert done.result == {"id": 42, "tags": ["a", "é"], "ok": True, "x": 1.5}
        assert (done.provider_result_id, done.provider_request_id) == ("c_42", "req_1")
        assert (done.lease_owner, done.lease_expires_at) == (None, None)
        assert done.resolved_at == done.updated_at == clock.now()
        assert done.evidence_checked_at is None
        assert ledger.get(T, "op-1") == done
        event = ledger.events(T, "op-1")[-1]
        assert (event.kind, event.actor, event.fencing_token) == (EventKind.CONFIRM, "receipt", 1)
        self.assert_consistent(ledger, done)

    def test_confirm_with_evidence_records_it(self, ledger: Ledger, clock: FakeClock) -> None:
        """Evidence given with a confirm is logged and stamps evidence_checked_at."""
        op = self.dispatching(ledger)
        evidence = Evidence.confirmed("found by key", provider_result_id="c_1", source="lookup")
        done = ledger.confirm(T, "op-1", token=op.fencing_token, evidence=evidence)
        assert done.evidence_checked_at == clock.now()
        event = ledger.events(T, "op-1")[-1]
        assert (event.actor, event.evidence) == ("lookup", evidence)

    def test_a_stale_token_is_refused_and_counted(self, ledger: Ledger) -> None:
        """After mark_unknown and a re-claim the old token confirms nothing and is counted."""
        old = self.dispatching(ledger)
        ledger.mark_unknown(T, "op-1", token=old.fencing_token, reason="timeout")
        current = ledger.claim(T, "op-1", owner=OTHER)
        with pytest.raises(StaleFencingToken) as info:
            ledger.confirm(T, "op-1", token=old.fencing_token, result={"late": True})
        assert (info.value.token, info.value.current) == (1, current.fencing_token)
        assert ledger.get(T, "op-1") == current
        assert ledger.stats().stale_token_refusals == 1
        self.assert_consistent(ledger, current)

    def test_confirm_many_confirms_each_receipt(self, ledger: Ledger, clock: FakeClock) -> None:
        """confirm_many records every receipt (result, ids, evidence) with one event each."""
        ops = [self.dispatching(ledger, f"op-{i}") for i in (1, 2)]
        clock.advance(1)
        evidence = Evidence.confirmed("found by key", source="lookup")
        outcomes = ledger.confirm_many(
            [
                Confirmation(
                    tenant_id=T,
                    operation_id="op-1",
                    token=ops[0].fencing_token,
                    result={"id": 1},
                    provider_result_id="c_1",
                ),
                Confirmation(
                    tenant_id=T, operation_id="op-2", token=ops[1].fencing_token, evidence=evidence
                ),
            ]
        )
        assert [o.operation_id for o in outcomes if isinstance(o, Operation)] == ["op-1", "op-2"]
        one, two = (ledger.get(T, f"op-{i}") for i in (1, 2))
        assert one is not None
        assert two is not None
        assert outcomes == [one, two]
        assert (one.status, one.result, one.provider_result_id) == (S.CONFIRMED, {"id": 1}, "c_1")
        assert (one.resolved_at, one.evidence_checked_at, one.lease_owner) == (
            clock.now(),
            None,
            None,
        )
        assert (two.status, two.result, two.evidence_checked_at) == (S.CONFIRMED, None, clock.now())
        assert ledger.events(T, "op-1")[-1].actor == "receipt"
        assert ledger.events(T, "op-2")[-1].evidence == evidence
        for op in (one, two):
            self.assert_consistent(ledger, op)

    def test_confirm_many_returns_a_stale_receipt_and_applies_the_others(
        self, ledger: Ledger
    ) -> None:
        """A stale or unknown receipt comes back as its error; the valid ones still commit."""
        old = self.dispatching(ledger, "op-1")
        ledger.mark_unknown(T, "op-1", token=old.fencing_token, reason="timeout")
        current = ledger.claim(T, "op-1", owner=OTHER)
        fresh = self.dispatching(ledger, "op-2")
        outcomes = ledger.confirm_many(
            [
                Confirmation(tenant_id=T, operation_id="op-1", token=old.fencing_token),
                Confirmation(tenant_id=T, operation_id="op-2", token=fresh.fencing_token),
                Confirmation(tenant_id=T, operation_id="op-9", token=1),
            ]
        )
        stale, confirmed, missing = outcomes
        assert isinstance(stale, StaleFencingToken)
        assert (stale.token, stale.current) == (1, current.fencing_token)
        assert isinstance(confirmed, Operation)
        assert confirmed.status is S.CONFIRMED
        assert isinstance(missing, OperationNotFound)
        assert ledger.get(T, "op-1") == current
        assert ledger.get(T, "op-2") == confirmed
        assert ledger.stats().stale_token_refusals == 1
        self.assert_consistent(ledger, current)

    def test_confirm_many_refuses_bad_input_before_writing(self, ledger: Ledger) -> None:
        """A non-JSON result or an operation named twice raises and confirms nothing."""
        ops = [self.dispatching(ledger, f"op-{i}") for i in (1, 2)]
        good = Confirmation(tenant_id=T, operation_id="op-1", token=ops[0].fencing_token)
        bad = Confirmation(
            tenant_id=T, operation_id="op-2", token=ops[1].fencing_token, result={1, 2}
        )
        with pytest.raises(InvalidInput):
            ledger.confirm_many([good, bad])
        with pytest.raises(InvalidInput):
            ledger.confirm_many([good, good])
        assert [ledger.get(T, f"op-{i}") for i in (1, 2)] == ops
        assert ledger.confirm_many([]) == []

    def test_reject_with_token_is_definitive(self, ledger: Ledger) -> None:
        """reject(token) moves dispatching to rejected with the reason."""
        op = self.dispatching(ledger)
        done = ledger.reject(T, "op-1", token=op.fencing_token, reason="invalid email")
        assert (done.status, done.error) == (S.REJECTED, "invalid email")
        assert done.resolved_at is not None
        assert ledger.events(T, "op-1")[-1].actor == "provider"

    def test_reject_without_token_rejects_a_prepared_operation_only(self, ledger: Ledger) -> None:
        """reject(token=None) rejects prepared; once claimed it is stale, once final illegal."""
        ledger.prepare(make_draft("op-1"))
        done = ledger.reject(T, "op-1", token=None, reason="approval refused", actor="bob")
        assert (done.status, ledger.events(T, "op-1")[-1].actor) == (S.REJECTED, "bob")
        with pytest.raises(IllegalTransition):
            ledger.reject(T, "op-1", token=None, reason="again")
        op = self.dispatching(ledger, "op-2")
        with pytest.raises(StaleFencingToken):
            ledger.reject(T, "op-2", token=None, reason="revoked")
        assert ledger.get(T, "op-2") == op

    def test_release_returns_to_prepared(self, ledger: Ledger) -> None:
        """release (provably not applied) clears the lease; the next claim takes a new token."""
        op = self.dispatching(ledger)
        released = ledger.release(T, "op-1", token=op.fencing_token, reason="503")
        assert (released.status, released.lease_owner, released.fencing_token) == (
            S.PREPARED,
            None,
            1,
        )
        assert ledger.events(T, "op-1")[-1].detail == {"reason": "503"}
        again = ledger.claim(T, "op-1", owner=OTHER)
        assert (again.fencing_token, again.attempts) == (2, 2)

    def test_mark_unknown_bumps_the_token(self, ledger: Ledger) -> None:
        """mark_unknown keeps the reason and bumps the token so the old holder is stale."""
        op = self.dispatching(ledger)
        unknown = ledger.mark_unknown(
            T, "op-1", token=op.fencing_token, reason="timeout", actor="sweeper"
        )
        assert (unknown.status, unknown.fencing_token, unknown.error) == (S.UNKNOWN, 2, "timeout")
        event = ledger.events(T, "op-1")[-1]
        assert (event.actor, event.fencing_token, event.detail) == (
            "sweeper",
            2,
            {"reason": "timeout"},
        )
        with pytest.raises(StaleFencingToken):
            ledger.release(T, "op-1", token=op.fencing_token, reason="late")

    def test_fenced_moves_need_a_dispatching_operation(self, ledger: Ledger) -> None:
        """With the current token, a fenced move of an unknown operation is still illegal."""
        op = self.unknown(ledger)
        good = Evidence.confirmed("seen", source="lookup")
        with pytest.raises(IllegalTransition):
            ledger.confirm(T, "op-1", token=op.fencing_token, evidence=good)
        with pytest.raises(IllegalTransition):
            ledger.mark_unknown(T, "op-1", token=op.fencing_token, reason="again")
        assert ledger.get(T, "op-1") == op

    def test_a_non_json_result_is_refused_before_writing(self, ledger: Ledger) -> None:
        """A result that is not plain JSON raises InvalidInput and leaves the row dispatching."""
        op = self.dispatching(ledger)
        with pytest.raises(InvalidInput):
            ledger.confirm(T, "op-1", token=op.fencing_token, result={1, 2})
        with pytest.raises(InvalidInput):
            ledger.confirm(T, "op-1", token=op.fencing_token, result=float("nan"))
        assert ledger.get(T, "op-1") == op

    # -- terminal states ----------------------------------------------------------

    @pytest.mark.parametrize("final", [S.CONFIRMED, S.REJECTED])
    def test_terminal_states_never_move(self, ledger: Ledger, final: OperationStatus) -> None:
        """Every verb on a confirmed or rejected operation raises and changes nothing."""
        op = self.dispatching(ledger)
        token = op.fencing_token
        if final is S.CONFIRMED:
            done = ledger.confirm(T, "op-1", token=token, result="ok")
        else:
            done = ledger.reject(T, "op-1", token=token, reason="no")
        attempts: list[Callable[[], object]] = [
            lambda: ledger.claim(T, "op-1", owner=OTHER),
            lambda: ledger.confirm(T, "op-1", token=token),
            lambda: ledger.reject(T, "op-1", token=token, reason="x"),
            lambda: ledger.reject(T, "op-1", token=None, reason="x"),
            lambda: ledger.release(T, "op-1", token=token, reason="x"),
            lambda: ledger.mark_unknown(T, "op-1", token=token, reason="x"),
            lambda: ledger.renew(T, "op-1", token=token),
            lambda: ledger.resolve(
                T, "op-1", Resolution(decision=Decision.RETRY, by="ops", reason="x")
            ),
            lambda: ledger.resolve(
                T, "op-1", Resolution(decision=Decision.CONFIRM, by="ops", reason="x")
            ),
        ]
        for attempt in attempts:
            with pytest.raises(IllegalTransition):
                attempt()
        assert ledger.get(T, "op-1") == done
        self.assert_consistent(ledger, done)

    # -- resolve ------------------------------------------------------------------

    def test_unknown_to_rejected_needs_evidence_or_an_operator(self, ledger: Ledger) -> None:
        """A reconciler needs conclusive rejecting evidence; inconclusive changes nothing."""
        op = self.unknown(ledger)
        for evidence in (
            Evidence.inconclusive("index empty"),
            Evidence.confirmed("looks done"),
        ):
            with pytest.raises(IllegalTransition):
                ledger.resolve(
                    T,
                    "op-1",
                    Resolution(decision=Decision.REJECT, by="reconciler", evidence=evidence),
                )
        assert ledger.get(T, "op-1") == op
        done = ledger.resolve(
            T,
            "op-1",
            Resolution(
                decision=Decision.REJECT,
                by="reconciler",
                evidence=Evidence.rejected("provider says no such request"),
            ),
        )
        assert (done.status, done.error) == (S.REJECTED, "provider says no such request")

    def test_resolve_records_who_and_why(self, ledger: Ledger) -> None:
        """An operator's resolution logs the person, the decision and the reason."""
        self.unknown(ledger)
        done = ledger.resolve(
            T,
            "op-1",
            Resolution(
                decision=Decision.CONFIRM,
                by="alice@ops",
                reason="seen in the CRM UI",
                result={"id": 7},
                provider_result_id="c_7",
            ),
        )
        assert (done.status, done.result, done.provider_result_id) == (
            S.CONFIRMED,
            {"id": 7},
            "c_7",
        )
        event = ledger.events(T, "op-1")[-1]
        assert event.kind is EventKind.RESOLVE
        assert event.actor == "alice@ops"
        assert event.detail == {"decision": "confirm", "reason": "seen in the CRM UI"}
        assert event.evidence is not None
        assert event.evidence.source == "operator"
        assert ledger.stats().operator_resolutions == 1
        self.assert_consistent(ledger, done)

    def test_operator_retry_returns_to_prepared(self, ledger: Ledger) -> None:
        """An operator's retry moves unknown to prepared (sent before: no approval to give);
        a reconciler may not order one."""
        op = self.unknown(ledger)
        with pytest.raises(IllegalTransition):
            ledger.resolve(
                T,
                "op-1",
                Resolution(
                    decision=Decision.RETRY,
                    by="bot",
                    evidence=Evidence.inconclusive("?", source="lookup"),
                ),
            )
        assert ledger.get(T, "op-1") == op
        retried = ledger.resolve(T, "op-1", Resolution(decision=Decision.RETRY, by="alice"))
        assert retried.status is S.PREPARED
        with pytest.raises(IllegalTransition, match="never sent nor approved"):
            ledger.resolve(T, "op-1", Resolution(decision=Decision.APPROVE, by="bob"))
        assert ledger.get(T, "op-1") == retried
        again = ledger.claim(T, "op-1", owner=OTHER)
        assert (again.attempts, again.fencing_token) == (2, 3)
        self.assert_consistent(ledger, again)

    def test_resolve_needs_an_unknown_operation(self, ledger: Ledger) -> None:
        """Resolving a dispatching or missing operation is refused."""
        op = self.dispatching(ledger)
        with pytest.raises(IllegalTransition):
            ledger.resolve(T, "op-1", Resolution(decision=Decision.CONFIRM, by="alice"))
        assert ledger.get(T, "op-1") == op
        with pytest.raises(OperationNotFound):
            ledger.resolve(T, "nope", Resolution(decision=Decision.CONFIRM, by="alice"))
        with pytest.raises(IllegalTransition):
            ledger.resolve(T, "op-1", Resolution(decision=Decision.APPROVE, by="alice"))
        assert ledger.get(T, "op-1") == op

    def test_an_operator_approves_a_prepared_operation_out_of_band(self, ledger: Ledger) -> None:
        """approve on a prepared operation records the approver (claimed and verified) and
        keeps it prepared; approving it again (the ledger checks ``operator_decisions``, not
        only the CLI), anything else, or by evidence, changes nothing."""
        ledger.prepare(make_draft())
        approved = ledger.resolve(
            T,
            "op-1",
            Resolution(
                decision=Decision.APPROVE,
                by="alice",
                reason="checked the amount",
                claimed_by="al",
                verified_by="alice",
            ),
        )
        assert (approved.status, approved.authorization_ref) == (S.PREPARED, "approved-by:alice")
        event = ledger.events(T, "op-1")[-1]
        assert (event.kind, event.from_status, event.actor) == (
            EventKind.APPROVE,
            S.PREPARED,
            "alice",
        )
        assert event.detail == {
            "decision": "approve",
            "reason": "checked the amount",
            "claimed_by": "al",
            "verified_by": "alice",
        }
        self.assert_consistent(ledger, approved)
        with pytest.raises(IllegalTransition, match="never sent nor approved"):
            ledger.resolve(T, "op-1", Resolution(decision=Decision.APPROVE, by="bob"))
        assert ledger.get(T, "op-1") == approved
        assert [e.kind for e in ledger.events(T, "op-1")].count(EventKind.APPROVE) == 1
        with pytest.raises(InvalidInput):
            ledger.resolve(
                T,
                "op-1",
                Resolution(
                    decision=Decision.APPROVE, by="bot", evidence=Evidence.confirmed("looks fine")
                ),
            )
        with pytest.raises(OperationNotFound):
            ledger.resolve(T, "nope", Resolution(decision=Decision.APPROVE, by="alice"))
        claimed = ledger.claim(T, "op-1", owner=OWNER)
        with pytest.raises(IllegalTransition):
            ledger.resolve(T, "op-1", Resolution(decision=Decision.APPROVE, by="alice"))
        assert ledger.get(T, "op-1") == claimed

    def test_an_operator_rejects_a_prepared_operation_out_of_band(self, ledger: Ledger) -> None:
        """reject on a prepared operation moves it to rejected with the operator's evidence;
        a reconciler's rejecting evidence never rejects a prepared operation."""
        op = ledger.prepare(make_draft()).operation
        with pytest.raises(IllegalTransition):
            ledger.resolve(
                T,
                "op-1",
                Resolution(
                    decision=Decision.REJECT,
                    by="reconciler",
                    evidence=Evidence.rejected("no such request"),
                ),
            )
        assert ledger.get(T, "op-1") == op
        done = ledger.resolve(
            T,
            "op-1",
            Resolution(
                decision=Decision.REJECT, by="bob", reason="wrong customer", verified_by="bob"
            ),
        )
        assert (done.status, done.error, done.attempts) == (S.REJECTED, "wrong customer", 0)
        event = ledger.events(T, "op-1")[-1]
        assert (event.kind, event.from_status, event.to_status, event.actor) == (
            EventKind.REJECT,
            S.PREPARED,
            S.REJECTED,
            "bob",
        )
        assert event.evidence is not None
        assert (event.evidence.kind.value, event.evidence.source) == ("rejected", "operator")
        assert event.detail == {
            "decision": "reject",
            "reason": "wrong customer",
            "verified_by": "bob",
        }
        self.assert_consistent(ledger, done)
        with pytest.raises(IllegalTransition):
            ledger.claim(T, "op-1", owner=OWNER)
        with pytest.raises(IllegalTransition):
            ledger.resolve(T, "op-1", Resolution(decision=Decision.REJECT, by="bob"))

    def test_record_evidence_keeps_the_status(self, ledger: Ledger, clock: FakeClock) -> None:
        """Inconclusive evidence is logged and stamped; the status does not move."""
        op = self.unknown(ledger)
        clock.advance(timedelta(minutes=1))
        evidence = Evidence.inconclusive("search index empty", source="crm-lookup")
        after = ledger.record_evidence(T, "op-1", evidence)
        assert (after.status, after.evidence_checked_at) == (S.UNKNOWN, clock.now())
        assert after.record_version == op.record_version + 1
        event = ledger.events(T, "op-1")[-1]
        assert (event.kind, event.from_status, event.to_status, event.evidence) == (
            EventKind.EVIDENCE,
            S.UNKNOWN,
            S.UNKNOWN,
            evidence,
        )
        assert ledger.stats().reconciliation == {"inconclusive": 1}
        with pytest.raises(OperationNotFound):
            ledger.record_evidence(T, "nope", evidence)

    def test_record_evidence_on_a_final_record_only_logs_it(
        self, ledger: Ledger, clock: FakeClock
    ) -> None:
        """On a confirmed or rejected record evidence is a note in its log: one event, the
        version with it, and nothing else of the record moves (``evidence_checked_at``
        neither: nothing was checked)."""
        op = ledger.prepare(make_draft("op-1"), owner=OWNER, lease_for=LEASE).operation
        confirmed = ledger.confirm(T, "op-1", token=op.fencing_token, result={"ok": True})
        self.unknown(ledger, "op-2")
        decided = Resolution(
            decision=Decision.REJECT, by="bob", evidence=Evidence.rejected("not there")
        )
        rejected = ledger.resolve(T, "op-2", decided)
        clock.advance(timedelta(minutes=1))
        note = Evidence.inconclusive("an answer that came too late", source="ana")
        for before in (confirmed, rejected):
            after = ledger.record_evidence(T, before.operation_id, note, answer="task:mark")
            moved = {"record_version": before.record_version + 1, "updated_at": clock.now()}
            assert after == before.model_copy(update=moved)
            event = ledger.events(T, before.operation_id)[-1]
            assert (event.kind, event.from_status, event.to_status, event.evidence) == (
                EventKind.EVIDENCE,
                before.status,
                before.status,
                note,
            )
            assert event.detail == {"answer": "task:mark"}
            self.assert_consistent(ledger, after)

    # -- queries --------------------------------------------------------------------

    def test_bind_thread_keeps_the_first_tenant(self, ledger: Ledger) -> None:
        """A thread is bound to its first tenant; later binds return that tenant."""
        assert ledger.bind_thread("thread-1", "tenant-a") == "tenant-a"
        assert ledger.bind_thread("thread-1", "tenant-b") == "tenant-a"
        assert ledger.bind_thread("thread-1", "tenant-a") == "tenant-a"
        assert ledger.bind_thread("thread-2", "tenant-b") == "tenant-b"
        with pytest.raises(InvalidInput):
            ledger.bind_thread("", "tenant-a")
        with pytest.raises(InvalidInput):
            ledger.bind_thread("thread-3", "")

    def test_adopt_replaces_the_origin_only_while_it_is_the_expected_one(
        self, ledger: Ledger, clock: FakeClock
    ) -> None:
        """adopt is one conditional write of ``origin``: no version, status or event moves."""
        first = ledger.prepare(make_draft(origin="a")).operation
        clock.advance(1)
        adopted = ledger.adopt(T, "op-1", origin="a+b", expected="a")
        assert adopted is not None
        assert adopted.origin == "a+b"
        assert adopted.model_copy(update={"origin": "a"}) == first
        assert ledger.adopt(T, "op-1", origin="a+c", expected="a") is None  # moved meanwhile
        assert ledger.get(T, "op-1") == adopted
        assert len(ledger.events(T, "op-1")) == 1
        ledger.prepare(make_draft("op-2"))
        assert ledger.adopt(T, "op-2", origin="x", expected=None) is not None  # from none
        assert ledger.adopt(T, "op-missing", origin="x", expected=None) is None
        assert ledger.adopt("tenant-b", "op-1", origin="x", expected="a+b") is None

    def test_get_of_another_tenants_operation_is_none(self, ledger: Ledger) -> None:
        """get scopes by tenant: another tenant's operation id reads as absent."""
        ledger.prepare(make_draft("op-1", tenant_id="tenant-a"))
        assert ledger.get("tenant-b", "op-1") is None
        assert ledger.get("tenant-a", "missing") is None
        assert ledger.events("tenant-b", "op-1") == []

    def test_list_filters_and_orders_oldest_first(self, ledger: Ledger, clock: FakeClock) -> None:
        """list filters by tenant, status, action and age, oldest first, up to limit."""
        ledger.prepare(make_draft("op-b"))
        clock.advance(1)
        ledger.prepare(make_draft("op-a"))
        clock.advance(1)
        cutoff = clock.now()
        ledger.prepare(make_draft("op-c", action="mail.send"), owner=OWNER)
        clock.advance(1)
        ledger.prepare(make_draft("op-d", tenant_id="tenant-b"))

        def ids(**kw: Any) -> list[str]:
            return [op.operation_id for op in ledger.list(**kw)]

        assert ids() == ["op-b", "op-a", "op-c", "op-d"]
        assert ids(tenant_id=T) == ["op-b", "op-a", "op-c"]
        assert ids(status=S.PREPARED) == ["op-b", "op-a", "op-d"]
        assert ids(status="dispatching") == ["op-c"]
        assert ids(action="mail.send") == ["op-c"]
        assert ids(updated_before=cutoff) == ["op-b", "op-a"]
        assert ids(limit=2) == ["op-b", "op-a"]
        assert ids(tenant_id="tenant-b", status=S.DISPATCHING) == []
        with pytest.raises(InvalidInput, match="prepared"):
            ledger.list(status="pending")

    def test_status_changed_at_moves_with_the_status_only(
        self, ledger: Ledger, clock: FakeClock
    ) -> None:
        """status_changed_at moves on each status change, never on approval, renewal or
        evidence; list(updated_before=...) and stats' oldest unknown use it."""
        ledger.prepare(make_draft())
        clock.advance(1)
        approved = ledger.approve(T, "op-1", payload_digest=make_draft().payload_digest, by="ana")
        assert approved.status_changed_at == approved.created_at < approved.updated_at
        clock.advance(1)
        claimed = ledger.claim(T, "op-1", owner=OWNER, lease_for=LEASE)
        assert claimed.status_changed_at == claimed.updated_at == clock.now()
        clock.advance(1)
        renewed = ledger.renew(T, "op-1", token=claimed.fencing_token, lease_for=LEASE)
        assert renewed.status_changed_at == claimed.status_changed_at
        clock.advance(1)
        unknown_at = clock.now()
        ledger.mark_unknown(T, "op-1", token=claimed.fencing_token, reason="timeout")
        clock.advance(timedelta(hours=1))
        checked = ledger.record_evidence(T, "op-1", Evidence.inconclusive("nothing yet"))
        assert checked.updated_at == clock.now()
        assert checked.status_changed_at == unknown_at
        assert ledger.stats().oldest_unknown_at == unknown_at
        cutoff = unknown_at + timedelta(microseconds=1)
        assert [op.operation_id for op in ledger.list(updated_before=cutoff)] == ["op-1"]
        assert ledger.list(updated_before=unknown_at) == []
        clock.advance(1)
        retried = ledger.resolve(T, "op-1", Resolution(decision=Decision.RETRY, by="ana"))
        assert retried.status_changed_at == clock.now()

    def test_key_expiry_follows_the_recorded_retention(self, ledger: Ledger) -> None:
        """A recorded retention gives key_expires_at = first dispatch + retention; none, none."""
        op = self.dispatching(ledger, "op-1", key_retention_seconds=3600.0)
        assert op.key_retention_seconds == 3600.0
        assert op.first_dispatched_at is not None
        recorded = recorded_contract(op)
        assert key_expires_at(op, recorded) == op.first_dispatched_at + timedelta(hours=1)
        assert retry_allowed(op, recorded, op.first_dispatched_at + timedelta(minutes=59))
        assert not retry_allowed(op, recorded, op.first_dispatched_at + timedelta(hours=1))
        bare = self.dispatching(ledger, "op-2")
        assert (bare.key_retention_seconds, recorded_contract(bare)) == (None, None)

    def test_list_by_id_prefix_finds_the_operations_it_starts(self, ledger: Ledger) -> None:
        """id_prefix keeps the ids starting with it, literally (``%`` and ``_`` are plain)."""
        for op_id in ("op-abc1", "op-abc2", "op-abd", "op-%x", "other-abc"):
            ledger.prepare(make_draft(op_id))
        ledger.prepare(make_draft("op-abc3", tenant_id="tenant-b"))

        def ids(prefix: str) -> list[str]:
            return sorted(o.operation_id for o in ledger.list(tenant_id=T, id_prefix=prefix))

        assert ids("op-abc") == ["op-abc1", "op-abc2"]
        assert ids("op-ab") == ["op-abc1", "op-abc2", "op-abd"]
        assert ids("op-%") == ["op-%x"]
        assert ids("op-_bc") == []
        assert ids("op-abc2") == ["op-abc2"]

    def test_list_breaks_ties_by_operation_id(self, ledger: Ledger) -> None:
        """Rows updated at the same instant list in operation_id order."""
        ledger.prepare_many([make_draft("op-2"), make_draft("op-1")])
        assert [op.operation_id for op in ledger.list()] == ["op-1", "op-2"]

    def test_approve_and_reject_keep_who_claimed_and_who_was_verified(self, ledger: Ledger) -> None:
        """approve and reject log the verified actor, and claimed_by / verified_by in the
        detail beside the answer; without them the detail holds neither."""
        digest = make_draft().payload_digest
        ledger.prepare(make_draft("op-1"))
        ledger.approve(
            T,
            "op-1",
            payload_digest=digest,
            by="alice",
            answer="task:1",
            claimed_by="al",
            verified_by="langgraph-auth:alice",
        )
        ledger.prepare(make_draft("op-2"))
        ledger.reject(
            T,
            "op-2",
            token=None,
            reason="no",
            actor="bob",
            answer="task:2",
            verified_by="langgraph-auth:bob",
        )
        ledger.prepare(make_draft("op-3"))
        ledger.approve(T, "op-3", payload_digest=digest, by="carol")
        approved = ledger.events(T, "op-1")[-1]
        assert (approved.actor, approved.detail) == (
            "alice",
            {
                "reason": "",
                "answer": "task:1",
                "claimed_by": "al",
                "verified_by": "langgraph-auth:alice",
            },
        )
        rejected = ledger.events(T, "op-2")[-1]
        assert (rejected.actor, rejected.detail) == (
            "bob",
            {"answer": "task:2", "verified_by": "langgraph-auth:bob"},
        )
        assert ledger.events(T, "op-3")[-1].detail == {"reason": ""}

    def test_open_operations_lists_the_unresolved_on_one_target(
        self, ledger: Ledger, clock: FakeClock
    ) -> None:
        """open_operations keeps one tenant's prepared, dispatching and unknown operations of
        one action and target, oldest status first, up to limit, and counts them all."""
        refund = "pay.refund"

        def draft(op_id: str, **kw: Any) -> OperationDraft:
            kw.setdefault("action", refund)
            kw.setdefault("target", "order-42")
            return make_draft(op_id, **kw)

        lost = ledger.prepare(draft("op-lost"), owner=OWNER, lease_for=LEASE).operation
        clock.advance(1)
        ledger.mark_unknown(T, "op-lost", token=lost.fencing_token, reason="thread lost")
        clock.advance(1)
        ledger.prepare(draft("op-asked"))
        clock.advance(1)
        ledger.prepare(draft("op-running"), owner=OTHER, lease_for=LEASE)
        done = ledger.prepare(draft("op-done"), owner=OWNER, lease_for=LEASE).operation
        ledger.confirm(T, "op-done", token=done.fencing_token)
        ledger.prepare(draft("op-refused"))
        ledger.reject(T, "op-refused", token=None, reason="no")
        ledger.prepare(draft("op-other-order", target="order-7"))
        ledger.prepare(draft("op-other-action", action="pay.charge"))
        ledger.prepare(draft("op-other-tenant", tenant_id="tenant-b"))

        found = ledger.open_operations(T, action=refund, target="order-42")
        assert [(o.operation_id, o.status) for o in found.operations] == [
            ("op-lost", S.UNKNOWN),
            ("op-asked", S.PREPARED),
            ("op-running", S.DISPATCHING),
        ]
        assert found.total == 3
        first = ledger.open_operations(T, action=refund, target="order-42", limit=1)
        assert ([o.operation_id for o in first.operations], first.total) == (["op-lost"], 3)
        none = ledger.open_operations("tenant-b", action=refund, target="order-42")
        assert ([o.operation_id for o in none.operations], none.total) == (["op-other-tenant"], 1)
        assert ledger.open_operations(T, action=refund, target="order-9").total == 0
        with pytest.raises(InvalidInput, match="limit"):
            ledger.open_operations(T, action=refund, target="order-42", limit=-1)

    def test_feed_follows_every_event_in_order(self, ledger: Ledger) -> None:
        """feed returns events after an id, in order, by tenant, up to limit."""
        op = self.dispatching(ledger, "op-1")
        ledger.confirm(T, "op-1", token=op.fencing_token)
        ledger.prepare(make_draft("op-2", tenant_id="tenant-b"))
        everything = ledger.feed()
        assert [(e.operation_id, e.kind) for e in everything] == [
            ("op-1", EventKind.PREPARE),
            ("op-1", EventKind.CLAIM),
            ("op-1", EventKind.CONFIRM),
            ("op-2", EventKind.PREPARE),
        ]
        assert all(e.event_id is not None for e in everything)
        ids = [cast(int, e.event_id) for e in everything]
        assert ids == sorted(ids)
        assert len(set(ids)) == len(ids)
        assert ledger.feed(after_id=ids[1]) == everything[2:]
        assert ledger.feed(tenant_id="tenant-b") == everything[3:]
        assert ledger.feed(limit=1) == everything[:1]
        assert ledger.events(T, "op-1") == everything[:3]

    def test_stats_counts_statuses_and_ages(self, ledger: Ledger, clock: FakeClock) -> None:
        """stats counts operations by status and reports the oldest unknown and dispatching."""
        ledger.prepare(make_draft("op-p"))
        first_unknown = clock.now()
        self.unknown(ledger, "op-u")
        clock.advance(10)
        self.unknown(ledger, "op-u2")
        dispatching_at = clock.now()
        self.dispatching(ledger, "op-d")
        ledger.prepare(make_draft("op-x", tenant_id="tenant-b"))
        stats = ledger.stats(tenant_id=T)
        assert stats.counts == {
            S.PREPARED: 1,
            S.DISPATCHING: 1,
            S.CONFIRMED: 0,
            S.REJECTED: 0,
            S.UNKNOWN: 2,
        }
        assert stats.total == 4
        assert stats.oldest_unknown_at == first_unknown
        assert stats.oldest_dispatching_at == dispatching_at
        assert ledger.stats().total == 5

    def test_every_row_matches_its_event_log(self, ledger: Ledger) -> None:
        """After a mixed history, each row's record_version equals its number of events."""
        a = self.dispatching(ledger, "op-a")
        ledger.confirm(T, "op-a", token=a.fencing_token)
        self.unknown(ledger, "op-b")
        ledger.record_evidence(T, "op-b", Evidence.inconclusive("?"))
        ledger.resolve(T, "op-b", Resolution(decision=Decision.RETRY, by="alice"))
        ledger.prepare(make_draft("op-c"))
        ledger.reject(T, "op-c", token=None, reason="revoked")
        for op in ledger.list():
            self.assert_consistent(ledger, op)
        total = sum(op.record_version for op in ledger.list())
        assert len(ledger.feed(limit=1000)) == total

    def test_state_survives_reopening(
        self,
        ledger: Ledger,
        open_ledger: Callable[[Callable[[], datetime]], Ledger],
        clock: FakeClock,
    ) -> None:
        """A new connection (or pool) on the same storage sees the same rows and events."""
        if not self.durable:
            pytest.skip("this ledger keeps nothing across instances")
        op = self.dispatching(ledger)
        done = ledger.confirm(T, "op-1", token=op.fencing_token, result={"id": 1})
        reopened = open_ledger(clock.now)
        reopened.setup()
        assert reopened.get(T, "op-1") == done
        assert reopened.events(T, "op-1") == ledger.events(T, "op-1")
        with pytest.raises(PayloadMismatch):
            reopened.prepare(make_draft(payload={"email": "eve@example.com"}))
