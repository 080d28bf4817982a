"""Counting a scenario's outcome: intents against effects at the providers, receipts, answers."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Collection, Generator, Mapping, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    HumanMessage,
    ToolMessage,
)

from langgraph_effects.core.model import (
    TAKEOVER_PREFIX,
    Decision,
    Operation,
    OperationEvent,
    OperationKey,
    Resolution,
)
from langgraph_effects.core.plan import operator_decisions
from langgraph_effects.decide.answers import REFUSED_NOTE, UNAPPLIED, answer_digest
from langgraph_effects.decide.messages import TRACE_KEY
from langgraph_effects.ledger.base import AsyncLedger, Ledger
from langgraph_effects.review import APPROVAL_KIND, REVIEW_KIND
from langgraph_effects.testing.assertions import mislabelled_operations
from langgraph_effects.testing.draws import (
    branch_targets,
    queued_reviews,
)
from langgraph_effects.testing.scenario.case import Scenario
from langgraph_effects.testing.scenario.policies import CONSOLE, decision_of, target_of
from langgraph_effects.testing.scenario.report import ScenarioReport
from langgraph_effects.testing.scenario.requests import _History, _LedgerCall, _Request, _Tally
from langgraph_effects.testing.scenario.tools import _KEYLESS, _SERVER_IDEMPOTENT, S
from langgraph_effects.testing.workflows import ORIGIN


def _events(key: OperationKey, ledger: Ledger | AsyncLedger) -> Any:
    return ledger.events(key.tenant_id, key.operation_id)


def _answer_applied(sc: Scenario, value: Any) -> Generator[_Request, Any, bool]:
    """Whether the ledger applied ``value`` as an answer to any operation of the thread
    (``decide.answers.answer_mark``: every applied answer is logged with its digest). A
    late answer logged as not applied (``decide.answers.late_refusal``) was not, nor a
    value kept at its place without applying (``decide.answers.kept_unapplied``)."""
    digest = answer_digest(value)
    for op in (yield from _thread_ops(sc)):
        events = yield _LedgerCall(functools.partial(_events, op.key))
        marks = (
            e.detail.get("answer")
            for e in events
            if isinstance(e.detail, dict)
            and not (e.evidence is not None and e.evidence.summary.startswith(UNAPPLIED))
        )
        if any(isinstance(mark, str) and digest in mark for mark in marks):
            return True
    return False


def _asked_again(answered: Any, interrupts: Sequence[Any]) -> list[tuple[str, Any]]:
    """The answers whose question the next state asks again, unchanged and unexplained.

    An answer applies (the operation moves on: another status or attempt, or no
    question at all, or the ledger logged it), or the
    question is asked again with a ``notice`` saying why. The same question asked
    again without one, by an answer the ledger never logged, is a lost answer (a
    refusal asks again with a notice too: ``decide.answers.REFUSED_NOTE``).
    """
    asked = {
        (str(i.value.get("operation_id")), i.value.get("status"), i.value.get("attempts")): i.value
        for i in interrupts
        if isinstance(i.value, dict)
    }
    again = []
    for request, answer in answered:
        key = (str(request.get("operation_id")), request.get("status"), request.get("attempts"))
        shown = asked.get(key)
        if shown is not None and "notice" not in shown:
            line = (
                f"the answer {answer!r:.160} to {request.get('request_id')} was neither applied "
                "nor refused: the same question was asked again without a word"
            )
            again.append((line, answer))
    return again


def _awaited(sc: Scenario, requests: Collection[Any]) -> Generator[_Request, Any, set[str]]:
    """The operations of ``requests`` whose question the ledger still asks: an approval of a
    record never approved nor sent, a review of an unknown record after the attempts the
    request shows. An answer to such a request is the answer to the current question; a
    request LangGraph shows again after a crash lost its answer (the ledger moved on) is
    not current, and an answer contradicting what was applied may be refused."""
    asked = {str(r.get("operation_id")): r for r in requests if isinstance(r, Mapping)}
    current = set()
    for op in (yield from _thread_ops(sc)) if asked else []:
        request = asked.get(op.operation_id)
        if request is None:
            continue
        if request.get("kind") == APPROVAL_KIND:
            awaited = op.status is S.PREPARED and op.authorization_ref is None
            awaited = awaited and op.attempts == 0
        else:
            awaited = request.get("kind") == REVIEW_KIND and op.status is S.UNKNOWN
            awaited = awaited and op.attempts == request.get("attempts")
        if awaited:
            current.add(op.operation_id)
    return current


def _refused_in_words(
    answered: Any, current: Collection[str], interrupts: Sequence[Any]
) -> list[str]:
    """The valid answers to a current question (``_awaited``) whose question the next state
    asks again, unchanged (same operation, status and attempts), with a refusal
    (``decide.answers.REFUSED_NOTE``): a truthful answer the person was allowed to give,
    refused. (A question that moved on was answered.)"""

    def question(request: Mapping[str, Any]) -> tuple[str, Any, Any]:
        return (str(request.get("operation_id")), request.get("status"), request.get("attempts"))

    refused = {
        question(i.value): str(i.value["notice"])
        for i in interrupts
        if isinstance(i.value, dict) and str(i.value.get("notice", "")).startswith(REFUSED_NOTE)
    }
    return [
        f"a valid answer {answer!r:.160} to the current request {request.get('request_id')} "
        f"was refused in words: {refused[question(request)]:.240}"
        for request, answer in answered
        if str(request.get("operation_id")) in current and question(request) in refused
    ]


def _decide_at_console(
    request: Mapping[str, Any], decision: Decision
) -> Generator[_Request, Any, Operation | None]:
    """``decision`` on the request's operation as ``langgraph-effects approve/reject/resolve``
    take it (``cli._decide``): the record read, the decision taken only where
    ``core.plan.operator_decisions`` allows it (the CLI refuses the rest), through the
    ledger's ``resolve``. The decided record, or None: refused."""
    tenant, op_id = str(request.get("tenant_id")), str(request.get("operation_id"))
    op: Operation | None = yield _LedgerCall(lambda ledger: ledger.get(tenant, op_id))
    if op is None or decision not in operator_decisions(op):
        return None
    order = Resolution(
        decision=decision,
        by=CONSOLE,
        reason="decided at the console",
        claimed_by=CONSOLE,
        verified_by=f"os:{CONSOLE}",
    )
    decided: Operation = yield _LedgerCall(lambda ledger: ledger.resolve(tenant, op_id, order))
    return decided


