"""Declaring an effect: ``@effect(...)`` turns a function or a LangChain tool into an effect tool.

An effect tool is still a LangChain ``BaseTool`` the model sees as usual (same
name, description and argument schema), plus an ``EffectSpec``: the action
name, how to find the target, the provider contract, the reconciler, approval
and authorization hooks, the intent key and the payload policy.

An effect tool only runs under the decision core (``EffectToolNode``,
``EffectMiddleware``): called anywhere else it raises instead of acting
unguarded. The core hands the call its ``EffectContext`` through the call's
slot (``slot``); a parameter annotated ``EffectContext`` receives it and is
hidden from the model's schema.
"""

from __future__ import annotations

import inspect
import os
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias, overload

from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.tools.base import create_schema_from_function

from langgraph_effects.core.digest import (
    PAYLOAD_KEY_ENV,
    PAYLOAD_OLD_KEYS_ENV,
    payload_digest,
    resolve_payload_keys,
)
from langgraph_effects.core.identity import FORK_MODES, ForkMode
from langgraph_effects.core.model import Evidence, Operation, ProviderContract
from langgraph_effects.errors import InvalidInput
from langgraph_effects.slot import CallSlot, body_slot, enter

__all__ = [
    "Answerer",
    "Authorizer",
    "EffectContext",
    "EffectSpec",
    "EffectTool",
    "Reconciler",
    "arun_body",
    "effect",
    "effect_spec",
    "run_body",
]

Reconciler: TypeAlias = Callable[[Operation], "Evidence | Awaitable[Evidence]"]
"""Given the operation record, return what the provider shows (sync or async)."""

Authorizer: TypeAlias = Callable[["EffectContext"], "bool | Awaitable[bool]"]
"""Asked before every new dispatch; False (or raising ``EffectRejected``) refuses."""

Answerer: TypeAlias = Callable[[Operation, Any], Any]
"""Given a confirmed operation and its recorded result, return the call's answer as the
tool would have: a ``Command`` (its update and ``goto``), a ToolMessage or a value."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectContext:
    """What an effect tool (and an ``authorize`` hook) knows about its operation.

    ``idempotency_key`` is stable for the operation across crashes, resumes and
    retries: pass it to the provider so a resend is deduplicated there.
    ``attempt`` counts dispatches (1 for the first).
    """

    operation_id: str
    idempotency_key: str
    attempt: int
    tenant_id: str
    action: str
    target: str | None = None
    workflow_id: str | None = None
    tool_call_id: str | None = None
    payload_digest: str = ""
    payload: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectSpec:
    """The effect metadata of a tool (see ``effect`` for each field)."""

    action: str
    version: int = 1
    target: str | Callable[[dict[str, Any]], str] | None = None
    contract: ProviderContract | None = None
    reconcile: Reconciler | None = None
    require_approval: bool = False
    authorize: Authorizer | None = None
    intent_key: str | Callable[[dict[str, Any]], str] | None = None
    store_payload: bool = True
    answer: Answerer | None = None
    payload_key: bytes | None = field(default=None, repr=False)
    """The secret keying the payload digest; set exactly when ``store_payload`` is False."""
    older_payload_keys: tuple[bytes, ...] = field(default=(), repr=False)
    """Keys rotated out, newest first: they digest no new record, they recognise the
    records they digested (``decide.recognise.recognised``, docs/payload-keys.md)."""
    forks: ForkMode = "replay"

    def digest_of(
        self, target: str | None, args: dict[str, Any], *, canonical: bytes | None = None
    ) -> str:
        """The payload digest of a call: keyed (HMAC) when only the digest is kept.

        ``canonical``: ``args`` as canonical JSON, when the caller already made it.
        """
        return payload_digest(
            self.action, self.version, target, args, key=self.payload_key, canonical=canonical
        )

    def older_digests(self, target: str | None, args: dict[str, Any]) -> tuple[str, ...]:
        """The call's payload digest under each key rotated out, newest first."""
        return tuple(
            payload_digest(self.action, self.version, target, args, key=key)
            for key in self.older_payload_keys
        )

    def target_of(self, args: dict[str, Any]) -> str | None:
        """The target for these call arguments (a string, or computed from them)."""
        value = self.target(args) if callable(self.target) else self.target
        return None if value is None else str(value)

    def intent_of(self, args: dict[str, Any]) -> str | None:
        """The application's intent key for these arguments, if it declared one."""
        value = self.intent_key(args) if callable(self.intent_key) else self.intent_key
        return None if value is None else str(value)


