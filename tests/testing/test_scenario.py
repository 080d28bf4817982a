"""The scenario runner and the assertions: real graphs, real ledgers, effects counted at fakes."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from langgraph_effects._owners import current_owner
from langgraph_effects.core.model import Evidence, OperationDraft, Resolution
from langgraph_effects.core.model import OperationStatus as S
from langgraph_effects.decide.answers import answer_digest
from langgraph_effects.decide.messages import TRACE_KEY
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.ledger.sqlite import AsyncSQLiteLedger, SQLiteLedger
from langgraph_effects.testing import CrashPoint, Fault
from langgraph_effects.testing.assertions import (
    assert_no_duplicate_effects,
    assert_no_unevidenced_rejections,
    assert_unknowns_accounted,
)
from langgraph_effects.testing.campaign import KillCase, _kill_child
from langgraph_effects.testing.providers import ProviderTimeout
from langgraph_effects.testing.scenario import (
    Kind,
    ProviderKind,
    Providers,
    Scenario,
    Schedule,
    _answer_applied,
    _delivered,
    _lost_effects,
    _lost_receipts,
    bad_answer,
    builtin_call,
    confirm_if_seen,
    control_tools,
    defer,
    effect_tools,
    operator,
    run_in_forked_child,
    run_scenario,
)


@pytest.fixture
def providers() -> Iterator[Providers]:
    world = Providers.open(None)
    yield world
    world.close()


def _ledger(providers: Providers) -> InMemoryLedger:
    ledger = InMemoryLedger(clock=providers.clock.now)
    ledger.setup()
    return ledger


def _scenario(providers: Providers, kind: ProviderKind, **kwargs: object) -> Scenario:
    defaults: dict[str, object] = {
        "tools": effect_tools(providers),
        "tool_calls": [builtin_call(kind, 0, tag="t")],
        "providers": providers.all,
        "clock": providers.clock,
        "policy": confirm_if_seen(providers.shows),
        "applied": providers.applied,
        "thread_id": "t",
    }
    return Scenario(**{**defaults, **kwargs})  # type: ignore[arg-type]


def test_crash_after_the_provider_acted_resumes_to_one_confirmed_effect(
    providers: Providers,
) -> None:
    """A crash between the CRM's answer and the receipt resumes to one effect, confirmed."""
    ledger = _ledger(providers)
    report = run_scenario(
        _scenario(providers, ProviderKind.CRM, crash_at=CrashPoint.AFTER_PROVIDER), ledger=ledger
    )
    assert (report.crashes, report.effects, report.duplicates) == (1, 1, 0)
    assert (report.completed, report.mislabelled, report.unknown) == (1, 0, 0)
    assert [op.status for op in ledger.list(tenant_id="t")] == [S.CONFIRMED]
    assert providers.crm.effects_for("case-t-0") == 1


def test_the_control_toolnode_applies_the_same_crash_twice(providers: Providers) -> None:
    """The same crash under a plain ToolNode re-runs the tool: the case is closed twice."""
    report = run_scenario(
        _scenario(
            providers,
            ProviderKind.CRM,
            tools=control_tools(providers),
            crash_at=CrashPoint.AFTER_PROVIDER,
            control=True,
        )
    )
    assert (report.crashes, report.effects, report.duplicates) == (1, 2, 1)
    with pytest.raises(AssertionError, match="FakeCRM: 1"):
        assert_no_duplicate_effects(*providers.all)


def test_an_unknown_ticket_is_decided_by_the_review_policy(providers: Providers) -> None:
    """A lost ticketing response goes to review; the policy sees the ticket and confirms it."""
    providers.ticketing.faults.push(Fault.LOSE_RESPONSE)
    ledger = _ledger(providers)
    report = run_scenario(_scenario(providers, ProviderKind.TICKETING), ledger=ledger)
    assert (report.effects, report.duplicates, report.human_resolved) == (1, 0, 1)
    (op,) = ledger.list(tenant_id="t")
    assert op.status is S.CONFIRMED
    assert report.completion_rate == 1.0