def _last_word_kept(
    console: Mapping[str, tuple[Decision, Operation]],
    answered: Any,
    ops: Mapping[str, Operation],
) -> list[str]:
    """The person's answers, given after an operator decided their question at the console,
    that did not end as promised: a reject or an edit after the operator's approve is the
    last word before dispatch (the call is not sent: rejected, or replaced by the edit); a
    decision the operator made final (rejected, confirmed) stands, whatever the answer."""
    lines = []
    for request, answer in answered:
        op_id = str(request.get("operation_id"))
        if op_id not in console or op_id not in ops:
            continue
        (decision, decided), now, ui = console[op_id], ops[op_id], decision_of(answer)
        if decision is Decision.APPROVE and ui in ("reject", "edit"):
            if now.status is not S.REJECTED or now.attempts:
                lines.append(
                    f"the person's {ui} of operation {op_id} after the operator approved it "
                    f"at the console, the last word before dispatch, did not stand: it is "
                    f"{now.status.value} after {now.attempts} attempt(s)"
                )
        elif decided.status.terminal and (now.status, now.attempts) != (
            decided.status,
            decided.attempts,
        ):
            lines.append(
                f"the operator's {decision.value} of operation {op_id} at the console was "
                f"undone by the person's {ui}: it is {now.status.value} after "
                f"{now.attempts} attempt(s)"
            )
    return lines


