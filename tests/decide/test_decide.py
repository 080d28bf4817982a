"""The decision engine driven directly: no graph, our in-memory ledger, a fake provider.

Each test hands ``EffectRunner`` one ``EffectCall`` and an ``execute`` that calls
the effect tool (as ToolNode would), then counts what the provider applied. One
test goes through a graph: the async driver's promise (a sync ledger never
blocks the event loop) is stated for ``ainvoke``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _graphs import build_graph, tool_messages
from _graphs import call as call_of
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_effects import InMemoryLedger, effect
from langgraph_effects.core.model import (
    EventKind,
    Evidence,
    LeaseOwner,
    Operation,
    OperationKey,
    OperationStatus,
    ProviderContract,
)
from langgraph_effects.decide import EffectCall, EffectRunner, GroupCommit
from langgraph_effects.decide.actions import Confirm, Get, LedgerAction, Prepare
from langgraph_effects.decide.commit import confirm_group, prepare_group
from langgraph_effects.effects import EffectContext, EffectTool
from langgraph_effects.errors import LedgerUnavailable, PayloadMismatch
from langgraph_effects.ledger.sqlite import SQLiteLedger
from langgraph_effects.testing.faults import scaled
from langgraph_effects.testing.providers import FakeClock, FakeCRM, Fault

S = OperationStatus
LEASE = timedelta(seconds=30)
ELSEWHERE = LeaseOwner(host="another-host", pid=4242, started_at=1.0, nonce="crashed")
"""A worker on another host: never provably dead from here, its lease must expire."""


class FaultyLedger(InMemoryLedger):
    """Our in-memory ledger with faults at its boundary: its next ``confirm`` raises
    ``fail`` (the database went away), every one raises ``down`` while it is set, or
    the next is held until ``release`` (a slow commit, so other writes arrive while it
    is in flight)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail: Exception | None = None
        self.down: Exception | None = None
        self.confirms = 0
        self.held = threading.Event()
        self.release: threading.Event | None = None
        self.batches: list[int] = []

    def confirm(self, *args: Any, **kwargs: Any) -> Operation:
        self.confirms += 1
        if self.down is not None:
            raise self.down
        if self.fail is not None:
            fail, self.fail = self.fail, None
            raise fail
        if self.release is not None:
            release, self.release = self.release, None
            self.held.set()
            release.wait(scaled(10))
        return super().confirm(*args, **kwargs)

    def confirm_many(self, confirmations: Any) -> list[Any]:
        self.batches.append(len(confirmations))
        return super().confirm_many(confirmations)


class Env:
    """One ledger, one fake CRM and one clock, shared as a deployment shares them."""

    def __init__(self, **runner: Any) -> None:
        self.clock = FakeClock()
        self.ledger = FaultyLedger(clock=self.clock.now)
        self.ledger.setup()
        self.crm = FakeCRM(clock=self.clock)
        self.dispatches = 0
        runner.setdefault("lease_for", LEASE)
        self.runner = EffectRunner(self.ledger, clock=self.clock.now, **runner)

    def tool(self, **options: Any) -> EffectTool:
        crm = self.crm

        @effect("crm.close_case", target=lambda a: a["case_id"], **options)
        def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
            """Close a support case."""
            return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

        return close_case

    def call(self, tool: EffectTool, case_id: str = "C-1") -> EffectCall:
        return EffectCall.build(
            tool.effect_spec,
            tool_name=tool.name,
            tool_call_id="call-1",
            args={"case_id": case_id, "resolution": "refund"},
            tenant_id="acme",
            workflow_id="thread-1",
        )

    def execute(self, tool: EffectTool) -> Callable[[dict[str, Any]], Any]:
        def run(args: dict[str, Any]) -> Any:
            self.dispatches += 1
            return tool.invoke(args)

        return run

    def crashed_after_provider(self, call: EffectCall) -> None:
        """Another worker prepared and claimed ``call``, the provider applied it, and the
        worker died before its receipt; then its lease ran out."""
        self.ledger.prepare(call.draft(), owner=ELSEWHERE, lease_for=LEASE)
        self.crm.close_case("C-1", "refund", idempotency_key=call.idempotency_key)
        self.clock.advance(LEASE + timedelta(seconds=1))

    async def aledger_action(self, action: LedgerAction[Any], cancelled: list[bool]) -> Any:
        return await asyncio.to_thread(action.on, self.ledger)

    def status_of(self, receipt: Confirm) -> OperationStatus:
        op = self.ledger.get(receipt.key.tenant_id, receipt.key.operation_id)
        assert op is not None
        return op.status

    def status(self, call: EffectCall) -> OperationStatus:
        op = self.ledger.get(call.tenant_id, call.operation_id)
        assert op is not None
        return op.status


