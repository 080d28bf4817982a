"""``ScriptedChatModel``: a chat model that needs no API key and always answers alike.

Tests, examples and benchmarks need an agent whose model proposes known tool
calls. A crash test also rebuilds the graph in a fresh process and resumes it,
so the model must propose there exactly what it proposed before: its reply is a
pure function of the conversation, never of its own history.

The common case is a plan, one list of tool calls per turn::

    from langgraph_effects.testing import ScriptedChatModel

    model = ScriptedChatModel(
        plan=[
            [{"name": "create_ticket", "args": {"title": "printer on fire"}}],  # turn 0
            [{"name": "notify", "args": {"to": "ops"}, "id": "notify-1"}],       # turn 1
        ]
    )

Turn N is the number of tool-calling AIMessages already in the conversation:
turn N proposes ``plan[N]`` (tool-call ids ``call-<turn>-<index>`` unless a call
names its own, the AIMessage id ``ai-<turn>``, so a replayed turn is the same
message); after the plan it replies ``final`` without tool calls.

Anything else (fresh ids on every proposal, a script shared by several agents)
is a ``script``: a function from the conversation to the reply.
``bind_tools`` returns the model itself (the plan already names the tools), so
it works with ``create_agent`` and ``create_react_agent``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

__all__ = ["Script", "ScriptedChatModel"]

Script = Callable[[Sequence[BaseMessage]], AIMessage]
"""A reply as a function of the conversation (the messages the model is given)."""


class ScriptedChatModel(BaseChatModel):
    """A deterministic chat model: a plan of tool calls per turn, or a ``script``.

    Attributes:
        plan: turn N proposes ``plan[N]``, each call ``{"name": ..., "args": {...}}``
            with an optional ``"id"`` (default ``call-<turn>-<index>``).
        final: the reply once the plan is done.
        quote_result: the final reply also quotes the last tool result
            (``"<final> <result>"``), for examples that print it.
        script: replaces the plan: the reply to a conversation, computed by you.
    """

    plan: list[list[dict[str, Any]]] = Field(default_factory=list)
    final: str = "done"
    quote_result: bool = False
    script: Script | None = None

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        """The model itself: the plan already names the tools."""
        return self

    def reply(self, messages: Sequence[BaseMessage]) -> AIMessage:
        """The reply to ``messages`` (what ``invoke`` returns)."""
        if self.script is not None:
            return self.script(messages)
        turn = sum(1 for m in messages if isinstance(m, AIMessage) and m.tool_calls)
        if turn < len(self.plan):
            calls = [
                {
                    "name": c["name"],
                    "args": c["args"],
                    "id": c.get("id") or f"call-{turn}-{i}",
                    "type": "tool_call",
                }
                for i, c in enumerate(self.plan[turn])
            ]
            return AIMessage(content="", tool_calls=calls, id=f"ai-{turn}")
        results = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
        if self.quote_result and results:
            return AIMessage(content=f"{self.final} {results[-1]}")
        return AIMessage(content=self.final)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.reply(messages))])
