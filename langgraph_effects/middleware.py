"""``EffectMiddleware``: the decision core as a LangChain agent middleware (``create_agent``).

``create_agent`` sends one task per tool call, so each effect call meets its
own interrupts. The middleware wraps tool execution (``wrap_tool_call`` /
``awrap_tool_call``) with the same steps as ``EffectToolNode`` (``_faces.py``:
build the call, run it through the runner, answer from the record), and adds the
``effect_operations`` channel to the agent state.

With LangChain's ``HumanInTheLoopMiddleware``:

- a reviewer's ``edit`` (batched mode) is applied before the digest is taken,
  in either middleware order, so the operation binds to the call that runs (an
  edit naming another tool is decided for that tool); HITL's edit notice, reject
  and respond messages reach the model as HITL made them;
- pass ``hitl=`` (the HITL instance) and an effect with ``require_approval``
  that HITL already gates is not asked twice: the HITL approval is recorded
  as the operation's approval;
- with ``hitl=``, an answer HITL's batched request raises on (2 decisions for 3
  action requests, a type not offered) is refused, never kept: HITL asks again at
  once, the interrupt id unchanged, saying why in front of each action request's
  description, and the next answer applies (``decide.drive.ask_upstream``). Without
  it LangGraph keeps the failed answer and hands it to HITL on every later run: the
  thread is wedged, every later answer fails on the first one.

In HITL's ``per_call`` mode list HITL *before* ``EffectMiddleware`` (HITL then
asks before the operation is claimed). Listed after it, an edit would be applied
inside the dispatch, after the operation was bound to the model's arguments, so
the first gated call raises ``MiddlewareOrderError`` before anything is sent.

``EffectMiddleware`` is the retry layer for effect tools: it resends only what is
provably safe (``TransientProviderError``, a key the provider deduplicates), never
an ambiguous failure, and the model reads "could not confirm", never "please try
again". Leave effect tools out of ``ToolRetryMiddleware`` or list it *before*
``EffectMiddleware`` (a retry then re-runs the decision, answered from the record).
Listed after it, its retry would re-enter the tool body inside one dispatch: the
second entry raises ``MiddlewareOrderError`` before the provider is called again
(``slot.CallSlot``: a body runs at most once per dispatch). See
``docs/middleware-order.md``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import ToolCall, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.errors import GraphInterrupt
from langgraph.types import Command

from langgraph_effects._faces import (
    Execution,
    add_operations,
    atrace_decision,
    build_call,
    effect_calls,
    effect_result,
    task_id_of,
    timeline_of_request,
    trace_decision,
    unanswered_calls,
)
from langgraph_effects.core.model import utcnow
from langgraph_effects.decide import (
    ANONYMOUS,
    APPROVAL_MODES,
    ApprovalMode,
    EffectCall,
    EffectRunner,
    Trace,
    aask_upstream,
    ask_upstream,
    authenticated_user,
    record_refusals,
    warn_durability,
)
from langgraph_effects.decide.identity import keeps_answers, timeline_of
from langgraph_effects.effects import effect_spec
from langgraph_effects.errors import MiddlewareOrderError
from langgraph_effects.ledger.base import DEFAULT_LEASE
from langgraph_effects.review import hitl_misfit

__all__ = ["EffectAgentState", "EffectMiddleware"]

_HITL_EDITS = "hitl_edited_tool_calls"  # HumanInTheLoopMiddleware's state key for edits


def _reviewed(request: ToolCallRequest) -> ToolCallRequest:
    """The call a reviewer's batched ``edit`` replaced this one with, as HITL will run it.

    The reviewer's call is what runs, so it is what the operation binds to, in either
    middleware order; an edit naming another tool is decided for that tool.
    """
    state = request.state if isinstance(request.state, dict) else {}
    edited = (state.get(_HITL_EDITS) or {}).get(request.tool_call["id"])
    if not isinstance(edited, dict):
        return request
    tool_call: ToolCall = {**request.tool_call, "name": edited["name"], "args": edited["args"]}
    if edited["name"] == request.tool_call["name"]:
        return request.override(tool_call=tool_call)
    runtime_tools = getattr(request.runtime, "tools", None) or []
    tool = next((t for t in runtime_tools if t.name == edited["name"]), None)
    if tool is None:
        return request  # HITL itself refuses an edit naming a tool the agent lacks
    return request.override(tool_call=tool_call, tool=tool)


class EffectAgentState(AgentState[Any]):
    """Agent state with the operation ids the thread owns."""

    effect_operations: NotRequired[Annotated[list[str], add_operations]]


class EffectMiddleware(AgentMiddleware[EffectAgentState, Any, Any]):
    """Run effect tools of a ``create_agent`` agent through the ledger.

    Args:
        ledger: a sync ``Ledger`` or an ``AsyncLedger`` (see ``EffectToolNode``).
        tenant_id: default ``config["configurable"]["tenant_id"]``, else ``"default"``.
        lease_for, clock, interrupt_on_unknown, anonymous_answers, trace_metadata: as
            for ``EffectToolNode``.
        hitl: the agent's ``HumanInTheLoopMiddleware``, if any: its approval of a
            gated effect counts as the effect's approval (asked once), recorded as
            decided by the run's authenticated user (LangGraph Server), else as
            ``anonymous`` when ``anonymous_answers``; with neither, the ledger asks
            its own approval, which names who decides. An answer to its batched
            request that it raises on is refused and asked again, saying why
            (its ``after_model`` is wrapped, on the instance).
        approvals: ``"per_call"`` (default): each effect call needing an approval
            asks in its own interrupt (answered by interrupt id when several are
            pending). ``"batched"``: the approvals of one AIMessage are asked in
            **one** interrupt, in ``after_model`` (where ``HumanInTheLoopMiddleware``
            asks), in its shape (``{"decisions": [...]}`` in order, no interrupt id
            needed: Agent Chat UI), before any call dispatches.
        tools: the agent's effect tools; needed for ``"batched"`` (``after_model``
            sees tool names only), and with ``hitl`` for its refusals to be recorded:
            a call HITL rejects (or answers in the tool's place) never runs, so
            ``before_model`` records it on its operation, rejected by the run's
            authenticated user (else ``anonymous``), with the reviewer's message.
            They are not registered with the agent.
    """

    state_schema = EffectAgentState

    def __new__(cls, *args: Any, approvals: ApprovalMode = "per_call", **kwargs: Any) -> Any:
        # create_agent adds an after_model node only for a class that defines the hook:
        # an agent asking per call keeps its graph as it was.
        if cls is EffectMiddleware:
            refusals = kwargs.get("hitl") is not None and bool(kwargs.get("tools"))
            cls = {
                (False, False): EffectMiddleware,
                (True, False): _BatchedEffectMiddleware,
                (False, True): _HitlEffectMiddleware,
                (True, True): _BatchedHitlEffectMiddleware,
            }[(approvals == "batched", refusals)]
        return super().__new__(cls)

    def __init__(
        self,
        *,
        ledger: Any,
        tenant_id: str | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
        clock: Callable[[], datetime] = utcnow,
        interrupt_on_unknown: bool = True,
        hitl: Any = None,
        approvals: ApprovalMode = "per_call",
        tools: Sequence[BaseTool] = (),
        anonymous_answers: bool = False,
        trace_metadata: bool = True,
    ) -> None:
        super().__init__()
        if approvals not in APPROVAL_MODES:
            raise ValueError(f"approvals must be one of {APPROVAL_MODES}, got {approvals!r}")
        if approvals == "batched" and not any(effect_spec(t) for t in tools):
            raise ValueError(
                "approvals='batched' needs the agent's effect tools: EffectMiddleware(tools=[...])"
            )
        # create_agent runs each tool call as its own task: group commit coalesces
        # the sibling tasks' write-aheads and receipts (``decide.commit``).
        self.runner = EffectRunner(
            ledger,
            lease_for=lease_for,
            clock=clock,
            interrupt_on_unknown=interrupt_on_unknown,
            group_commit=True,
            anonymous_answers=anonymous_answers,
        )
        self.anonymous_answers = anonymous_answers
        self.trace_metadata = trace_metadata
        self.tenant_id = tenant_id
        self.hitl = hitl
        if hitl is not None:
            _refuse_failed_answers(hitl)
        self.approvals = approvals
        self._effect_tools = {t.name: t for t in tools if effect_spec(t) is not None}

    def _effect_request(self, request: ToolCallRequest) -> ToolCallRequest | None:
        """The request to run (with HITL's edit applied), or None for a plain tool."""
        request = _reviewed(request)
        tool = request.tool
        if tool is None or effect_spec(tool) is None:
            return None
        warn_durability(self._config(request), answers_kept=keeps_answers(request.state))
        return request

    @staticmethod
    def _config(request: ToolCallRequest) -> Any:
        return (request.runtime.config if request.runtime is not None else None) or {}

    def _build(self, request: ToolCallRequest, thread: tuple[str, str]) -> EffectCall:
        assert request.tool is not None
        gated = self.hitl is not None and request.tool_call["name"] in getattr(
            self.hitl, "interrupt_on", {}
        )
        workflow_id, tenant_id = thread
        user = authenticated_user(self._config(request))
        approver = user or (ANONYMOUS if self.anonymous_answers else None)
        return build_call(
            request.tool,
            request.tool_call,
            tenant_id=tenant_id,
            workflow_id=workflow_id,
            timeline=timeline_of_request(request),
            task_id=task_id_of(request.runtime),
            preapproved_by=approver if gated else None,
            user=user,
        )

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Decide an effect call through the ledger; pass other tools through."""
        effect_request = self._effect_request(request)
        if effect_request is None:
            return handler(request)
        request = effect_request
        call = self._build(request, self.runner.tenant_for(self._config(request), self.tenant_id))
        run = Execution(request, _refuse_inner_review(handler))
        trace = Trace()
        op = self.runner.run(call, run, trace=trace)
        via = trace.via if self.trace_metadata else None
        answer = effect_result(
            request, call, op, produced=run.first_answer(op), via=via, notices=trace.notices
        )
        trace_decision(request, call, op, trace.via, answer)
        return answer

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async twin of ``wrap_tool_call``."""
        effect_request = self._effect_request(request)
        if effect_request is None:
            return await handler(request)
        request = effect_request
        thread = await self.runner.atenant_for(self._config(request), self.tenant_id)
        call = self._build(request, thread)
        run = Execution(request, _arefuse_inner_review(handler))
        trace = Trace()
        op = await self.runner.arun(call, run.acall, trace=trace)
        via = trace.via if self.trace_metadata else None
        answer = effect_result(
            request, call, op, produced=run.first_answer(op), via=via, notices=trace.notices
        )
        await atrace_decision(request, call, op, trace.via, answer)
        return answer


_ORDER = (
    "HumanInTheLoopMiddleware in per_call mode must be listed before EffectMiddleware: "
    "listed after it, a reviewer's edit would change the call after its operation was "
    "bound to the model's arguments. Nothing was sent."
)


def _per_call_review(exc: GraphInterrupt) -> bool:
    """The interrupt is HITL's per-call approval request (``type: "tool_approval"``)."""
    interrupts = exc.args[0] if exc.args else ()
    return any(
        isinstance(getattr(i, "value", None), dict) and i.value.get("type") == "tool_approval"
        for i in interrupts
    )


def _refuse_inner_review(
    handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
) -> Callable[[ToolCallRequest], ToolMessage | Command[Any]]:
    """``handler``, refusing HITL's per-call review raised inside it (the wrong order)."""

    def run(request: ToolCallRequest) -> ToolMessage | Command[Any]:
        try:
            return handler(request)
        except GraphInterrupt as exc:
            if _per_call_review(exc):
                raise MiddlewareOrderError(_ORDER) from None
            raise

    return run


def _arefuse_inner_review(
    handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
) -> Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]:
    """Async twin of ``_refuse_inner_review``."""

    async def run(request: ToolCallRequest) -> ToolMessage | Command[Any]:
        try:
            return await handler(request)
        except GraphInterrupt as exc:
            if _per_call_review(exc):
                raise MiddlewareOrderError(_ORDER) from None
            raise

    return run


_GUARDED = "_langgraph_effects_guarded"


def _refuse_failed_answers(hitl: Any) -> None:
    """Wrap ``hitl``'s ``after_model`` / ``aafter_model`` (on the instance, which
    ``create_agent`` reads when it builds the node) so that an answer it raises on is
    refused and asked again, never kept (``decide.drive.ask_upstream``). Once per
    instance: a second ``EffectMiddleware`` given the same HITL leaves it as it is."""
    if getattr(hitl, _GUARDED, False):
        return
    after, aafter = getattr(hitl, "after_model", None), getattr(hitl, "aafter_model", None)
    if not callable(after) or not callable(aafter):
        return

    def after_model(state: Any, runtime: Any) -> Any:
        return ask_upstream(lambda: after(state, runtime), hitl_misfit)

    async def aafter_model(state: Any, runtime: Any) -> Any:
        return await aask_upstream(lambda: aafter(state, runtime), hitl_misfit)

    hitl.after_model, hitl.aafter_model = after_model, aafter_model
    setattr(hitl, _GUARDED, True)


def _run_config() -> Any:
    """The running graph's config (None outside a run): its authenticated user decides."""
    try:
        return get_config()
    except RuntimeError:
        return None


class _BatchedEffectMiddleware(EffectMiddleware):
    """``EffectMiddleware(approvals="batched")``: also asks in ``after_model``."""

    @property
    def name(self) -> str:
        return EffectMiddleware.__name__

    def _gated(self, state: Any, runtime: Any, thread: tuple[str, str]) -> list[EffectCall]:
        edited = (state.get(_HITL_EDITS) or {}) if isinstance(state, dict) else {}
        tool_calls = [tc for tc in unanswered_calls(state) if tc["id"] not in edited]
        timeline = timeline_of(_run_config(), task_id_of(runtime), state)
        calls = effect_calls(
            self._effect_tools,
            tool_calls,
            thread=thread,
            # Asked here, answered by the tool tasks of the next step.
            timeline=None if timeline is None else timeline.asking(),
            task_id=task_id_of(runtime),
            user=authenticated_user(_run_config()),
        )
        gated = getattr(self.hitl, "interrupt_on", {}) if self.hitl is not None else {}
        # A call HITL already asks about is approved there (``hitl=``): not asked twice.
        return [c for c in calls if c.tool_name not in gated]

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Ask the approvals of the model's calls in one interrupt, before any dispatches."""
        if unanswered_calls(state):
            thread = self.runner.tenant_for(get_config(), self.tenant_id)
            self.runner.ask_approvals(self._gated(state, runtime, thread))
        return None

    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """The async twin of ``after_model``."""
        if unanswered_calls(state):
            thread = await self.runner.atenant_for(get_config(), self.tenant_id)
            await self.runner.aask_approvals(self._gated(state, runtime, thread))
        return None


_HITL_DECISION = "hitl_interrupt_decision"
"""``lc_source`` of the ToolMessage HumanInTheLoopMiddleware writes for a reject or respond."""


class _HitlRefusals(EffectMiddleware):
    """With ``hitl=`` and ``tools=``: HITL's refusals recorded in ``before_model``."""

    @property
    def name(self) -> str:
        return EffectMiddleware.__name__

    def _refused(
        self, state: Any, thread: tuple[str, str], runtime: Any
    ) -> list[tuple[EffectCall, str]]:
        """The effect calls of the latest AIMessage that HITL refused, with its message."""
        messages = (state.get("messages") or []) if isinstance(state, dict) else []
        refusals: dict[str, str] = {}
        ai = None
        for message in reversed(messages):
            if not isinstance(message, ToolMessage):
                ai = message  # the AIMessage whose calls these ToolMessages answer
                break
            if message.additional_kwargs.get("lc_source") == _HITL_DECISION:
                refusals[message.tool_call_id] = str(message.content)
        if not refusals:
            return []
        tool_calls = [tc for tc in getattr(ai, "tool_calls", None) or [] if tc["id"] in refusals]
        calls = effect_calls(
            self._effect_tools,
            tool_calls,
            thread=thread,
            timeline=timeline_of(_run_config(), task_id_of(runtime), state),
            user=authenticated_user(_run_config()),
        )
        return [(c, refusals[c.tool_call_id]) for c in calls]

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Record the calls HITL refused since the last model call (see ``tools``)."""
        if any(isinstance(m, ToolMessage) for m in (state.get("messages") or [])[-1:]):
            thread = self.runner.tenant_for(get_config(), self.tenant_id)
            refused = self._refused(state, thread, runtime)
            if refused:
                self.runner.drive(record_refusals(self.runner.loop, refused), _sends_nothing)
        return None

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """The async twin of ``before_model``."""
        if any(isinstance(m, ToolMessage) for m in (state.get("messages") or [])[-1:]):
            thread = await self.runner.atenant_for(get_config(), self.tenant_id)
            refused = self._refused(state, thread, runtime)
            if refused:
                await self.runner.adrive(
                    record_refusals(self.runner.loop, refused), _asends_nothing
                )
        return None


class _HitlEffectMiddleware(_HitlRefusals):
    """``EffectMiddleware(hitl=..., tools=[...])``."""


class _BatchedHitlEffectMiddleware(_BatchedEffectMiddleware, _HitlRefusals):
    """``EffectMiddleware(approvals="batched", hitl=..., tools=[...])``."""


def _sends_nothing(args: dict[str, Any]) -> Any:
    raise AssertionError("recording refusals dispatches nothing")  # pragma: no cover


async def _asends_nothing(args: dict[str, Any]) -> Any:
    raise AssertionError("recording refusals dispatches nothing")  # pragma: no cover