def _thread_ops(sc: Scenario) -> Generator[_Request, Any, list[Operation]]:
    """The thread's operations: of its tenant, or (tenant from the config) of any tenant.

    With the tenant in the config, an operation recorded under another tenant
    must show, so every tenant's operations of this thread are read.
    """
    if sc.control:
        return []
    if not sc.tenant_from_config:
        ops: list[Operation] = yield _LedgerCall(
            lambda ledger: ledger.list(tenant_id=sc.thread_id, limit=10_000)
        )
        return ops
    ops = yield _LedgerCall(lambda ledger: ledger.list(tenant_id=None, limit=100_000))
    return [op for op in ops if op.workflow_id == sc.thread_id]


def _ends_with_human(snapshot: Any) -> bool:
    messages = snapshot.values.get("messages") or []
    return bool(messages) and isinstance(messages[-1], HumanMessage)


def _note_repeats(sc: Scenario, tally: _Tally, messages: Sequence[AnyMessage]) -> None:
    """A re-sent request repeats on purpose the first calls the thread's messages answer.

    Read from the final messages: a sibling's answer LangGraph showed in
    ``get_state`` (a pending write) but dropped when the new request came was
    never part of the thread, and its call maps back to the earlier operation.
    """
    answered = _answered_first(messages)
    if sc.shape == "sub_agent" and (sc.variant == "last" or (sc.variant == "tool" and answered)):
        # Only the worker's last word came back (as the supervisor's message, or as the
        # answer of the tool that ran it): the turn ended, so it answered every call.
        answered = {str(tc["id"]) for tc in sc.tool_calls}
    meant = [*sc.tool_calls, *([sc.tool_calls[0]] * len(branch_targets(sc)))]
    for call in meant:
        target = target_of(call)
        if call["id"] in answered and target is not None:
            tally.intended[target] += 1
            tally.repeated[target] += 1


def _answered_first(messages: Sequence[AnyMessage]) -> set[str]:
    """The ids of the calls a ToolMessage of the first turn answers (a later turn may reuse
    the ids: only what comes before the next human message counts). A turn's calls may be
    proposed by no AIMessage (a hand-made ``Send`` fan-out)."""
    first = next((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), None)
    answered: set[str] = set()
    for m in messages[(len(messages) if first is None else first + 1) :]:
        if isinstance(m, HumanMessage):
            break
        if isinstance(m, ToolMessage):
            answered.add(m.tool_call_id)
    return answered


def _replaced(ops: Sequence[Operation]) -> dict[str, Operation]:
    """The operations a reviewer's edit replaced, by id -> the operation that replaced them."""
    by_id = {op.operation_id: op for op in ops}
    return {
        op.operation_id: by_id[op.replaced_by]
        for op in ops
        if op.replaced_by is not None and op.replaced_by in by_id
    }


def _apply_edits(tally: _Tally, ops: Sequence[Operation]) -> None:
    """Each edit the ledger records moves its call's intended effect to the edited call's
    target (an edit to a sibling's arguments makes that target meant twice)."""
    by_id = {op.operation_id: op for op in ops}
    for old_id, new in _replaced(ops).items():
        old = by_id[old_id].target
        if old is not None and new.target is not None and tally.intended[old] > 0:
            tally.intended[old] -= 1
            tally.intended[new.target] += 1