def test_a_deferred_review_stays_unknown_and_is_accounted_only_as_pending(
    providers: Providers,
) -> None:
    """Nobody answers: the ticket stays unknown, which is fine only while a review is pending."""
    providers.ticketing.faults.push(Fault.LOSE_RESPONSE)
    ledger = _ledger(providers)
    report = run_scenario(_scenario(providers, ProviderKind.TICKETING, policy=defer), ledger=ledger)
    (op,) = ledger.list(tenant_id="t")
    assert (op.status, report.unknown, report.completed, report.mislabelled) == (S.UNKNOWN, 1, 0, 0)
    assert_unknowns_accounted(ledger, pending_review={op.operation_id})
    with pytest.raises(AssertionError, match="no evidence and no pending review"):
        assert_unknowns_accounted(ledger)


def test_concurrent_resumers_dispatch_once(providers: Providers) -> None:
    """Three resumers racing on a thread crashed after its claim: one effect per intent."""
    ledger = SQLiteLedger(
        sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None),
        clock=providers.clock.now,
    )
    ledger.setup()
    calls = [
        builtin_call(ProviderKind.CRM, 0, tag="t"),
        builtin_call(ProviderKind.MAIL, 1, tag="t"),
    ]
    report = run_scenario(
        _scenario(
            providers,
            ProviderKind.CRM,
            tool_calls=calls,
            crash_at=CrashPoint.AFTER_CLAIM,
            resumers=3,
        ),
        ledger=ledger,
    )
    assert (report.intents, report.effects, report.duplicates, report.mislabelled) == (2, 2, 0, 0)
    assert providers.crm.stats().replays + providers.mail.stats().replays == 0


def test_an_async_scenario_runs_on_the_async_ledger(providers: Providers) -> None:
    """The same crash driven with ainvoke on AsyncSQLiteLedger: one effect, confirmed."""
    ledger = AsyncSQLiteLedger(
        sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None),
        clock=providers.clock.now,
    )
    asyncio.run(ledger.setup())
    report = run_scenario(
        _scenario(
            providers, ProviderKind.MAIL, crash_at=CrashPoint.AFTER_RECEIPT, asynchronous=True
        ),
        ledger=ledger,
    )
    assert (report.crashes, report.effects, report.duplicates, report.completed) == (1, 1, 0, 1)


def test_schedules_are_reproducible_from_their_seed() -> None:
    """A seed names one schedule on every run; other seeds give other schedules."""
    assert Schedule.generate(321) == Schedule.generate(321)
    assert len({Schedule.generate(seed) for seed in range(50)}) == 50


def test_unevidenced_rejection_is_found_in_the_event_log() -> None:
    """An unknown rejected by an operator passes; one rejected by a refused resend is flagged."""
    ledger = InMemoryLedger()
    ledger.setup()
    owner = current_owner()
    for op_id in ("op-operator", "op-resend"):
        draft = OperationDraft(
            tenant_id="t", operation_id=op_id, action="a", payload_digest="0" * 64
        )
        op = ledger.prepare(draft, owner=owner).operation
        ledger.mark_unknown("t", op_id, token=op.fencing_token, reason="timeout")
    ledger.resolve("t", "op-operator", Resolution(decision="reject", by="alice", reason="checked"))
    resent = ledger.claim("t", "op-resend", owner=owner)
    ledger.reject(
        "t",
        "op-resend",
        token=resent.fencing_token,
        reason="revoked",
        evidence=Evidence.rejected("revoked", source="provider"),
        actor="provider",
    )
    with pytest.raises(AssertionError, match="op-resend") as failure:
        assert_no_unevidenced_rejections(ledger)
    assert "op-operator" not in str(failure.value)


def test_a_real_kill_in_a_forked_child_resumes_in_another(tmp_path: Path) -> None:
    """Killed (os._exit) after the provider acted, resumed in a fresh process: one effect."""
    ledger_path = tmp_path / "ledger.db"
    with SQLiteLedger.from_conn_string(str(ledger_path)) as ledger:
        ledger.setup()
    case = KillCase(
        backend="sqlite",
        asynchronous=False,
        kind=ProviderKind.CRM,
        point=CrashPoint.AFTER_PROVIDER,
        ledger_url=str(ledger_path),
        checkpoint_url=str(tmp_path / "checkpoints.db"),
        directory=str(tmp_path),
        run="t",
    )
    first = run_in_forked_child(_kill_child, case, True, crash_at=case.point, mode="exit")
    assert first.crashed_at is CrashPoint.AFTER_PROVIDER
    second = run_in_forked_child(_kill_child, case, False)
    assert second.ok, second.error
    assert (second.value.effects, second.value.duplicates, second.value.completed) == (1, 0, 1)


