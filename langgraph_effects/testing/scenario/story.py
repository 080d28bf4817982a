"""The scenario's story: the requests it makes of a graph and a ledger, one turn at a time."""

from __future__ import annotations

import random
from collections.abc import Generator
from datetime import timedelta
from typing import Any

from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.types import Command

from langgraph_effects.errors import EffectsError, InvalidInput
from langgraph_effects.testing.draws import (
    branch_targets,
)
from langgraph_effects.testing.faults import (
    CrashPlan,
    InjectedCrash,
)
from langgraph_effects.testing.providers.faults import ProviderTimeout
from langgraph_effects.testing.scenario.case import Scenario
from langgraph_effects.testing.scenario.count import (
    _answer_applied,
    _answered_first,
    _asked_again,
    _awaited,
    _count,
    _decide_at_console,
    _ends_with_human,
    _last_word_kept,
    _note_repeats,
    _refused_in_words,
    _thread_ops,
)
from langgraph_effects.testing.scenario.policies import bad_answer, target_of
from langgraph_effects.testing.scenario.report import ScenarioReport
from langgraph_effects.testing.scenario.requests import (
    INTRUDER,
    _Fork,
    _GetState,
    _History,
    _Invoke,
    _Rebuild,
    _Request,
    _Tally,
    _thread_config,
    _with_tenant,
)

_POSITION_REFUSED = "multiple pending interrupts"
"""LangGraph's refusal of an answer by position while several interrupts are pending."""


def _unexplained(error: BaseException) -> str | None:
    """What a failed run says when neither the package nor the schedule's faults raised its
    error (a violation: the harness or LangGraph refused something of the run); None
    for the package's own errors (``EffectsError``: a refusal it documents, such as
    ``MiddlewareOrderError``) and the faults' (``InjectedCrash``; ``ProviderTimeout`` and
    the provider's refusals, which a plain tool passes on)."""
    if isinstance(error, EffectsError | ProviderTimeout | InjectedCrash):
        return None
    return f"a run failed with {type(error).__name__}: {str(error)[:160]}"


def _failed_tasks(state: Any) -> bool:
    """A task of the state's step failed and did not finish: no result, no interrupt.

    A run that fails in one task while a sibling's interrupt is saved leaves both: the
    interrupt shows, the failed task shows only in ``tasks``. A resume runs it again
    (the interrupted task asks again); until then its operation waits for nobody.
    """
    return any(t.error is not None and t.result is None and not t.interrupts for t in state.tasks)