def _never_acted(
    sc: Scenario, tally: _Tally, ops: Sequence[Operation], decided: Collection[str]
) -> list[str]:
    """Intended effects the providers never applied, per target, beyond those an operation
    accounts for (rejected by a person or the provider, failed, left unknown, decided by a
    person): a call merged into an earlier call's operation, or never sent. Read when the
    thread has ended; an edited call's intent went to its replacement. Where the server
    makes a repeat a no-op (``_SERVER_IDEMPOTENT``), each intent needs an operation of its
    own, not an effect."""
    log = [e for provider in sc.providers for e in provider.effect_log()]
    applied: Counter[str] = Counter(e.target for e in log)
    replaced = _replaced(ops)
    mine = [op for op in ops if op.target is not None and op.operation_id not in replaced]
    excused: Counter[str] = Counter(
        str(op.target) for op in mine if op.status is not S.CONFIRMED or op.operation_id in decided
    )
    for target in {str(op.target) for op in mine if op.action in _SERVER_IDEMPOTENT}:
        applied[target], excused[target] = 0, sum(1 for op in mine if op.target == target)
    return [
        f"{sc.name}: target {target!r}: {n} intended, the provider applied "
        f"{applied[target]}, {excused[target]} operation(s) account for the rest: "
        f"{n - applied[target] - excused[target]} never acted"
        for target, n in sorted(tally.intended.items())
        if n > applied[target] + excused[target]
    ]


def _count_at_providers(
    sc: Scenario, tally: _Tally, ops: Sequence[Operation], *, finished: bool
) -> Generator[_Request, Any, dict[str, Any]]:
    """Counted at the providers and the ledger alone (no thread to read): duplicates and
    intended effects never acted, by target, and mislabelled operations."""
    histories = {}
    for op in ops:
        histories[op.operation_id] = yield _LedgerCall(functools.partial(_events, op.key))
    _apply_edits(tally, ops)
    duplicates, problems = _excess_by_target(sc, tally)
    decided = _decided_by_person(ops, histories)
    unsent = _never_acted(sc, tally, ops, decided) if finished else []
    wrong = mislabelled_operations(ops, histories, applied=_attributable(sc.applied, ops))
    problems += unsent + [f"{sc.name}: {line}" for line in wrong]
    return {
        "effects": sum(p.effects for p in sc.providers),
        "duplicates": duplicates,
        "lost_effects": len(unsent),
        "mislabelled": len(wrong),
        "unknown": sum(1 for op in ops if op.status is S.UNKNOWN),
        "problems": tuple(problems),
    }


def _excess_by_target(sc: Scenario, tally: _Tally) -> tuple[int, list[str]]:
    """Effects per target beyond the intended ones (two twins, a repeat, an edit are intended)."""
    log = [e for provider in sc.providers for e in provider.effect_log()]
    applied: Counter[str] = Counter(e.target for e in log)
    # Each line says under which keys the effects landed (one key twice: the provider
    # applied a resend; two keys: two operations) and whether a late request landed.
    keys = {
        t: [(e.idempotency_key, "late" if e.late else "now") for e in log if e.target == t]
        for t in applied
    }
    lines = [
        f"{sc.name}: target {target!r}: {n} effects for {tally.intended[target]} intended "
        f"(keys {keys[target]})"
        for target, n in sorted(applied.items())
        if n > tally.intended[target]
    ]
    return sum(max(0, n - tally.intended[t]) for t, n in applied.items()), lines


_NOT_DONE = ("NOT carried out", "was not carried out")


def _attributable(
    applied: Callable[[Operation], int | None] | None, ops: Sequence[Operation]
) -> Callable[[Operation], int | None] | None:
    """``applied``, but None where the provider cannot tell operations apart.

    A provider without idempotency key (the ticketing fake, any MCP tool) counts by
    target: two operations on one target (twins, a deliberate repeat) share its count.
    """
    if applied is None:
        return None
    shared = Counter((op.action, op.target) for op in ops)

    def attributable(op: Operation) -> int | None:
        keyless = op.action in _KEYLESS
        return None if keyless and shared[(op.action, op.target)] > 1 else applied(op)

    return attributable


def _decided_by_person(
    ops: Sequence[Operation], histories: Mapping[str, Sequence[OperationEvent]]
) -> set[str]:
    """The operations a person decided (their decision is theirs, not the library's)."""
    return {
        op.operation_id
        for op in ops
        for e in histories.get(op.operation_id, ())
        if e.evidence is not None and e.evidence.source == "operator"
    }