def test_a_refused_resend_does_not_relabel_an_applied_unknown_as_rejected(
    providers: Providers,
) -> None:
    """BUG (bugs.md #1): the CRM closed the case, the response was lost, then the
    authorization was revoked; the refused resend must not record "rejected: not carried out".
    """
    providers.crm.faults.push(Fault.LOSE_RESPONSE)
    ledger = _ledger(providers)
    report = run_scenario(
        _scenario(
            providers,
            ProviderKind.CRM,
            crash_at=CrashPoint.DURING_RECONCILE,
            between=providers.crm.revoke_authorization,
        ),
        ledger=ledger,
    )
    (op,) = ledger.list(tenant_id="t")
    assert providers.crm.effects_for("case-t-0") == 1
    assert op.status is not S.REJECTED, report.problems
    assert report.mislabelled == 0, report.problems


def test_two_identical_calls_in_one_message_are_two_intended_effects(
    providers: Providers,
) -> None:
    """Twins (same arguments, two ids, one AIMessage) are two operations: two effects, no excess."""
    schedule = Schedule.generate(0).with_(
        kind=Kind.REISSUED,
        calls=(ProviderKind.CRM,),
        faults=(None,),
        refaults=(),
        crash_at=None,
        revoke="none",
        twins=True,
        repeat=False,
        asynchronous=False,
        resumers=1,
    )
    sc = replace(schedule.scenario(providers), reissue="none")
    with SQLiteLedger.from_conn_string(":memory:", clock=providers.clock.now) as ledger:
        ledger.setup()
        report = run_scenario(sc, ledger=ledger)
        ops = ledger.list(tenant_id=sc.thread_id)
    assert len(sc.tool_calls) == 2
    assert providers.crm.effects == 2
    assert len(ops) == 2
    assert (report.duplicates, report.lost_receipts, report.violations) == (0, 0, 0)


def test_the_operator_never_gives_an_answer_that_could_apply_twice(providers: Providers) -> None:
    """Nothing seen and a request in flight without a key window: the operator leaves it pending;
    seen: confirm (or retry only inside an open key window); unseen and settled: reject or retry."""
    answer = operator(providers, random.Random(1))
    request = {
        "kind": "effect_review",
        "operation_id": "op-1",
        "action": "ticketing.create",
        "target": "ticket x",
        "allowed_decisions": ["confirm", "reject", "retry"],
        "retry_risk": {"key_window_open": False},
    }
    providers.ticketing.faults.push(Fault.LATE, delay=timedelta(minutes=5))
    with pytest.raises(ProviderTimeout):  # the request is in flight, unseen
        providers.ticketing.create_ticket("ticket x", "body")
    assert {str(answer(request)) for _ in range(20)} == {"None"}
    providers.clock.advance(timedelta(minutes=6))  # it lands: now the console shows it
    decisions = {answer(request)["decision"] for _ in range(40)}  # type: ignore[index]
    assert decisions == {"confirm"}
    unseen = {**request, "target": "ticket y"}
    decisions = {answer(unseen)["decision"] for _ in range(40)}  # type: ignore[index]
    assert decisions == {"reject", "retry"}


def test_a_bad_answer_is_drawn_for_both_kinds_of_request() -> None:
    """Bad answers exist for reviews and approvals, and none is a valid answer shape for both."""
    rng = random.Random(3)
    review = {"kind": "effect_review", "operation_id": "op-1"}
    approval = {"kind": "effect_approval", "operation_id": "op-1", "tool": "t", "args": {}}
    assert len({repr(bad_answer(review, rng)) for _ in range(60)}) >= 5
    assert len({repr(bad_answer(approval, rng)) for _ in range(60)}) >= 5