def closed_by_key(crm: FakeCRM) -> Callable[[Operation], Evidence]:
    """A reconciler: the CRM's status lookup says whether our key closed the case."""

    def reconcile(op: Operation) -> Evidence:
        case = crm.get_case(op.target or "")
        if case["closed_by"] == op.idempotency_key:
            return Evidence.confirmed("closed under our key", result=case)
        return Evidence.inconclusive("not closed under our key")

    return reconcile


def test_a_first_run_dispatches_once_and_confirms() -> None:
    """A new call is written ahead, dispatched once and confirmed with the provider's answer."""
    env = Env()
    tool = env.tool()
    call = env.call(tool)
    op = env.runner.run(call, env.execute(tool))
    assert op.status is S.CONFIRMED
    assert op.key == OperationKey(tenant_id="acme", operation_id=call.operation_id) == call.key
    assert op.result["status"] == "closed"
    assert (env.dispatches, env.crm.effects) == (1, 1)


def test_a_confirmed_operation_replays_without_a_dispatch() -> None:
    """Running the same call again returns the recorded result; the provider hears nothing."""
    env = Env()
    tool = env.tool()
    first = env.runner.run(env.call(tool), env.execute(tool))
    again = env.runner.run(env.call(tool), env.execute(tool))
    assert again.status is S.CONFIRMED
    assert again.result == first.result
    assert (env.dispatches, env.crm.effects) == (1, 1)


def test_a_crash_window_takeover_goes_unknown_then_reconciles() -> None:
    """A dead worker's expired lease is taken over (unknown) and the reconciler confirms it."""
    env = Env()
    tool = env.tool(reconcile=closed_by_key(env.crm))
    call = env.call(tool)
    env.crashed_after_provider(call)
    op = env.runner.run(call, env.execute(tool))
    assert op.status is S.CONFIRMED
    kinds = [e.to_status for e in env.ledger.events(call.tenant_id, call.operation_id)]
    assert S.UNKNOWN in kinds
    assert (env.dispatches, env.crm.effects) == (0, 1)


def test_an_unknown_is_retried_under_the_idempotency_contract() -> None:
    """Without a reconciler, an open key window makes a resend safe: the provider dedups it."""
    env = Env()
    tool = env.tool(contract=ProviderContract(idempotency_window=timedelta(hours=24)))
    call = env.call(tool)
    env.crashed_after_provider(call)
    op = env.runner.run(call, env.execute(tool))
    assert op.status is S.CONFIRMED
    assert op.attempts == 2
    # The resend reached the provider under the same key and applied nothing new.
    assert (env.dispatches, env.crm.effects) == (1, 1)


def test_an_unresolved_unknown_asks_a_person_and_applies_the_answer() -> None:
    """With no reconciler and no key contract, the loop asks; the face puts the question."""
    asked: list[dict[str, Any]] = []

    def ask(request: dict[str, Any], schema: Any) -> Any:
        asked.append(request)
        return {"decision": "confirm", "by": "al", "reason": "the CRM shows it closed"}

    env = Env(ask=ask)
    tool = env.tool()
    call = env.call(tool)
    env.crashed_after_provider(call)
    op = env.runner.run(call, env.execute(tool))
    assert [r["operation_id"] for r in asked] == [call.operation_id]
    assert op.status is S.CONFIRMED
    assert (env.dispatches, env.crm.effects) == (0, 1)


def test_a_face_may_return_an_unknown_instead_of_asking() -> None:
    """``interrupt_on_unknown=False``: the unknown record comes back, nothing is resent."""
    env = Env(interrupt_on_unknown=False)
    tool = env.tool()
    call = env.call(tool)
    env.crashed_after_provider(call)
    op = env.runner.run(call, env.execute(tool))
    assert op.status is S.UNKNOWN
    assert (env.dispatches, env.crm.effects) == (0, 1)