def _story(sc: Scenario, tally: _Tally) -> Generator[_Request, Any, ScenarioReport]:
    """The scenario as a generator of requests (the sync and async drivers run it).

    First run (unless ``fresh`` is False), ``between``, then the recovery: the
    resumers at once (or a re-issue, or a resume under another tenant first),
    then rounds of: answer pending interrupts by the policy, or resume a run
    that failed, until the thread ends, only deferred reviews remain, or
    ``max_rounds`` pass; then, with ``travel``, once more from the past.
    After every failed run the clock passes the lease.
    """
    rng = random.Random(sc.seed)
    if sc.count_by_target:
        tally.intended.update(t for t in map(target_of, sc.tool_calls) if t is not None)
        tally.intended.update(branch_targets(sc))

    def settle(outcomes: list[BaseException | None]) -> None:
        for outcome in outcomes:
            if outcome is None:
                continue
            if isinstance(outcome, InjectedCrash):
                tally.crashes += 1
            else:
                tally.errors += 1
                unexplained = None if sc.control else _unexplained(outcome)
                if unexplained is not None and unexplained not in tally.violations:
                    tally.violations.append(unexplained)
            if sc.clock is not None:
                # The failed worker is "gone": let its lease expire (see module doc).
                # An async crash can leave a sibling call's lease behind too (its
                # task is cancelled mid-dispatch), so any failure moves the clock.
                sc.clock.advance(sc.lease_for + timedelta(seconds=1))

    tenant = sc.thread_id if sc.tenant_from_config else None
    config = _thread_config(sc, tenant)

    def run(*inputs: Any, at: dict[str, Any] | None = None) -> Generator[_Request, Any, Any]:
        outcomes = yield _Invoke(inputs, at or config)
        settle(outcomes)
        return outcomes

    def positional(
        command: Command[Any], by_id: Command[Any]
    ) -> Generator[_Request, Any, BaseException | None]:
        """Answer by position; where LangGraph refuses it because more interrupts are
        pending than the state shows (the Functional API lists only the one its
        entrypoint raised, while a parallel task's waits too), answer by id, as a
        person's client would."""
        (outcome,) = yield _Invoke((command,), config)
        if isinstance(outcome, RuntimeError) and _POSITION_REFUSED in str(outcome):
            (outcome,) = yield from run(by_id)
            return outcome  # type: ignore[no-any-return]
        settle([outcome])
        return outcome  # type: ignore[no-any-return]

    def answer_rounds() -> Generator[_Request, Any, bool]:
        for _ in range(sc.max_rounds):
            state = yield _GetState()
            if not state.interrupts:
                if not state.next:
                    return True
                yield from run(None)
                continue
            answers: dict[str, tuple[dict[str, Any], Any]] = {}
            tally.pending.clear()
            for pending in state.interrupts:
                answer = sc.policy(pending.value)
                if answer is None:
                    tally.pending.add(str(pending.value.get("operation_id")))
                else:
                    answers[pending.id] = (pending.value, answer)
            if not answers:
                if _failed_tasks(state):
                    # Only deferred reviews are open, but a task of the step failed
                    # (crashed while its sibling's interrupt was saved): the resumer
                    # restarts the run, as after any failure; the review stays open.
                    yield from run(None)
                    continue
                return False
            # An operator may decide some of these at the console first (Scenario.console).
            console: dict[str, Any] = {}
            at_console = sc.console or (lambda request: None)
            for request, _ in answers.values():
                decision = at_console(request)
                decided = (
                    None if decision is None else (yield from _decide_at_console(request, decision))
                )
                if decided is not None:
                    console[decided.operation_id] = (decision, decided)
                    tally.out_of_band += 1
            lone = len(state.interrupts) == 1
            if rng.random() < sc.bad_answers:
                yield from refuse_bad(state, rng.choice(sorted(answers)), lone)
                continue  # the story looks again: the request must still be there
            by_id: Command[Any] = Command(resume={i: a for i, (_, a) in answers.items()})
            current = yield from _awaited(sc, [r for r, _ in answers.values()])
            if lone and rng.random() < sc.by_position:
                ((_, answer),) = answers.values()
                outcome = yield from positional(Command(resume=answer), by_id)
            else:
                (outcome,) = yield from run(by_id)
            if isinstance(outcome, InvalidInput):
                tally.violations.append(f"a valid answer was refused: {outcome}")
            if outcome is None:
                after = yield _GetState()
                refused = _refused_in_words(answers.values(), current, after.interrupts)
                tally.refused_answers.extend(refused)
                if console:
                    now = {op.operation_id: op for op in (yield from _thread_ops(sc))}
                    tally.violations.extend(_last_word_kept(console, answers.values(), now))
                for line, given in _asked_again(answers.values(), after.interrupts):
                    # Asked again is fine when the ledger applied it (LangGraph may still
                    # show a request whose answer a crash kept it from saving).
                    if not (yield from _answer_applied(sc, given)):
                        tally.lost_answers.append(line)
        return False

    def refuse_bad(state: Any, interrupt_id: str, lone: bool) -> Generator[_Request, Any, None]:
        request = next(p.value for p in state.interrupts if p.id == interrupt_id)
        bad = bad_answer(request, rng)
        by_id: Command[Any] = Command(resume={interrupt_id: bad})
        if lone and rng.random() < sc.by_position:
            outcome = yield from positional(Command(resume=bad), by_id)
        else:
            (outcome,) = yield from run(by_id)
        if isinstance(outcome, InjectedCrash):
            return
        if outcome is None:
            # Refused in words (asked again with a notice), or not read at all: harmless
            # only if it was not applied. LangGraph may never hand it to a task (its
            # interrupt id went stale) while the run applies a good answer saved before a
            # crash; the ledger logs every answer it applies
            # with its value's digest, so only the bad value's own digest convicts it.
            if (yield from _answer_applied(sc, bad)):
                tally.violations.append(f"a bad answer was applied: {bad!r}")
            return
        after = yield _GetState()
        waiting = {str(p.value.get("operation_id")) for p in after.interrupts}
        if str(request["operation_id"]) not in waiting:
            tally.violations.append(
                f"after refusing {bad!r}, operation {request['operation_id']} is no longer "
                "asked about"
            )

    def intrude() -> Generator[_Request, Any, None]:
        state = yield _GetState()
        if not state.next:
            return  # nothing would run: there is nothing to refuse
        before = sum(p.effects for p in sc.providers)
        (outcome,) = yield _Invoke((None,), _with_tenant(config, INTRUDER))
        if isinstance(outcome, InjectedCrash):
            settle([outcome])
        elif outcome is None:
            tally.violations.append(f"a resume under tenant {INTRUDER!r} was not refused")
        if sum(p.effects for p in sc.providers) != before:
            tally.violations.append(f"a resume under tenant {INTRUDER!r} dispatched")

    def summarize(tally: _Tally) -> Generator[_Request, Any, None]:
        # The answered calls are meant again by the request that follows: noted now,
        # as their messages are about to go (the final messages no longer show them).
        state = yield _GetState()
        messages = (state.values or {}).get("messages", [])
        _note_repeats(sc, tally, messages)
        answered = _answered_first(messages)
        gone = [
            m
            for m in messages
            if sc.summary
            or (isinstance(m, AIMessage) and m.tool_calls)
            or (isinstance(m, ToolMessage) and m.tool_call_id in answered)
        ]
        if gone:
            removal: dict[str, list[Any]] = {
                "messages": [RemoveMessage(id=str(m.id)) for m in gone]
            }
            if sc.summary:  # what SummarizationMiddleware leaves: the summary alone
                removal["messages"] = [
                    RemoveMessage(id=REMOVE_ALL_MESSAGES),
                    HumanMessage(content="Summary: the cases were handled.", id="summary"),
                ]
            # As the tools node (a plain edge on): a node with a router would read the
            # update once more while routing, and remove each message twice.
            yield _Fork(state.config, removal, "tools")

    if sc.fresh:
        first = {"messages": [HumanMessage(content="go", id="human")]}
        yield from run(first)
        if sc.between is not None:
            sc.between()
    if sc.tools_after is not None:
        yield _Rebuild()
    recorded = bool((yield from _thread_ops(sc))) if tenant is not None else False
    if tenant is not None and recorded and sc.resume_tenant == "absent":
        config = _thread_config(sc, None)  # the thread is bound: its tenant must be used
    if tenant is not None and recorded and sc.resume_tenant == "other":
        yield from intrude()
    if sc.reissue == "lost":
        history = yield _History()
        before_model = [h for h in history if h.next and _ends_with_human(h)]
        start = before_model[-1].config if before_model else config
        yield from run(None, at=_with_tenant(start, tenant) if tenant else start)
    elif sc.reissue == "resend":
        if sc.summarize:
            # The thread runs to its end, its answered exchange is removed, then the
            # person asks for the same again (issue 22, row 1).
            yield from run(*((None,) * max(1, sc.resumers)))
            if (yield from answer_rounds()):
                yield from summarize(tally)
        again = {"messages": [HumanMessage(content="go again", id="human-2")]}
        yield from run(again)
    elif not sc.fresh and (yield _GetState()).created_at is None:
        # A resume after a kill that came before LangGraph saved the request (its default
        # durability writes checkpoints in the background): the thread has nothing to
        # resume, and the person sends the request again (LangGraph refuses None there).
        yield from run({"messages": [HumanMessage(content="go", id="human")]})
    else:
        yield from run(*((None,) * max(1, sc.resumers)))
    finished = yield from answer_rounds()
    if sc.repeat and finished:
        # A deliberate repeat: every call the first turn answered is meant again.
        state = yield _GetState()
        _note_repeats(sc, tally, (state.values or {}).get("messages", []))
        yield from run({"messages": [HumanMessage(content="the same again", id="human-2")]})
        finished = yield from answer_rounds()
    if sc.travel != "none":
        history = yield _History()
        past = [h for h in history[1:] if h.next]
        if sc.travel == "fork":
            # Not the run's input checkpoint: LangGraph's update_state(config, None) of it
            # drops the input it holds (the fork's next step runs on no messages), so
            # the fork would test nothing of ours (seed 298: the model read no message
            # and raised, 13 runs, uncounted).
            past = [h for h in past if h.next != ("__start__",)]
        if past:
            origin = rng.choice(past).config
            if sc.travel == "fork":
                origin = yield _Fork(origin)
            yield from run(None, at=origin)  # a snapshot's own config: no tenant in it
            finished = yield from answer_rounds()
    CrashPlan.disarm()  # counting must not crash
    state = yield _GetState()
    return (yield from _count(sc, tally, state, finished=finished))