def _lost_receipts(
    name: str,
    applied: Callable[[Operation], int | None] | None,
    ops: Sequence[Operation],
    histories: Mapping[str, Sequence[OperationEvent]],
    messages: Sequence[AnyMessage],
    *,
    pending: Collection[str],
    finished: bool,
) -> list[str]:
    """Applied effects the ledger or the model's answer does not own up to (see ScenarioReport)."""
    if applied is None:
        return []
    problems = []
    decided_by_person = _decided_by_person(ops, histories)
    for op in ops:
        n = applied(op)
        if not n or op.operation_id in decided_by_person:
            continue
        events = histories.get(op.operation_id, ())
        evidenced = op.evidence_checked_at is not None or any(
            e.evidence is not None for e in events
        )
        # Dispatching: a worker holds (or held) the lease; the receipt is still on
        # its way or goes to reconciliation when the lease lapses: not lost yet.
        owned = (
            op.status in (S.CONFIRMED, S.DISPATCHING)
            or (op.status is S.UNKNOWN and (evidenced or op.operation_id in pending))
            or (op.status is S.PREPARED and not finished)
        )
        if not owned:
            problems.append(
                f"{name}: operation {op.operation_id} ({op.action} {op.target!r}): the "
                f"provider applied it {n} time(s), the ledger says {op.status.value}"
            )
    calls = {tc["id"]: tc for m in messages if isinstance(m, AIMessage) for tc in m.tool_calls}
    for m in messages:
        if not isinstance(m, ToolMessage) or not any(x in str(m.content) for x in _NOT_DONE):
            continue
        mine = _spoken_for(m, ops, calls)
        if not mine or any(op.operation_id in decided_by_person for op in mine):
            continue
        if all(applied(op) for op in mine):
            problems.append(
                f"{name}: the model was told call {m.tool_call_id} was not carried out; "
                "the provider applied it"
            )
    return problems


def _receipts_taken_over(
    sc: Scenario, ops: Sequence[Operation], histories: Mapping[str, Sequence[OperationEvent]]
) -> list[str]:
    """Receipts that came back before a crash or a failed commit (``Scenario.receipts_due``)
    and were not kept: a later run found the operation in flight and took it over."""
    due = dict(sc.receipts_due()) if sc.receipts_due is not None else {}
    lost = []
    for op in ops:
        token = due.get(op.operation_id, due.get(str(op.tool_call_id), -1))
        if token >= 0 and any(
            e.actor.startswith(TAKEOVER_PREFIX) and (e.fencing_token or 0) > token
            for e in histories.get(op.operation_id, ())
        ):
            lost.append(
                f"{sc.name}: operation {op.operation_id} ({op.action} {op.target!r}): its "
                "receipt came back before the process died or its commit failed, and was "
                "lost: taken over"
            )
    return lost


def _spoken_for(
    message: ToolMessage, ops: Sequence[Operation], calls: Mapping[str | None, Any]
) -> list[Operation]:
    """The operations a ToolMessage answers for: the one its trace names
    (``decide.messages.trace_metadata``), else those of its tool-call id, else its
    call's target. The record's own ``tool_call_id`` is only the id of the call that
    wrote it: twins of one AIMessage re-proposed under the same ids (``reused_ids``)
    may each meet the other's record, so that id can name the wrong twin."""
    trace = message.response_metadata.get(TRACE_KEY)
    if isinstance(trace, Mapping) and trace.get("operation_id") is not None:
        named = [op for op in ops if op.operation_id == str(trace["operation_id"])]
        if named:
            return named
    call = calls.get(message.tool_call_id)
    target = None if call is None else target_of(call)
    return [op for op in ops if op.tool_call_id == message.tool_call_id] or [
        op for op in ops if target is not None and op.target == target
    ]