def test_a_stale_fencing_token_keeps_the_receipt_and_settles_with_it() -> None:
    """Taken over mid-dispatch: the fenced confirm is refused, the receipt is kept as
    evidence, and the operation is confirmed from it without a resend."""
    env = Env()
    tool = env.tool()
    call = env.call(tool)
    inner = env.execute(tool)

    def taken_over_while_running(args: dict[str, Any]) -> Any:
        result = inner(args)
        op = env.ledger.get(call.tenant_id, call.operation_id)
        assert op is not None
        env.clock.advance(LEASE + timedelta(seconds=1))
        env.ledger.mark_unknown(
            op.tenant_id, op.operation_id, token=op.fencing_token, reason="lease expired"
        )
        return result

    op = env.runner.run(call, taken_over_while_running)
    assert op.status is S.CONFIRMED
    events = env.ledger.events(call.tenant_id, call.operation_id)
    assert any(e.evidence is not None and e.evidence.source == "receipt" for e in events)
    assert (env.dispatches, env.crm.effects) == (1, 1)


def test_a_receipt_the_ledger_failed_once_is_written_on_the_next_try() -> None:
    """A receipt whose commit failed (the database went away for a moment) is tried again
    and written: confirmed, the provider called once."""
    env = Env()
    tool = env.tool()
    call = env.call(tool)
    env.ledger.fail = LedgerUnavailable("the database went away")
    op = env.runner.run(call, env.execute(tool))
    assert op.status is S.CONFIRMED
    assert (env.ledger.confirms, env.dispatches, env.crm.effects) == (2, 1, 1)


def test_a_ledger_error_at_the_receipt_leaves_the_record_for_recovery() -> None:
    """A receipt the ledger keeps failing to record (for a third of the lease: four tries
    with a 1.5 s lease) surfaces; the record stays dispatching, and a later run reconciles
    it without a resend."""
    lease = timedelta(seconds=1.5)
    env = Env(lease_for=lease)
    tool = env.tool(reconcile=closed_by_key(env.crm))
    call = env.call(tool)
    env.ledger.down = LedgerUnavailable("the database went away")
    with pytest.raises(LedgerUnavailable):
        env.runner.run(call, env.execute(tool))
    assert env.ledger.confirms == 4  # 0.05 + 0.1 + 0.2 s of backoff fit in 0.5 s
    assert env.status(call) is S.DISPATCHING
    env.ledger.down = None
    env.clock.advance(lease + timedelta(seconds=1))
    op = env.runner.run(call, env.execute(tool))
    assert op.status is S.CONFIRMED
    assert (env.dispatches, env.crm.effects) == (1, 1)


def test_a_refused_receipt_in_a_group_commit_is_a_late_receipt_of_that_call_only() -> None:
    """Group commit: two receipts arrive while a third's commit is in flight and share
    the next one (one ``confirm_many``); the one a takeover made stale is kept as
    evidence and settles its own operation, the other is confirmed."""
    env = Env(interrupt_on_unknown=False, group_commit=True)
    tool = env.tool()
    calls = [env.call(tool, case_id) for case_id in ("C-1", "C-2", "C-3")]
    stale = calls[1]
    inner = env.execute(tool)

    def taken_over_while_running(args: dict[str, Any]) -> Any:
        result = inner(args)
        op = env.ledger.get(stale.tenant_id, stale.operation_id)
        assert op is not None
        env.ledger.mark_unknown(op.tenant_id, op.operation_id, token=op.fencing_token, reason="x")
        return result

    release = threading.Event()
    env.ledger.release = release
    done: dict[str, Operation] = {}

    def run(call: EffectCall, execute: Callable[[dict[str, Any]], Any]) -> None:
        done[call.target or ""] = env.runner.run(call, execute)

    leader = threading.Thread(target=run, args=(calls[0], inner))
    leader.start()
    assert env.ledger.held.wait(scaled(10))  # C-1's receipt is being committed
    others = [
        threading.Thread(target=run, args=(calls[1], taken_over_while_running)),
        threading.Thread(target=run, args=(calls[2], inner)),
    ]
    for thread in others:
        thread.start()
    confirms = env.runner.commits.confirms
    assert confirms is not None
    while confirms.waiting < 2:
        time.sleep(0.001)
    release.set()
    for thread in [leader, *others]:
        thread.join(scaled(10))
    assert env.ledger.batches == [2]  # C-1 alone, then C-2 and C-3 together
    assert {k: op.status for k, op in done.items()} == dict.fromkeys(
        ("C-1", "C-2", "C-3"), S.CONFIRMED
    )
    assert env.ledger.events(stale.tenant_id, stale.operation_id)[-1].kind is EventKind.RESOLVE
    assert env.ledger.stats().stale_token_refusals == 1
    assert (env.dispatches, env.crm.effects) == (3, 3)


