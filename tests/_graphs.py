"""Real LangGraph graphs for the node tests: a scripted chat model and a tiny ReAct loop.

The model is deterministic from the conversation (so a fresh process rebuilds
the same graph and resumes it): after the human message it proposes the
configured tool calls (fixed ids), after tool results it answers "done".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from langgraph_effects.node import EffectState, EffectToolNode, route_tool_calls


class ScriptedModel(BaseChatModel):
    """Proposes ``tool_calls`` once after the human message, then says ``done``."""

    tool_calls: list[dict[str, Any]]
    rounds: int = 1

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        done_rounds = sum(1 for m in messages if isinstance(m, AIMessage) and m.tool_calls)
        if done_rounds >= self.rounds or isinstance(messages[-1], ToolMessage) and self.rounds == 1:
            reply = AIMessage(content="done")
        else:
            calls = [
                {**tc, "id": f"{tc['id']}-r{done_rounds}" if done_rounds else tc["id"]}
                for tc in self.tool_calls
            ]
            reply = AIMessage(content="", tool_calls=calls, id=f"ai-{done_rounds}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


class State(MessagesState, EffectState):
    pass


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def build_graph(
    tools: Sequence[Any],
    tool_calls: list[dict[str, Any]],
    *,
    ledger: Any = None,
    checkpointer: Any = None,
    per_call: bool = True,
    plain: bool = False,
    node_kwargs: dict[str, Any] | None = None,
) -> Any:
    """agent -> tools -> agent; ``plain`` uses a ``ToolNode`` (the control)."""
    model = ScriptedModel(tool_calls=tool_calls)

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    node: ToolNode = (
        ToolNode(tools)
        if plain
        else EffectToolNode(tools, ledger=ledger, **(node_kwargs or {}))
    )
    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    router: Callable[..., Any] = route_tool_calls if per_call else tools_condition
    builder.add_conditional_edges("agent", router, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]