def _delivered(history: Sequence[Any], head: Any) -> list[ToolMessage]:
    """Every ToolMessage the timeline ending at ``head`` delivered, once each: the messages
    of each checkpoint on its lineage (parent to parent), so one a later step removed
    (summarization, ``RemoveMessage``) still counts, and one of an abandoned branch
    (a replay or fork went elsewhere) does not."""
    by_id = {h.config["configurable"]["checkpoint_id"]: h for h in history}
    seen: dict[str, ToolMessage] = {}
    at = head
    while at is not None:
        for m in (at.values or {}).get("messages", []):
            if isinstance(m, ToolMessage):
                seen.setdefault(str(m.id), m)
        parent = at.parent_config
        at = None if parent is None else by_id.get(parent["configurable"]["checkpoint_id"])
    return list(seen.values())


def _lost_effects(
    name: str,
    applied: Callable[[Operation], int | None] | None,
    ops: Sequence[Operation],
    messages: Sequence[AnyMessage],
    delivered: Sequence[ToolMessage],
    *,
    decided: Collection[str],
    finished: bool,
) -> list[str]:
    """Intended effects that never acted (see ScenarioReport).

    Reported done when not: every effect ToolMessage names its operation and the
    status it answered with (``decide.messages.trace_metadata``); an operation
    answered ``confirmed`` in its timeline (``delivered``) more often than its
    provider applied it told the model of an effect that did not happen (a call
    meant again, answered from an earlier call's record). Never sent: a finished
    thread whose last AIMessage (in ``messages``, the final ones) still has a call
    that no ToolMessage after it answers. A person's own decision is theirs.
    """
    problems = []
    by_id = {op.operation_id: op for op in ops}
    # A Functional API answer names the call's origin (its task and its place among the
    # calls equal to it), which the operation records as its tool-call id, with its action
    # and target (testing.workflows): unequal calls of one task may share a place.
    origins: dict[tuple[str, str, str | None], list[str]] = {}
    for record in ops:
        if record.tool_call_id:
            at = (record.tool_call_id, record.action, record.target)
            origins.setdefault(at, []).append(record.operation_id)
    done: Counter[str] = Counter()
    for m in delivered:
        trace = m.response_metadata.get(TRACE_KEY) if isinstance(m, ToolMessage) else None
        if not isinstance(trace, Mapping) or trace.get("status") != S.CONFIRMED.value:
            continue
        if ORIGIN in trace:
            at = (str(trace[ORIGIN]), str(trace.get("action")), trace.get("target"))
            if at not in origins:
                problems.append(
                    f"{name}: call {m.tool_call_id} was answered done from {trace[ORIGIN]}, "
                    "which no operation of the thread records"
                )
                continue
            done[origins[at][0] if len(origins[at]) == 1 else "|".join(origins[at])] += 1
            continue
        done[str(trace.get("operation_id"))] += 1
    for op_id, answers in sorted(done.items()):
        op = by_id.get(op_id)
        n = None if op is None or applied is None or op_id in decided else applied(op)
        if op is not None and n is not None and answers > n:
            problems.append(
                f"{name}: operation {op_id} ({op.action} {op.target!r}) was answered done "
                f"{answers} time(s); the provider applied it {n} time(s)"
            )
    last = next(
        (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], AIMessage)), None
    )
    if finished and last is not None:
        answered = {m.tool_call_id for m in messages[last + 1 :] if isinstance(m, ToolMessage)}
        message = messages[last]
        assert isinstance(message, AIMessage)
        problems.extend(
            f"{name}: call {tc['id']} ({tc['name']}) was never answered: the thread ended "
            "without it"
            for tc in message.tool_calls
            if tc["id"] not in answered
        )
    return problems