def test_a_transient_refusal_is_resent_under_the_same_lease() -> None:
    """A refusal before acting is provably not applied: resent once, applied once."""
    env = Env()
    tool = env.tool()
    env.crm.faults.push(Fault.TRANSIENT, retry_after=0.0)
    op = env.runner.run(env.call(tool), env.execute(tool))
    assert op.status is S.CONFIRMED
    assert (env.dispatches, env.crm.effects) == (2, 1)


def test_ledger_actions_are_typed_calls_on_the_protocol() -> None:
    """A ledger action calls its verb on a sync ledger; the engine passes one key."""
    env = Env()
    tool = env.tool()
    call = env.call(tool)
    env.runner.run(call, env.execute(tool))
    action: LedgerAction[Operation | None] = Get(call.key)
    found = env.runner.perform(action)
    assert found is not None
    assert found.key == call.key


# -- group commit (decide.commit) --------------------------------------------------------------


class Held:
    """``perform`` for a group: makes each write on the ledger and notes it; the first is
    held until ``release`` (a slow commit: the writes arriving meanwhile queue)."""

    def __init__(self, ledger: InMemoryLedger) -> None:
        self.ledger = ledger
        self.writes: list[str] = []
        self.held = threading.Event()
        self.release = threading.Event()

    def __call__(self, action: LedgerAction[Any]) -> Any:
        first = not self.writes
        self.writes.append(type(action).__name__)
        if first:
            self.held.set()
            self.release.wait(scaled(10))
        return action.on(self.ledger)

    async def aperform(self, action: LedgerAction[Any], cancelled: list[bool]) -> Any:
        return await asyncio.to_thread(self, action)


def _wait_for(group: GroupCommit[Any], n: int) -> None:
    deadline = time.monotonic() + scaled(10)
    while group.waiting < n:
        assert time.monotonic() < deadline, f"{group.waiting} of {n} writes queued"
        time.sleep(0.001)


def _claimed(env: Env, tool: EffectTool, case_id: str) -> Confirm:
    """The receipt of a call prepared and claimed under token 1."""
    call = env.call(tool, case_id)
    env.ledger.prepare(call.draft(), owner=ELSEWHERE, lease_for=LEASE)
    return Confirm(call.key, token=1, result={"case": case_id})


def test_an_idle_group_commits_a_write_at_once_alone() -> None:
    """Nothing in flight: the write is made at once, as a single write."""
    env = Env()
    tool = env.tool()
    group = confirm_group()
    writes: list[str] = []

    def perform(action: LedgerAction[Any]) -> Any:
        writes.append(type(action).__name__)
        return action.on(env.ledger)

    op = group.write(_claimed(env, tool, "C-1"), perform)
    assert op.status is S.CONFIRMED
    assert writes == ["Confirm"]
    assert group.waiting == 0


