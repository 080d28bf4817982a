"""The graphs a scenario runs: a tools_condition agent, a create_agent agent, a scripted model."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
)
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import RetryPolicy

from langgraph_effects.node import EffectState, EffectToolNode, route_tool_calls
from langgraph_effects.testing.models import ScriptedChatModel

# --------------------------------------------------------------------------- the graph


ToolRetryOrder = Literal["none", "before", "after"]
"""Where ``ToolRetryMiddleware`` sits relative to ``EffectMiddleware`` (``none``: absent)."""


class _State(MessagesState, EffectState):
    pass


def build_graph(
    tools: Sequence[BaseTool],
    tool_calls: Sequence[Mapping[str, Any]],
    *,
    ledger: Any = None,
    checkpointer: Any = None,
    control: bool = False,
    node_kwargs: Mapping[str, Any] | None = None,
    subgraph: bool = False,
    flakes: int = 0,
    fresh_ids: bool = False,
) -> Any:
    """agent -> tools -> agent, where the agent is a script: it proposes ``tool_calls``.

    The script answers from the conversation alone (same ids every time), so a
    fresh process rebuilds the same graph and resumes the thread. ``control``
    builds the stock setup: ``ToolNode`` + ``tools_condition``; otherwise
    ``EffectToolNode`` (with ``node_kwargs``) + ``route_tool_calls``.

    ``subgraph`` runs agent and tools as a subgraph of a one-node parent.
    ``flakes`` adds a read-only tool call that raises ``ConnectionError`` that
    many times, and a node ``RetryPolicy`` that retries it (the whole node
    re-runs). ``fresh_ids``: every proposal after the first mints new tool-call
    ids, as a real model does when it is asked again.
    """
    proposal = [dict(tc) for tc in tool_calls]
    tools = list(tools)
    if flakes:
        flaky = flaky_tool(flakes)
        tools.append(flaky)
        proposal.append(
            {"name": flaky.name, "args": {"ref": "r-1"}, "id": "call-flaky", "type": "tool_call"}
        )
    script = _Script(proposal, fresh_ids=fresh_ids)

    def agent(state: _State) -> dict[str, list[AnyMessage]]:
        return {"messages": [script.reply(state["messages"])]}

    node: ToolNode = (
        ToolNode(tools)
        if control
        else EffectToolNode(tools, ledger=ledger, **dict(node_kwargs or {}))
    )
    retry = (
        RetryPolicy(
            max_attempts=flakes + 1, initial_interval=0.0, jitter=False, retry_on=ConnectionError
        )
        if flakes
        else None
    )
    builder = StateGraph(_State)
    builder.add_node("agent", agent)
    builder.add_node("tools", node, retry_policy=retry)
    builder.add_edge(START, "agent")
    router: Callable[..., Any] = tools_condition if control else route_tool_calls
    builder.add_conditional_edges("agent", router, ["tools", END])
    builder.add_edge("tools", "agent")
    saver = checkpointer if checkpointer is not None else InMemorySaver()
    if not subgraph:
        return builder.compile(checkpointer=saver)
    parent = StateGraph(_State)
    parent.add_node("assistant", builder.compile())
    parent.add_edge(START, "assistant")
    parent.add_edge("assistant", END)
    return parent.compile(checkpointer=saver)


def build_agent(
    tools: Sequence[BaseTool],
    tool_calls: Sequence[Mapping[str, Any]],
    *,
    ledger: Any = None,
    checkpointer: Any = None,
    control: bool = False,
    node_kwargs: Mapping[str, Any] | None = None,
    tool_retry: ToolRetryOrder = "none",
) -> Any:
    """The same script as a ``create_agent`` agent: ``EffectMiddleware`` (none for a control).

    ``tool_retry``: LangChain's ``ToolRetryMiddleware`` (its defaults, without the
    delay) listed ``before`` or ``after`` ``EffectMiddleware`` (a control has it alone).
    """
    from langchain.agents import create_agent
    from langchain.agents.middleware import ToolRetryMiddleware

    from langgraph_effects.middleware import EffectMiddleware

    middleware: list[Any] = (
        [] if control else [EffectMiddleware(ledger=ledger, **dict(node_kwargs or {}))]
    )
    if tool_retry != "none":
        retry = ToolRetryMiddleware(initial_delay=0.0, jitter=False)
        middleware.insert(0 if tool_retry == "before" else len(middleware), retry)
    return create_agent(
        ScriptedChatModel(script=_Script([dict(tc) for tc in tool_calls]).reply),
        tools=list(tools),
        middleware=middleware,
        checkpointer=checkpointer if checkpointer is not None else InMemorySaver(),
    )


def flaky_tool(flakes: int) -> BaseTool:
    """A read-only tool that raises ``ConnectionError`` on its first ``flakes`` calls."""
    left = [flakes]
    lock = threading.Lock()

    @tool
    def check_status(ref: str) -> str:
        """Look up the status of a reference (read-only)."""
        with lock:
            failing = left[0] > 0
            left[0] -= failing
        if failing:
            raise ConnectionError("the status service is unreachable")
        return f"{ref}: ok"

    return check_status


class _Script:
    """The scripted model: after each human turn it proposes the calls; after tool results, done.

    Message ids derive from the conversation (the n-th human turn), so a replay
    rebuilds the same messages. With ``fresh_ids`` every proposal after the
    first carries new tool-call ids (``-g1``, ``-g2``...), like a model asked again.
    """

    def __init__(self, proposal: list[dict[str, Any]], *, fresh_ids: bool = False) -> None:
        self.proposal = proposal
        self.fresh_ids = fresh_ids
        self.proposals = 0
        self.lock = threading.Lock()

    def reply(self, messages: Sequence[BaseMessage]) -> AIMessage:
        turn = sum(1 for m in messages if isinstance(m, HumanMessage))
        suffix = "" if turn <= 1 else f"-h{turn}"
        if not isinstance(messages[-1], HumanMessage):
            return AIMessage(content="done", id=f"ai-done{suffix}")
        calls = self.proposal
        if self.fresh_ids:
            with self.lock:
                generation, self.proposals = self.proposals, self.proposals + 1
            if generation:
                suffix += f"-g{generation}"
                calls = [{**tc, "id": f"{tc['id']}-g{generation}"} for tc in calls]
        return AIMessage(content="", tool_calls=calls, id=f"ai-proposal{suffix}")