def test_a_bad_answer_counts_as_applied_only_when_its_own_digest_is_logged(
    providers: Providers,
) -> None:
    """Seed 1331's finding: a bad answer LangGraph never handed to a task (its interrupt id
    was stale) ran beside a good edit saved before a crash; the good edit's record ("edited
    by the reviewer", a reason the story never gave) was taken for the bad answer's. Only
    an answer mark with the bad value's own digest now convicts it."""
    ledger = _ledger(providers)
    sc = _scenario(providers, ProviderKind.CRM)
    good = {"decisions": [{"type": "edit", "edited_action": {"name": "x", "args": {}}}]}
    bad = {"decisions": [{"type": "maybe"}], "request_id": "op-1@1"}
    draft = OperationDraft(
        tenant_id=sc.thread_id, operation_id="op-1", action="a", payload_digest="0" * 64
    )
    ledger.prepare(draft)
    ledger.approve(
        sc.thread_id,
        "op-1",
        payload_digest="0" * 64,
        by="ana",
        answer=f"task:{answer_digest(good)}",
    )

    def applied(value: object) -> bool:
        story = _answer_applied(sc, value)
        reply = None
        try:
            while True:
                reply = story.send(reply).read(ledger)
        except StopIteration as done:
            return bool(done.value)

    assert applied(good)
    assert not applied(bad)


@pytest.mark.filterwarnings("ignore::langgraph_effects.DurabilityWarning")  # as the campaign
@pytest.mark.parametrize("order", ["before", "after"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_tool_retry_middleware_in_either_order_applies_nothing_twice(
    providers: Providers, order: str, mode: str
) -> None:
    """A ``middleware`` schedule with ToolRetryMiddleware before or after EffectMiddleware, a
    lost response at a provider without idempotency keys: 0 duplicates, 0 lost receipts
    (after: the retry is refused inside the dispatch, the run resumed and settled); the
    create_agent control with ToolRetryMiddleware alone applies it more than once."""
    schedule = Schedule.generate(0).with_(
        kind=Kind.MIDDLEWARE,
        repeat=False,
        calls=(ProviderKind.TICKETING,),
        faults=(Fault.LOSE_RESPONSE,),
        refaults=(),
        crash_at=None,
        revoke="none",
        asynchronous=mode == "async",
        resumers=1,
        policy="operator",
        bad_answers=0.0,
        tool_retry=order,
    )
    sc = schedule.scenario(providers)
    assert (sc.face, sc.tool_retry) == ("middleware", order)
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    try:
        if sc.asynchronous:
            aledger = AsyncSQLiteLedger(conn, clock=providers.clock.now)
            asyncio.run(aledger.setup())
            report = run_scenario(sc, ledger=aledger)
        else:
            ledger = SQLiteLedger(conn, clock=providers.clock.now)
            ledger.setup()
            report = run_scenario(sc, ledger=ledger)
    finally:
        conn.close()
    assert providers.ticketing.effects == 1
    assert (report.duplicates, report.lost_receipts, report.mislabelled) == (0, 0, 0)
    assert report.violations == 0, report.problems
    assert report.errors == (1 if order == "after" else 0)  # MiddlewareOrderError, then resumed

    control = Providers.open(None)
    try:
        report = run_scenario(schedule.scenario(control, control=True))
        assert control.ticketing.effects > 1
        assert report.duplicates > 0
    finally:
        control.close()


def _done(n: int, op_id: str = "op-1") -> ToolMessage:
    trace = {"operation_id": op_id, "status": "confirmed", "via": "replayed"}
    return ToolMessage("ok", tool_call_id=f"c{n}", id=f"m{n}", response_metadata={TRACE_KEY: trace})


def test_lost_effects_count_answers_beyond_what_acted_and_calls_left_unanswered() -> None:
    """An operation answered done twice in its timeline but applied once (a call meant again,
    answered from the first call's record) is a lost effect; so is a call of the last
    AIMessage a finished thread never answered; a person's own decision is theirs."""
    ledger = InMemoryLedger()
    ledger.setup()
    draft = OperationDraft(tenant_id="t", operation_id="op-1", action="a", payload_digest="0" * 64)
    op = ledger.prepare(draft).operation
    ai = AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "c9", "type": "tool_call"}])
    once = lambda _: 1  # noqa: E731
    lost = _lost_effects("s", once, [op], [ai], [_done(1), _done(2)], decided=(), finished=True)
    assert [line.split(": ", 1)[1][:9] for line in lost] == ["operation", "call c9 ("]
    assert _lost_effects("s", once, [op], [ai], [_done(1)], decided=(), finished=False) == []
    person = _lost_effects(
        "s", once, [op], [], [_done(1), _done(2)], decided={"op-1"}, finished=True
    )
    assert person == []