def test_a_failed_group_prepare_falls_back_to_each_calls_own_write() -> None:
    """prepare_many is all or nothing: one PayloadMismatch in a group refuses the batch;
    each call then prepares alone and meets its own outcome (only one mismatch)."""
    env = Env()
    tool = env.tool()
    taken = env.call(tool, "C-9")
    env.ledger.prepare(taken.draft())
    # The same operation id with another payload: PayloadMismatch for that call only.
    clash = taken.draft().model_copy(update={"payload_digest": "sha256:" + "0" * 64})
    drafts = [env.call(tool, "C-1").draft(), clash, env.call(tool, "C-2").draft()]
    group = prepare_group()
    held = Held(env.ledger)
    owner = LeaseOwner(host="here", pid=1, started_at=1.0, nonce="n")
    outcomes: dict[int, Any] = {}

    def write(i: int, draft: Any) -> None:
        try:
            outcomes[i] = group.write(Prepare(draft, owner=owner, lease_for=LEASE), held)
        except Exception as exc:
            outcomes[i] = exc

    first = threading.Thread(target=write, args=(0, env.call(tool, "C-0").draft()))
    first.start()
    assert held.held.wait(scaled(10))
    others = [threading.Thread(target=write, args=(i, d)) for i, d in enumerate(drafts, 1)]
    for thread in others:
        thread.start()
    _wait_for(group, 3)
    held.release.set()
    for thread in [first, *others]:
        thread.join(scaled(10))
    assert held.writes[:2] == ["Prepare", "PrepareMany"]
    assert sorted(held.writes[2:]) == ["Prepare"] * 3
    assert isinstance(outcomes[2], PayloadMismatch)
    assert all(outcomes[i].created for i in (0, 1, 3))


def test_a_cancelled_async_write_is_made_and_its_cancellation_noted() -> None:
    """An asyncio task cancelled while its receipt is queued: the receipt is still
    committed (with the next group) and the cancellation is noted for the driver to raise."""
    env = Env()
    tool = env.tool()
    group = confirm_group()
    held = Held(env.ledger)
    first, receipt = _claimed(env, tool, "C-1"), _claimed(env, tool, "C-2")
    cancelled: list[bool] = []

    async def main() -> Any:
        leader = asyncio.ensure_future(group.awrite(first, held.aperform, []))
        await asyncio.to_thread(held.held.wait, 10)
        task = asyncio.ensure_future(group.awrite(receipt, held.aperform, cancelled))
        await asyncio.to_thread(_wait_for, group, 1)
        task.cancel()
        await asyncio.sleep(0.01)
        held.release.set()
        await leader
        return await task

    op = asyncio.run(main())
    assert cancelled == [True]
    assert op.status is S.CONFIRMED
    assert env.status_of(receipt) is S.CONFIRMED


def test_writes_group_with_their_own_kind_threads_or_one_event_loop() -> None:
    """A thread's commit in flight does not hold an asyncio task's write (nor the other
    way round): a waiter only ever depends on a caller of its own kind, never on a loop
    or a worker thread it could be blocking."""
    env = Env()
    tool = env.tool()
    group = confirm_group()
    held = Held(env.ledger)
    leader = threading.Thread(target=group.write, args=(_claimed(env, tool, "C-1"), held))
    leader.start()
    assert held.held.wait(scaled(10))

    async def on_a_loop() -> Any:
        return await group.awrite(_claimed(env, tool, "C-2"), env.aledger_action, [])

    try:
        op = asyncio.run(on_a_loop())
        assert op.status is S.CONFIRMED
        assert group.waiting == 0
    finally:
        held.release.set()
        leader.join(scaled(10))


