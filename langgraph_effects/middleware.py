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
  as the operation's approval.

In HITL's ``per_call`` mode list HITL *before* ``EffectMiddleware`` (HITL then
asks before the operation is claimed). Listed after it, an edit would be applied
inside the dispatch, after the operation was bound to the model's arguments, so
the first gated call raises ``MiddlewareOrderError`` before anything is sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import ToolCall, ToolMessage
from langgraph.errors import GraphInterrupt
from langgraph.types import Command

from langgraph_effects._faces import (
    Execution,
    add_operations,
    build_call,
    effect_result,
    task_id_of,
)
from langgraph_effects.core.model import utcnow
from langgraph_effects.decide import EffectCall, EffectRunner, warn_durability
from langgraph_effects.effects import effect_spec
from langgraph_effects.errors import MiddlewareOrderError
from langgraph_effects.ledger.base import DEFAULT_LEASE

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
        lease_for, clock, interrupt_on_unknown: as for ``EffectToolNode``.
        hitl: the agent's ``HumanInTheLoopMiddleware``, if any: its approval of a
            gated effect counts as the effect's approval (asked once).
    """

    state_schema = EffectAgentState

    def __init__(
        self,
        *,
        ledger: Any,
        tenant_id: str | None = None,
        lease_for: timedelta = DEFAULT_LEASE,
        clock: Callable[[], datetime] = utcnow,
        interrupt_on_unknown: bool = True,
        hitl: Any = None,
    ) -> None:
        super().__init__()
        self.runner = EffectRunner(
            ledger, lease_for=lease_for, clock=clock, interrupt_on_unknown=interrupt_on_unknown
        )
        self.tenant_id = tenant_id
        self.hitl = hitl

    def _effect_request(self, request: ToolCallRequest) -> ToolCallRequest | None:
        """The request to run (with HITL's edit applied), or None for a plain tool."""
        request = _reviewed(request)
        tool = request.tool
        if tool is None or effect_spec(tool) is None:
            return None
        warn_durability(self._config(request))
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
        return build_call(
            request.tool,
            request.tool_call,
            tenant_id=tenant_id,
            workflow_id=workflow_id,
            state=request.state,
            task_id=task_id_of(request.runtime),
            preapproved_by="human-in-the-loop" if gated else None,
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
        op = self.runner.run(call, run)
        return effect_result(request, call, op, produced=run.first_answer(op))

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
        op = await self.runner.arun(call, run.acall)
        return effect_result(request, call, op, produced=run.first_answer(op))


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