def test_a_not_done_answer_is_judged_by_the_operation_it_names_not_the_records_call_id() -> None:
    """Campaign seed 239 (``reused_ids``, twins): two identical calls ``c1`` and ``c1-twin``
    re-proposed under the same ids each met the other's record (ToolNode runs them in any
    order), so ``c1`` was answered "NOT carried out" from the record written by
    ``c1-twin``, which was indeed never applied, while ``c1``'s own record was. The
    answer is true (one of the two acted, the model was told so): the harness goes by
    the operation the message names. Naming the applied operation is still a problem."""
    ledger = InMemoryLedger()
    ledger.setup()

    def op(op_id: str, call: str) -> Any:
        draft = OperationDraft(
            tenant_id="t", operation_id=op_id, action="a", payload_digest="0" * 64,
            target="case", tool_call_id=call,
        )  # fmt: skip
        return ledger.prepare(draft).operation

    applied_op, refused_op = op("op-a", "c1"), op("op-b", "c1-twin")
    calls = [{"name": "t", "args": {}, "id": i, "type": "tool_call"} for i in ("c1", "c1-twin")]
    ai = AIMessage("", tool_calls=calls)

    def answer(call: str, op_id: str, text: str) -> ToolMessage:
        trace = {"operation_id": op_id, "status": "rejected", "via": "reviewed"}
        return ToolMessage(text, tool_call_id=call, response_metadata={TRACE_KEY: trace})

    def applied(o: Any) -> int:
        return 1 if o.operation_id == "op-a" else 0

    def lost(*messages: Any) -> list[str]:
        ops = [applied_op, refused_op]
        # Not finished: a prepared record may still act (the ledger half is not under test).
        return _lost_receipts("s", applied, ops, {}, [ai, *messages], pending=(), finished=False)

    refused = "Error: refused and NOT carried out"
    assert lost(answer("c1", "op-b", refused), _done(2, "op-a")) == []
    assert lost(answer("c1", "op-a", refused)) != []  # the applied one told not done
    untraced = ToolMessage(refused, tool_call_id="c1")  # no trace: by the record's call id
    assert lost(untraced) != []


def test_the_delivered_answers_are_those_of_the_final_timeline() -> None:
    """A ToolMessage a later checkpoint removed still counts (summarization); one of a branch
    a replay abandoned does not."""

    def snap(cid: str, parent: str | None, *messages: Any) -> Any:
        config = {"configurable": {"checkpoint_id": cid}}
        up = None if parent is None else {"configurable": {"checkpoint_id": parent}}
        return SimpleNamespace(config=config, parent_config=up, values={"messages": list(messages)})

    root = snap("1", None)
    answered = snap("2", "1", _done(1))
    summarized = snap("3", "2")  # m1 removed
    abandoned = snap("4", "1", _done(4))
    head = snap("5", "3", _done(5))
    history = [head, abandoned, summarized, answered, root]
    assert sorted(str(m.id) for m in _delivered(history, head)) == ["m1", "m5"]


def _run(sc: Scenario, providers: Providers) -> Any:
    """``sc`` on a fresh SQLite ``:memory:`` ledger (async when the scenario is)."""
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    try:
        if sc.asynchronous:
            aledger = AsyncSQLiteLedger(conn, clock=providers.clock.now)
            asyncio.run(aledger.setup())
            return run_scenario(sc, ledger=aledger)
        ledger = SQLiteLedger(conn, clock=providers.clock.now)
        ledger.setup()
        return run_scenario(sc, ledger=ledger)
    finally:
        conn.close()