def test_a_failed_shared_bind_leaves_each_waiting_caller_its_own(sqlite_path: Path) -> None:
    """Three threads bind one new thread together: one ``bind_thread`` in flight, the
    others wait for it. It fails (the database went away): its caller gets the error;
    the waiting callers ask again, sharing one second bind, and get the tenant."""
    with SQLiteLedger.from_conn_string(str(sqlite_path)) as sqlite:
        sqlite.setup()
        runner = EffectRunner(sqlite)
        inner = sqlite.bind_thread
        binds: list[str] = []

        def bind_thread(workflow_id: str, tenant_id: str) -> str:
            binds.append(workflow_id)
            if len(binds) == 1:
                deadline = time.monotonic() + scaled(10)
                while runner.bindings.waiting < 2 and time.monotonic() < deadline:
                    time.sleep(0.001)
                raise LedgerUnavailable("the database went away (the test)")
            return inner(workflow_id, tenant_id)

        sqlite.bind_thread = bind_thread  # type: ignore[method-assign]
        outcomes: list[Any] = []

        def bind() -> None:
            try:
                outcomes.append(runner.tenant_for({"configurable": {"thread_id": "t1"}}))
            except LedgerUnavailable as exc:
                outcomes.append(exc)

        threads = [threading.Thread(target=bind) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(scaled(10))
        assert binds == ["t1"] * 2
        assert sum(isinstance(o, LedgerUnavailable) for o in outcomes) == 1
        assert [o for o in outcomes if not isinstance(o, Exception)] == [("t1", "default")] * 2


# -- the async driver never blocks the event loop --------------------------------------------


class ThreadSpy:
    """Notes the thread of each call of a sync clock or hook."""

    def __init__(self) -> None:
        self.threads: set[int] = set()

    def clocked(self, clock: FakeClock) -> Callable[[], Any]:
        def now() -> Any:
            self.threads.add(threading.get_ident())
            return clock.now()

        return now


def test_arun_runs_a_sync_ledger_and_a_sync_reconciler_off_the_event_loop() -> None:
    """Under ``arun``, every call of a sync ledger and of a sync reconciler runs in a worker
    thread: the event loop's thread never blocks on their I/O."""
    ledger_spy, hook_spy = ThreadSpy(), ThreadSpy()
    env = Env()
    env.ledger = InMemoryLedger(clock=ledger_spy.clocked(env.clock))  # the ledger reads its clock
    env.ledger.setup()
    env.runner = EffectRunner(env.ledger, lease_for=LEASE, clock=env.clock.now)
    reconcile = closed_by_key(env.crm)

    def spied_reconcile(op: Operation) -> Evidence:
        hook_spy.threads.add(threading.get_ident())
        return reconcile(op)

    tool = env.tool(reconcile=spied_reconcile)
    call = env.call(tool)
    env.crashed_after_provider(call)

    async def main() -> tuple[Operation, int]:
        async def aexecute(args: dict[str, Any]) -> Any:
            return await tool.ainvoke(args)

        ledger_spy.threads.clear()
        op = await env.runner.arun(call, aexecute)
        return op, threading.get_ident()

    op, loop_thread = asyncio.run(main())
    assert op.status is S.CONFIRMED
    assert ledger_spy.threads
    assert loop_thread not in ledger_spy.threads
    assert hook_spy.threads
    assert loop_thread not in hook_spy.threads
    assert env.crm.effects == 1


def test_ainvoke_runs_a_sync_ledger_and_reconciler_off_the_event_loop() -> None:
    """The same through a graph: ``EffectToolNode.ainvoke`` with a sync ledger never runs
    the ledger or the reconciler on the event loop's thread."""
    ledger_spy, hook_spy = ThreadSpy(), ThreadSpy()
    clock = FakeClock()
    ledger = InMemoryLedger(clock=ledger_spy.clocked(clock))
    ledger.setup()
    crm = FakeCRM(clock=clock)
    reconcile = closed_by_key(crm)

    def spied_reconcile(op: Operation) -> Evidence:
        hook_spy.threads.add(threading.get_ident())
        return reconcile(op)

    @effect("crm.close_case", target=lambda a: a["case_id"], reconcile=spied_reconcile)
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a support case."""
        return crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)

    tool_call = call_of("close_case", "call-1", case_id="C-1", resolution="refund")
    graph = build_graph(
        [close_case],
        [tool_call],
        ledger=ledger,
        checkpointer=InMemorySaver(),
        node_kwargs={"lease_for": LEASE, "clock": clock.now},
    )
    config: RunnableConfig = {"configurable": {"thread_id": "thread-1"}}
    # A worker died after the provider applied the call: the node takes over and reconciles.
    call = EffectCall.build(
        close_case.effect_spec,
        tool_name="close_case",
        tool_call_id="call-1",
        args=tool_call["args"],
        tenant_id="default",
        workflow_id="thread-1",
    )
    ledger.prepare(call.draft(), owner=ELSEWHERE, lease_for=LEASE)
    crm.close_case("C-1", "refund", idempotency_key=call.idempotency_key)
    clock.advance(LEASE + timedelta(seconds=1))

    async def main() -> tuple[Any, int]:
        ledger_spy.threads.clear()
        out = await graph.ainvoke({"messages": [("user", "close it")]}, config, durability="sync")
        return out, threading.get_ident()

    out, loop_thread = asyncio.run(main())
    [message] = tool_messages(out)
    assert message.status == "success"
    op = ledger.get("default", call.operation_id)
    assert op is not None
    assert op.status is S.CONFIRMED
    assert ledger_spy.threads
    assert loop_thread not in ledger_spy.threads
    assert hook_spy.threads
    assert loop_thread not in hook_spy.threads
    assert crm.effects == 1
