"""MCP tools as effects, declared once from their annotations: ``mcp_effects(tools, ...)``.

An MCP server describes each tool with hints (the MCP spec, "Tool annotations"):
``readOnlyHint`` (default false), ``destructiveHint`` (default true),
``idempotentHint`` (default false) and ``openWorldHint`` (default true). No MCP
version carries an idempotency key for a tool call, so the hints are all there is:

=====================================  ==========================================
what the (trusted) server says          what ``mcp_effects`` makes of the tool
=====================================  ==========================================
``readOnlyHint: true``                  stays a plain tool (no record, no review)
``idempotentHint: true``                an effect whose unclear outcome is resent
                                        with the same pinned arguments
                                        (``ProviderContract.convergent()``)
anything else, or no annotations        an effect never resent blindly: reconciled
                                        (``reconcile=``) or reviewed (``interrupt()``)
=====================================  ==========================================

An untrusted server's hints are ignored: every tool it serves is an effect that is
never resent blindly. Hints come in two layouts, both read here:

* ``langchain-mcp-adapters``: flat in ``tool.metadata``, camelCase, an unset hint as
  ``None``, and ``metadata`` None for a tool without annotations;
* ``langchain.mcp.MCPAdapter`` (langchain >= 1.5): nested in
  ``metadata["mcp"]["tool"]["annotations"]`` in snake_case, unset hints left out,
  and the server's identity in ``metadata["mcp"]["server"]``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.tools import BaseTool

from langgraph_effects.core.model import ProviderContract
from langgraph_effects.effects import Reconciler, effect
from langgraph_effects.errors import InvalidInput

__all__ = ["MCPHints", "mcp_effects", "mcp_hints"]

ArgumentRule = str | Callable[[dict[str, Any]], str]
"""An argument name (its value is used) or a function of the call's arguments."""

_HINTS = ("read_only", "destructive", "idempotent", "open_world")
_SPEC_DEFAULTS = {"read_only": False, "destructive": True, "idempotent": False, "open_world": True}


@dataclass(frozen=True, slots=True, kw_only=True)
class MCPHints:
    """A tool's MCP annotations, the spec's default filled in for each hint left unset.

    ``annotated`` is False when the server said nothing at all about the tool.
    """

    read_only: bool = False
    destructive: bool = True
    idempotent: bool = False
    open_world: bool = True
    annotated: bool = False


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _annotations(tool: BaseTool) -> dict[str, Any]:
    """The tool's raw annotations in snake_case, from either layout (empty: none given)."""
    metadata = tool.metadata or {}
    nested = metadata.get("mcp")
    if isinstance(nested, Mapping):  # langchain.mcp.MCPAdapter
        tool_meta = nested.get("tool")
        raw = tool_meta.get("annotations") if isinstance(tool_meta, Mapping) else None
        raw = raw if isinstance(raw, Mapping) else {}
    else:  # langchain-mcp-adapters: flat, camelCase, next to other metadata
        raw = metadata
    found = {_snake(str(key)): value for key, value in raw.items()}
    return {hint: found[f"{hint}_hint"] for hint in _HINTS if found.get(f"{hint}_hint") is not None}


def mcp_hints(tool: BaseTool) -> MCPHints:
    """What ``tool``'s MCP server says about it, with the spec's defaults for unset hints.

    Raises:
        InvalidInput: a hint that is not a boolean (named, with the tool).
    """
    given = _annotations(tool)
    for hint, value in given.items():
        if not isinstance(value, bool):
            raise InvalidInput(
                f"MCP tool {tool.name!r}: annotation {hint}_hint must be true, false or unset, "
                f"got {value!r}"
            )
    return MCPHints(**{**_SPEC_DEFAULTS, **given}, annotated=bool(given))


def _server_name(tool: BaseTool) -> str | None:
    nested = (tool.metadata or {}).get("mcp")
    server = nested.get("server") if isinstance(nested, Mapping) else None
    name = server.get("name") if isinstance(server, Mapping) else None
    return str(name) if name else None