def _count(
    sc: Scenario, tally: _Tally, state: Any, *, finished: bool
) -> Generator[_Request, Any, ScenarioReport]:
    effects = sum(p.effects for p in sc.providers)
    ops = yield from _thread_ops(sc)
    _apply_edits(tally, ops)
    if sc.reissue == "resend" and not sc.summarize:
        _note_repeats(sc, tally, (state.values or {}).get("messages", []))
    if sc.count_by_target:
        duplicates, problems = _excess_by_target(sc, tally)
    else:
        duplicates = sum(p.duplicates for p in sc.providers)
        problems = [f"{sc.name}: {duplicates} duplicate effect(s) at the providers"] * bool(
            duplicates
        )
    # A read among the calls (the MCP server's lookup) is no intended effect.
    effect_calls = sum(1 for call in sc.tool_calls if target_of(call) is not None)
    intents = effect_calls + len(branch_targets(sc)) + sum(tally.repeated.values())
    messages = (state.values or {}).get("messages", [])
    if sc.control:
        unsent = _lost_effects(sc.name, None, (), messages, (), decided=(), finished=finished)
        return ScenarioReport(
            scenario=sc.name,
            intents=intents,
            effects=effects,
            duplicates=duplicates,
            lost_effects=len(unsent),
            completed=int(finished),
            crashes=tally.crashes,
            errors=tally.errors,
            problems=tuple(problems + unsent),
        )
    histories = {}
    for op in ops:
        histories[op.operation_id] = yield _LedgerCall(functools.partial(_events, op.key))
    applied = _attributable(sc.applied, ops)
    # Pending a person: every operation an open interrupt asks about.
    pending = tally.pending | {str(i.value.get("operation_id")) for i in state.interrupts}
    pending |= queued_reviews(sc, ops, state)
    wrong = mislabelled_operations(ops, histories, pending_review=pending, applied=applied)
    problems.extend(f"{sc.name}: {line}" for line in wrong)
    lost = _lost_receipts(
        sc.name, applied, ops, histories, messages, pending=pending, finished=finished
    )
    lost += _receipts_taken_over(sc, ops, histories)
    problems.extend(lost)
    decided = _decided_by_person(ops, histories)
    delivered = _delivered((yield _History()), state)
    unsent = _lost_effects(
        sc.name, applied, ops, messages, delivered, decided=decided, finished=finished
    )
    if sc.count_by_target and finished:
        unsent += _never_acted(sc, tally, ops, decided)
    problems.extend(unsent)
    violations = list(tally.violations)
    if sc.tenant_from_config:
        violations += [
            f"operation {op.operation_id} recorded under tenant {op.tenant_id!r}, not the "
            f"thread's {sc.thread_id!r}"
            for op in ops
            if op.tenant_id != sc.thread_id
        ]
    for target in tally.repeated:
        made = sum(1 for op in ops if op.target == target)
        if finished and made < tally.intended[target]:
            violations.append(
                f"a call on {target!r} repeated on purpose after it was answered got no "
                f"operation of its own ({made} operation(s) for {tally.intended[target]} intents)"
            )
    problems.extend(f"{sc.name}: {line}" for line in violations)
    problems.extend(f"{sc.name}: {line}" for line in tally.lost_answers)
    problems.extend(f"{sc.name}: {line}" for line in tally.refused_answers)
    stats = yield _LedgerCall(lambda ledger: ledger.stats(tenant_id=sc.thread_id))
    human = sum(
        1
        for events in histories.values()
        if any(
            e.to_status.terminal and e.evidence is not None and e.evidence.source == "operator"
            for e in events
        )
    )
    settled = all(op.status.terminal for op in ops)
    return ScenarioReport(
        scenario=sc.name,
        intents=intents,
        effects=effects,
        duplicates=duplicates,
        unknown=sum(1 for op in ops if op.status is S.UNKNOWN),
        human_resolved=human,
        completed=int(finished and settled and len(ops) >= effect_calls),
        stale_token_refusals=stats.stale_token_refusals,
        mislabelled=len(wrong),
        lost_receipts=len(lost),
        lost_answers=len(tally.lost_answers),
        refused_answers=len(tally.refused_answers),
        lost_effects=len(unsent),
        violations=len(violations),
        crashes=tally.crashes,
        errors=tally.errors,
        problems=tuple(problems),
    )