def run_body(body: Callable[[EffectContext], Any]) -> Any:
    """Run ``body`` as the body of the effect being dispatched, given its ``EffectContext``.

    For a face whose effect is a plain callable, not an ``@effect`` tool (the
    outbox relay's ``deliver``): inside the decision engine's dispatch, it
    records in the call's slot (``slot``) that the body started and what it
    returned or raised, as an ``@effect`` tool's body does.
    """
    call = body_slot("run_body")
    return call.record(body, call.context)


async def arun_body(body: Callable[[EffectContext], Awaitable[Any]]) -> Any:
    """The async twin of ``run_body``."""
    call = body_slot("arun_body")
    return await call.arecord(body, call.context)


class EffectTool(StructuredTool):
    """A ``StructuredTool`` carrying an ``EffectSpec``; built by ``effect``."""

    effect_spec: EffectSpec


def effect_spec(tool: object) -> EffectSpec | None:
    """The effect metadata of ``tool``, or None for a plain tool."""
    spec = getattr(tool, "effect_spec", None)
    return spec if isinstance(spec, EffectSpec) else None


def _context_param(func: Callable[..., Any]) -> tuple[str | None, dict[str, Any]]:
    """Find the parameter annotated ``EffectContext``; return it and the resolved hints."""
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception:  # unresolvable forward references: fall back to the raw text
        hints = {}
        raw = getattr(func, "__annotations__", {})
        for name, ann in raw.items():
            if ann == "EffectContext" or ann is EffectContext:
                return name, {k: v for k, v in raw.items() if k != name}
        return None, dict(raw)

    def is_ctx(ann: Any) -> bool:
        if ann is EffectContext:
            return True
        return any(is_ctx(a) for a in typing.get_args(ann))

    for name, ann in hints.items():
        if name != "return" and is_ctx(ann):
            return name, {k: v for k, v in hints.items() if k != name}
    return None, hints


def _without_param(func: Callable[..., Any], name: str | None) -> inspect.Signature:
    sig = inspect.signature(func)
    if name is None:
        return sig
    return sig.replace(parameters=[p for p in sig.parameters.values() if p.name != name])


def _bind_sync(func: Callable[..., Any], action: str, ctx_param: str | None) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        call = enter(action)
        if ctx_param is not None:
            kwargs[ctx_param] = call.context
        return call.record(func, *args, **kwargs)

    return run


def _bind_async(
    func: Callable[..., Awaitable[Any]], action: str, ctx_param: str | None
) -> Callable[..., Awaitable[Any]]:
    async def arun(*args: Any, **kwargs: Any) -> Any:
        call = enter(action)
        if ctx_param is not None:
            kwargs[ctx_param] = call.context
        return await call.arecord(func, *args, **kwargs)

    return arun


def _dress(
    wrapper: Callable[..., Any],
    like: Callable[..., Any],
    sig: inspect.Signature,
    hints: dict[str, Any],
) -> None:
    # The wrapper must look like the user's function minus the context
    # parameter: LangChain builds the schema from the signature, and ToolNode
    # finds InjectedState/ToolRuntime parameters through the type hints.
    wrapper.__signature__ = sig  # type: ignore[attr-defined]
    wrapper.__annotations__ = dict(hints)
    wrapper.__name__ = getattr(like, "__name__", "effect")
    wrapper.__qualname__ = getattr(like, "__qualname__", wrapper.__name__)
    wrapper.__doc__ = like.__doc__
    wrapper.__module__ = like.__module__