@pytest.mark.filterwarnings("ignore::langgraph_effects.DurabilityWarning")  # as the campaign
@pytest.mark.parametrize("layout", ["tasks", "one_task", "body"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_functional_api_schedule_acts_once_per_intent_where_plain_tasks_act_again(
    providers: Providers, layout: str, mode: str
) -> None:
    """A ``functional_api`` schedule: a case closed twice on purpose (twins) and a ticket, the
    run killed after the provider acted, in tasks, one task or the entrypoint's body: each
    intended effect once, every "done" traced to its operation; plain tasks act again."""
    schedule = Schedule.generate(0).with_(
        kind=Kind.FUNCTIONAL,
        repeat=False,
        layout=layout,
        calls=(ProviderKind.CRM, ProviderKind.TICKETING),
        faults=(None, None),
        refaults=(),
        twins=True,
        approval=False,
        crash_at=CrashPoint.AFTER_PROVIDER,
        crash_hit=2,
        revoke="none",
        expire_keys=False,
        asynchronous=mode == "async",
        resumers=1,
        policy="confirm_if_seen",
        bad_answers=0.0,
    )
    sc = schedule.scenario(providers)
    assert (sc.face, sc.layout, len(sc.tool_calls)) == ("functional", layout, 3)
    report = _run(sc, providers)
    assert report.crashes == 1
    assert (providers.crm.effects, providers.ticketing.effects) == (2, 1)
    assert (report.duplicates, report.lost_effects, report.lost_receipts) == (0, 0, 0)
    assert (report.mislabelled, report.violations, report.completed) == (0, 0, 1), report.problems

    control = Providers.open(None)
    try:
        report = run_scenario(schedule.scenario(control, control=True))
        assert report.duplicates > 0
    finally:
        control.close()


def test_a_functional_answer_is_traced_to_the_operation_its_origin_names() -> None:
    """A Functional API answer names its origin (task and place), not its operation: it counts
    for the operation recording that origin, and one whose origin no operation records is lost."""
    ledger = InMemoryLedger()
    ledger.setup()
    draft = OperationDraft(
        tenant_id="t", operation_id="op-1", action="a", payload_digest="0" * 64, tool_call_id="k#0"
    )
    op = ledger.prepare(draft).operation

    def done(n: int, origin: str) -> ToolMessage:
        trace = {"origin": origin, "action": "a", "target": None, "status": "confirmed"}
        meta = {TRACE_KEY: trace}
        return ToolMessage("ok", tool_call_id=f"c{n}", id=f"m{n}", response_metadata=meta)

    once = lambda _: 1  # noqa: E731
    assert _lost_effects("s", once, [op], [], [done(1, "k#0")], decided=(), finished=True) == []
    twice = _lost_effects(
        "s", once, [op], [], [done(1, "k#0"), done(2, "k#0")], decided=(), finished=True
    )
    assert len(twice) == 1
    assert "answered done 2 time(s)" in twice[0]
    nowhere = _lost_effects("s", once, [op], [], [done(3, "k#1")], decided=(), finished=True)
    assert len(nowhere) == 1
    assert "which no operation of the thread records" in nowhere[0]


@pytest.mark.filterwarnings("ignore::langgraph_effects.DurabilityWarning")  # as the campaign
@pytest.mark.parametrize(
    ("call", "trusted", "resent"),
    [
        (ProviderKind.CRM, True, True),  # idempotentHint: resent, the server converges
        (ProviderKind.CRM, False, False),  # untrusted: never resent blindly
        (ProviderKind.MAIL, True, False),  # no annotations: destructive, not idempotent
    ],
)
def test_an_mcp_schedule_resends_only_what_the_trusted_server_calls_idempotent(
    providers: Providers, call: ProviderKind, trusted: bool, resent: bool
) -> None:
    """An ``mcp_tools`` schedule over the in-process MCP server: a lost response, then a kill
    after the server acted again or not: one effect; an idempotent tool of a trusted server
    is resent (and converges), any other goes to a person, who sees it at the provider; the
    read-only lookup stays a plain tool. Plain MCP tools in a ToolNode send the mail again."""
    schedule = Schedule.generate(0).with_(
        kind=Kind.MCP,
        repeat=False,
        trusted=trusted,
        calls=(call,),
        faults=(Fault.LOSE_RESPONSE,),
        refaults=(),
        twins=False,
        approval=False,
        crash_at=None,
        revoke="none",
        expire_keys=False,
        asynchronous=True,
        resumers=1,
        policy="confirm_if_seen",
        bad_answers=0.0,
    )
    sc = schedule.scenario(providers)
    names = [t.name for t in sc.tools]
    assert names == ["close_case", "send_mail", "create_ticket", "lookup_case"]
    effects = {t.name for t in sc.tools if getattr(t, "effect_spec", None) is not None}
    assert ("lookup_case" in effects) is not trusted
    report = _run(sc, providers)
    assert providers[call].effects == 1
    # The CRM sees the server's look before it closes, the close, and the lookup tool's read;
    # a resend is one more look (the case is closed with that resolution: nothing to do).
    first = {ProviderKind.CRM: 3, ProviderKind.MAIL: 1}[call]
    assert providers[call].stats().requests == first + resent
    assert report.human_resolved == (0 if resent else 1)
    assert (report.duplicates, report.lost_effects, report.lost_receipts) == (0, 0, 0)
    assert (report.mislabelled, report.violations, report.completed) == (0, 0, 1), report.problems

    control = Providers.open(None)
    try:
        crashed = schedule.with_(faults=(None,), crash_at=CrashPoint.AFTER_PROVIDER)
        report = run_scenario(crashed.scenario(control, control=True))
        # The server's idempotent close converges even without a ledger; the mail acts again.
        twice = call is not ProviderKind.CRM
        assert (control[call].effects, report.duplicates) == (1 + twice, int(twice))
    finally:
        control.close()


def test_a_valid_answer_refused_in_words_counts_only_when_its_question_was_current(
    providers: Providers,
) -> None:
    """A refusal (``REFUSED_NOTE``) of an answer to the question the ledger still asks is a
    valid answer refused; the same refusal of an answer to an approval shown again after
    the call was approved and sent (the ledger moved on) is not: it came too late."""
    from langgraph_effects.decide.answers import REFUSED_NOTE
    from langgraph_effects.review import APPROVAL_KIND
    from langgraph_effects.testing.scenario.count import _awaited, _refused_in_words

    ledger = _ledger(providers)
    sc = _scenario(providers, ProviderKind.CRM)
    for op_id in ("op-asked", "op-sent"):
        draft = OperationDraft(
            tenant_id=sc.thread_id, operation_id=op_id, action="a", payload_digest="0" * 64
        )
        ledger.prepare(draft)
    ledger.approve(sc.thread_id, "op-sent", payload_digest="0" * 64, by="ana")
    requests = [
        {
            "kind": APPROVAL_KIND,
            "operation_id": op_id,
            "request_id": f"{op_id}@0",
            "attempts": 0,
            "status": "prepared",
        }
        for op_id in ("op-asked", "op-sent")
    ]
    story = _awaited(sc, requests)
    reply = None
    try:
        while True:
            reply = story.send(reply).read(ledger)
    except StopIteration as done:
        current = done.value
    assert current == {"op-asked"}
    answers = [(r, {"decision": "reject", "by": "ana"}) for r in requests]
    refused = [SimpleNamespace(value={**r, "notice": f"{REFUSED_NOTE}too late."}) for r in requests]
    lines = _refused_in_words(answers, current, refused)
    assert len(lines) == 1, lines
    assert "op-asked@0" in lines[0]
    told = [
        SimpleNamespace(value={**r, "notice": "Your reject was not applied."}) for r in requests
    ]
    assert _refused_in_words(answers, current, told) == []


@pytest.mark.filterwarnings("ignore::langgraph_effects.DurabilityWarning")  # as the campaign
def test_an_update_state_fork_never_forks_the_runs_input_checkpoint() -> None:
    """Seed 298 (update_state_fork) drew the input checkpoint as the fork's origin:
    LangGraph's ``update_state(config, None)`` of it drops the input, the forked run's
    model read no message and raised, 13 times, counted nowhere (completion 0%). The
    story forks only a checkpoint past the input: the schedule finishes, with no error."""
    from langgraph_effects.testing.campaign import run_schedule

    report = run_schedule(298)
    assert (report.errors, report.completed, report.violations) == (0, 1, 0)
    assert report.intents == 2  # the schedule's call and its deliberate repeat


def test_a_run_failing_with_an_error_neither_ours_nor_a_faults_is_a_violation() -> None:
    """Seed 298's IndexError ran 13 times and showed in no column: a run's error that the
    package did not raise (an ``EffectsError``: a refusal it documents) and no fault
    injected is a violation now, said once per message."""
    from langgraph_effects.errors import MiddlewareOrderError, TransientProviderError
    from langgraph_effects.testing.faults import CrashPoint, InjectedCrash
    from langgraph_effects.testing.providers.faults import ProviderTimeout
    from langgraph_effects.testing.scenario.story import _unexplained

    said = _unexplained(IndexError("list index out of range"))
    assert said == "a run failed with IndexError: list index out of range"
    for expected in (
        MiddlewareOrderError("entered twice"),
        TransientProviderError("busy"),
        ProviderTimeout("crm", "close"),
        InjectedCrash(CrashPoint.AFTER_CLAIM),
    ):
        assert _unexplained(expected) is None


@pytest.mark.filterwarnings("ignore::langgraph_effects.DurabilityWarning")  # as the campaign
def test_an_answer_by_position_langgraph_refuses_is_given_by_id() -> None:
    """Seed 155 (functional_api): two parallel tasks ask; the state shows the one the
    entrypoint raised, so the story answered it by position, and LangGraph refused it
    ('multiple pending interrupts'), 12 runs, uncounted. The story answers by id then,
    as a person's client would: the schedule finishes with no error."""
    from langgraph_effects.testing.campaign import run_schedule

    report = run_schedule(155)
    assert (report.errors, report.completed, report.violations) == (0, 1, 0)


@pytest.mark.filterwarnings("ignore::langgraph_effects.DurabilityWarning")  # as the campaign
def test_a_task_that_crashed_beside_a_deferred_review_is_resumed(
    providers: Providers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 65 (middleware, async): a mail's response lost, its reconcile crashed
    (during_reconcile) while the sibling ticket's review interrupt was saved. The state
    showed only that deferred review, so the story stopped: the crashed task never ran
    again and the mail, sent once, stayed unknown with no evidence (1 lost receipt,
    1 mislabelled; in about half the runs, as the interrupt landed before or after the
    crash). The resumer restarts a failed run whatever review is open: the mail is
    reconciled, confirmed, sent once. The mail's search waits here, so the review is
    saved first on every run."""
    searched = providers.mail.search

    def slow_search(**filters: Any) -> list[dict[str, Any]]:
        time.sleep(0.3)  # the ticket's review is raised and saved meanwhile
        return searched(**filters)

    monkeypatch.setattr(providers.mail, "search", slow_search)
    providers.mail.faults.push(Fault.LOSE_RESPONSE)
    providers.ticketing.faults.push(Fault.LOSE_RESPONSE)
    ledger = _ledger(providers)
    sc = _scenario(
        providers,
        ProviderKind.MAIL,
        tool_calls=[
            builtin_call(ProviderKind.MAIL, 0, tag="t"),
            builtin_call(ProviderKind.TICKETING, 0, tag="t"),
        ],
        face="middleware",
        tool_retry="after",
        asynchronous=True,
        crash_at=CrashPoint.DURING_RECONCILE,
        policy=defer,
    )
    report = run_scenario(sc, ledger=ledger)
    mail = next(op for op in ledger.list(tenant_id="t") if op.action == "mail.send")
    assert report.crashes == 1, report.problems
    assert providers.mail.effects == 1
    assert mail.status is S.CONFIRMED, report.problems
    assert (report.lost_receipts, report.mislabelled, report.duplicates) == (0, 0, 0)


def test_a_resume_of_a_thread_killed_before_its_first_checkpoint_sends_the_request_again(
    providers: Providers,
) -> None:
    """A kill case's resume (``fresh=False``) on a thread LangGraph saved nothing of (the
    child died before the default durability's background write of the request): the
    person sends the request again, and it acts once. Before, the resume invoked None and
    failed with LangGraph's EmptyInputError, counted as a violation (seen in CI under
    load: kills of sqlite-async ticketing before_prepare and after_claim)."""
    ledger = _ledger(providers)
    report = run_scenario(_scenario(providers, ProviderKind.CRM, fresh=False), ledger=ledger)
    assert (report.errors, report.violations, report.effects, report.duplicates) == (0, 0, 1, 0)
    assert [op.status for op in ledger.list(tenant_id="t")] == [S.CONFIRMED]
    assert providers.crm.effects_for("case-t-0") == 1