def _from_arguments(tool: str, what: str, rule: ArgumentRule) -> Callable[[dict[str, Any]], str]:
    if callable(rule):
        return rule
    if not isinstance(rule, str) or not rule:
        raise InvalidInput(
            f"mcp_effects: {what}[{tool!r}] must be an argument name or a function of the "
            f"arguments, got {rule!r}"
        )

    def read(args: dict[str, Any]) -> str:
        if rule not in args:
            raise InvalidInput(
                f"MCP tool {tool!r}: {what} comes from argument {rule!r}, absent from the call "
                f"(arguments: {sorted(args)})"
            )
        return str(args[rule])

    return read


def mcp_effects(
    tools: Iterable[BaseTool],
    *,
    trusted: bool = False,
    server: str | None = None,
    target: Mapping[str, ArgumentRule] | None = None,
    intent: Mapping[str, ArgumentRule] | None = None,
    reconcile: Mapping[str, Reconciler] | None = None,
    require_approval: Iterable[str] = (),
) -> list[BaseTool]:
    """Declare the tools of one MCP server: read-only ones stay plain, the rest become effects.

    Each effect's action is ``"<server>.<tool name>"``. A tool with ``idempotentHint``
    may be resent with the same arguments after an unclear outcome; every other tool
    is never resent blindly: a crash after the server acted is settled by its
    reconciler, else by a person (``interrupt()``).

    Args:
        tools: the LangChain tools of one MCP server (``langchain-mcp-adapters``'
            ``load_mcp_tools`` / ``MultiServerMCPClient.get_tools(server_name=...)``, or
            ``langchain.mcp.MCPAdapter``).
        trusted: believe the server's annotations. False (the default) ignores them:
            every tool is an effect, none is resent blindly.
        server: the server's name in each action; taken from the tools' metadata
            when ``langchain.mcp`` put it there, required otherwise.
        target: per tool name, the argument naming what the effect acts on (or a
            function of the arguments).
        intent: per tool name, the argument (or function) giving the application's
            intent key (``effect(intent_key=...)``): a re-proposed call with the same
            key is the same operation.
        reconcile: per tool name, a reconciler asking the provider what happened
            (confirming only on proof bound to the operation).
        require_approval: tool names that need a person's approval before the first
            dispatch.

    Returns:
        The tools in their order, each plain or an ``EffectTool``.

    Raises:
        InvalidInput: a name in ``target``, ``intent``, ``reconcile`` or
            ``require_approval`` that is no tool of the list, a read-only tool given
            one of them, no server name, or a malformed annotation.
    """
    tools = list(tools)
    names = [tool.name for tool in tools]
    target, intent, reconcile = dict(target or {}), dict(intent or {}), dict(reconcile or {})
    approval = set(require_approval)
    for what, named in (
        ("target", target),
        ("intent", intent),
        ("reconcile", reconcile),
        ("require_approval", approval),
    ):
        unknown = sorted(set(named) - set(names))
        if unknown:
            raise InvalidInput(
                f"mcp_effects: {what} names {unknown}, not among the server's tools {names}"
            )
    declared: list[BaseTool] = []
    for tool in tools:
        hints = mcp_hints(tool) if trusted else MCPHints()
        configured = [
            w
            for w, m in (("target", target), ("intent", intent), ("reconcile", reconcile))
            if tool.name in m
        ] + (["require_approval"] if tool.name in approval else [])
        if hints.read_only:
            if configured:
                raise InvalidInput(
                    f"mcp_effects: {tool.name!r} is read-only (readOnlyHint) and stays a plain "
                    f"tool, so its {', '.join(configured)} would never apply"
                )
            declared.append(tool)
            continue
        where = server or _server_name(tool)
        if not where:
            raise InvalidInput(
                f"mcp_effects: name the server (server=...): tool {tool.name!r} carries no "
                "server name, and its actions are '<server>.<tool>'"
            )
        name = tool.name
        declared.append(
            effect(
                f"{where}.{name}",
                target=_from_arguments(name, "target", target[name]) if name in target else None,
                intent_key=_from_arguments(name, "intent", intent[name])
                if name in intent
                else None,
                contract=ProviderContract.convergent() if hints.idempotent else None,
                reconcile=reconcile.get(name),
                require_approval=name in approval,
            )(tool)
        )
    return declared