def _from_function(
    func: Callable[..., Any],
    spec: EffectSpec,
    *,
    name: str | None,
    description: str | None,
    args_schema: Any = None,
    coroutine: Callable[..., Awaitable[Any]] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> EffectTool:
    is_async = inspect.iscoroutinefunction(func)
    sync_fn = None if is_async else func
    async_fn = func if is_async else coroutine
    source = sync_fn or async_fn
    assert source is not None
    ctx_param, hints = _context_param(source)
    sig = _without_param(source, ctx_param)
    run = arun = None
    if sync_fn is not None:
        run = _bind_sync(sync_fn, spec.action, ctx_param)
        _dress(run, sync_fn, sig, hints)
    if async_fn is not None:
        async_ctx, async_hints = _context_param(async_fn)
        arun = _bind_async(async_fn, spec.action, async_ctx)
        _dress(arun, async_fn, _without_param(async_fn, async_ctx), async_hints)
    tool_name = name or source.__name__
    desc = description if description is not None else inspect.getdoc(source)
    if not desc:
        raise InvalidInput(
            f"effect {spec.action!r}: the function needs a docstring or description="
        )
    if args_schema is None:
        filtered = [a for a in ("run_manager", "callbacks") if a in sig.parameters]
        args_schema = create_schema_from_function(tool_name, run or arun, filter_args=filtered)  # type: ignore[arg-type]
    return EffectTool(
        name=tool_name,
        description=desc,
        args_schema=args_schema,
        func=run,
        coroutine=arun,
        effect_spec=spec,
        **(settings or {}),
    )


_TOOL_SETTINGS = (
    "return_direct",
    "response_format",
    "handle_tool_error",
    "handle_validation_error",
    "verbose",
    "callbacks",
    "tags",
    "metadata",
    "extras",
)
"""What a declared tool keeps of the tool it declares, besides name, description, schema."""


def _settings(tool: BaseTool) -> dict[str, Any]:
    return {k: getattr(tool, k) for k in _TOOL_SETTINGS if getattr(tool, k, None) is not None}


def _from_tool(tool: BaseTool, spec: EffectSpec) -> EffectTool:
    if isinstance(tool, StructuredTool) and (tool.func or tool.coroutine):
        fn = tool.func or tool.coroutine
        assert fn is not None
        return _from_function(
            fn,
            spec,
            name=tool.name,
            description=tool.description,
            args_schema=tool.args_schema,
            coroutine=tool.coroutine if tool.func else None,
            settings=_settings(tool),
        )

    # Any other BaseTool: run it through its public invoke / ainvoke, as a tool call
    # (so its injected tool-call id, response format and error handling all apply).
    def as_call(call: CallSlot, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": tool.name,
            "args": kwargs,
            "id": call.context.tool_call_id,
            "type": "tool_call",
        }

    def run(**kwargs: Any) -> Any:
        call = enter(spec.action)
        return call.record(tool.invoke, as_call(call, kwargs))

    async def arun(**kwargs: Any) -> Any:
        call = enter(spec.action)
        return await call.arecord(tool.ainvoke, as_call(call, kwargs))

    return EffectTool(
        name=tool.name,
        description=tool.description,
        args_schema=tool.args_schema,  # type: ignore[arg-type]
        func=run,
        coroutine=arun,
        return_direct=tool.return_direct,
        effect_spec=spec,
    )


@overload
def effect(
    action: str,
    *,
    version: int = ...,
    target: str | Callable[[dict[str, Any]], str] | None = ...,
    contract: ProviderContract | None = ...,
    reconcile: Reconciler | None = ...,
    require_approval: bool = ...,
    authorize: Authorizer | None = ...,
    intent_key: str | Callable[[dict[str, Any]], str] | None = ...,
    store_payload: bool = ...,
    payload_key: bytes | str | Sequence[bytes | str] | None = ...,
    answer: Answerer | None = ...,
    forks: ForkMode = ...,
    name: str | None = ...,
    description: str | None = ...,
) -> Callable[[Callable[..., Any] | BaseTool], EffectTool]: ...


@overload
def effect(action: Callable[..., Any] | BaseTool) -> EffectTool: ...


def effect(
    action: str | Callable[..., Any] | BaseTool,
    *,
    version: int = 1,
    target: str | Callable[[dict[str, Any]], str] | None = None,
    contract: ProviderContract | None = None,
    reconcile: Reconciler | None = None,
    require_approval: bool = False,
    authorize: Authorizer | None = None,
    intent_key: str | Callable[[dict[str, Any]], str] | None = None,
    store_payload: bool = True,
    payload_key: bytes | str | Sequence[bytes | str] | None = None,
    answer: Answerer | None = None,
    forks: ForkMode = "replay",
    name: str | None = None,
    description: str | None = None,
) -> Callable[[Callable[..., Any] | BaseTool], EffectTool] | EffectTool:
    """Declare a side-effecting tool.

    Usage: ``@effect("crm.close_case", target=lambda a: a["case_id"], reconcile=find)``
    over a function with a docstring, or ``effect("mail.send")(existing_tool)``.

    Args:
        action: a stable action name (``"crm.close_case"``); part of the payload
            digest and of the default operation id.
        version: bump when the meaning of the payload changes.
        target: what the effect acts on, as a string or a function of the call's
            arguments (a case id, a recipient).
        contract: the provider's idempotency contract. With a key window, an
            ``unknown`` operation is resent under the same key while
            ``first dispatch + window - safety margin`` has not passed.
        reconcile: a function (sync or async) given the ``Operation`` that returns
            ``Evidence.confirmed(...)``, ``Evidence.rejected(...)`` or
            ``Evidence.inconclusive(...)``.
        require_approval: ask a person (``interrupt()``) before the first dispatch;
            the approval binds to the operation id and the payload digest.
        authorize: asked with the ``EffectContext`` before every new dispatch
            (first, retry, recovery); False or ``EffectRejected`` refuses, and a
            refusal rejects the operation with its evidence kept.
        intent_key: an application business key (a string or a function of the
            arguments). The operation id then derives from tenant, action and
            key only, so a re-proposed call maps to the same operation, and the
            same key with another payload raises ``PayloadMismatch``.
        store_payload: False keeps only the payload digest in the ledger. That
            digest is then an HMAC-SHA256 under a secret key (``payload_key``, else
            the ``LGE_PAYLOAD_KEY`` environment variable read when the effect is
            declared; refused without one), so a low-entropy payload (a PIN)
            cannot be recovered from the record by trying every value. The key
            is part of each call's identity: rotate it by listing the old key
            after the new one until the records it digested are settled.
        payload_key: the secret for ``store_payload=False`` (at least 16 bytes;
            text is read as UTF-8), or a list of them: the current key first,
            then keys rotated out (``LGE_PAYLOAD_OLD_KEYS``, comma-separated,
            when the key comes from ``LGE_PAYLOAD_KEY``). New records are
            digested under the first; the others recognise the records they
            digested, so an operation prepared before the rotation is met again
            (its approval answered, its outcome settled), never sent anew
            (docs/payload-keys.md). Refused with ``store_payload=True``, where
            the payload is stored anyway and the digest is a plain SHA-256.
        answer: rebuilds the call's answer from a confirmed record whose result is not
            the tool's own recorded answer, i.e. one settled without it: reconciled after a
            crash, confirmed by a person or an operator. Called ``answer(operation,
            result)`` with ``operation.result``; it returns what the tool would have
            returned: a ``Command`` (its update and ``goto`` then apply, so the graph
            takes the route the tool would have taken), a ToolMessage or a value (the
            ToolMessage's content). A ToolMessage in it answering ``operation.tool_call_id``
            answers the call. It also answers a confirmed plain return, so a first run
            and every replay answer alike. Without it, such a record answers with the
            default ToolMessage (the result as content, or "... was carried out"), and a
            ``Command`` tool's update and ``goto`` are lost (``docs/middleware-order.md``).
        forks: a thread forked or replayed from before this effect's answer (time
            travel): ``"replay"`` (default) answers from the record, never sending
            again; ``"new"`` sends again on the new branch an effect already
            delivered on another one. A fork after the answer that asks again is a
            new operation either way (``docs/identity.md``).
        name, description: override the tool's name and description.

    Returns:
        An ``EffectTool`` (a LangChain ``StructuredTool``).
    """
    if not isinstance(action, str):
        # Bare ``@effect``: the function's name is the action.
        name_ = getattr(action, "name", None) or getattr(action, "__name__", "effect")
        return effect(str(name_))(action)
    if not action.strip():
        raise InvalidInput("an effect needs a non-blank action name")
    if forks not in FORK_MODES:
        raise InvalidInput(f"effect {action!r}: forks must be one of {FORK_MODES}, got {forks!r}")
    if store_payload and payload_key is not None:
        raise InvalidInput(
            f"effect {action!r}: payload_key is for store_payload=False "
            "(a stored payload is digested with plain SHA-256)"
        )
    if answer is not None and not callable(answer):
        raise InvalidInput(
            f"effect {action!r}: answer must be a callable (operation, result) -> answer, "
            f"got {type(answer).__name__}"
        )
    key: bytes | None = None
    older: tuple[bytes, ...] = ()
    if not store_payload:
        given: Any = payload_key
        if given is None:  # the deployment's keys: current, then rotated out
            rotated = os.environ.get(PAYLOAD_OLD_KEYS_ENV) or ""
            given = [os.environ.get(PAYLOAD_KEY_ENV), *filter(None, rotated.split(","))]
        key, *rest = resolve_payload_keys(given, what=f"effect {action!r}")
        older = tuple(rest)
    spec = EffectSpec(
        action=action,
        version=version,
        target=target,
        contract=contract,
        reconcile=reconcile,
        require_approval=require_approval,
        authorize=authorize,
        intent_key=intent_key,
        store_payload=store_payload,
        answer=answer,
        payload_key=key,
        older_payload_keys=older,
        forks=forks,
    )

    def decorate(obj: Callable[..., Any] | BaseTool) -> EffectTool:
        if isinstance(obj, BaseTool):
            return _from_tool(obj, spec)
        return _from_function(obj, spec, name=name, description=description)

    return decorate
