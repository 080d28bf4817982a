"""The call slot: how a tool body tells the engine that it started, and what it returned or raised.

One protocol between two sides that never see each other:

- the engine's drivers (``decide.drive``) open a slot for each dispatch
  (``dispatching``) before handing the call to the face's ``execute``
  (ToolNode's, the middleware chain's, which inject state, validate arguments
  and may turn exceptions into error messages);
- the tool body (an ``@effect`` tool, ``run_body`` for a plain callable) enters
  the slot (``enter``, ``body_slot``) and records its raw outcome there
  (``CallSlot.record`` / ``arecord``);

so the engine classifies the real outcome (``decide.loop``), and a face keeps
what the chain made of it (``_faces.Execution``, through ``current_slot``).

A body runs at most once per slot (one dispatch): a second entry (a wrapper
between the face and the tool calling it again, ``ToolRetryMiddleware`` listed
after ``EffectMiddleware``) raises ``MiddlewareOrderError`` before the provider
is called again, and is kept in ``reentry`` for the engine to raise once the
first entry's outcome is recorded, whatever the wrapper made of it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from langgraph_effects.errors import EffectsError, MiddlewareOrderError

if TYPE_CHECKING:
    from langgraph_effects.effects import EffectContext

__all__ = ["CallSlot", "body_slot", "current_slot", "dispatching", "enter"]


class CallSlot:
    """One dispatch's slot: its context in, the tool's raw outcome out."""

    __slots__ = ("context", "error", "reentry", "started", "value")

    def __init__(self, context: EffectContext) -> None:
        self.context = context
        self.started = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.reentry: MiddlewareOrderError | None = None

    def start(self) -> CallSlot:
        """Mark the body started; refuse a second entry in the same dispatch."""
        if self.started:
            ctx = self.context
            self.reentry = MiddlewareOrderError(
                _REENTERED.format(action=ctx.action, operation_id=ctx.operation_id)
            )
            raise self.reentry
        self.started = True
        return self

    def record(self, body: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``body`` and keep what it returned or raised."""
        try:
            self.value = body(*args, **kwargs)
        except BaseException as exc:
            self.error = exc
            raise
        return self.value

    async def arecord(
        self, body: Callable[..., Awaitable[Any]], /, *args: Any, **kwargs: Any
    ) -> Any:
        """The async twin of ``record``."""
        try:
            self.value = await body(*args, **kwargs)
        except BaseException as exc:
            self.error = exc
            raise
        return self.value


_CURRENT: contextvars.ContextVar[CallSlot | None] = contextvars.ContextVar(
    "langgraph_effects_call", default=None
)

_REENTERED = (
    "effect {action!r} (operation {operation_id}) was entered a second time in one "
    "dispatch: a wrapper between EffectMiddleware (or EffectToolNode) and the tool ran it "
    "again, such as ToolRetryMiddleware listed after EffectMiddleware. The second entry was "
    "refused before the provider was called again, and the first one's outcome is recorded. "
    "List ToolRetryMiddleware before EffectMiddleware (middleware=[ToolRetryMiddleware(...), "
    "EffectMiddleware(...)]) or leave effect tools out of it (its tools=[...]): "
    "EffectMiddleware already resends only what is provably safe (a TransientProviderError, "
    "a key the provider deduplicates), never an ambiguous failure."
)


class dispatching:  # a context manager named as it reads: ``with dispatching(context)``
    """The slot of one dispatch, current in this context while the block runs.

    A class, not a generator under ``contextlib.contextmanager``: every dispatch opens
    one, and this costs two calls where the generator's machinery costs six."""

    __slots__ = ("_reset", "slot")

    def __init__(self, context: EffectContext) -> None:
        self.slot = CallSlot(context)

    def __enter__(self) -> CallSlot:
        self._reset = _CURRENT.set(self.slot)
        return self.slot

    def __exit__(self, *_: object) -> None:
        _CURRENT.reset(self._reset)


def current_slot() -> CallSlot | None:
    """The slot of the dispatch running in this context (None outside one)."""
    return _CURRENT.get()


def enter(action: str) -> CallSlot:
    """The slot an ``@effect`` tool's body of ``action`` enters (started).

    Raises:
        EffectsError: no dispatch of ``action`` is running here: the tool was called
            outside the engine, where nothing would record its side effect.
        MiddlewareOrderError: the body already ran in this dispatch.
    """
    slot = _CURRENT.get()
    if slot is None or slot.context.action != action:
        raise EffectsError(
            f"effect tool {action!r} ran outside EffectToolNode / EffectMiddleware: "
            "refused, because nothing would record or deduplicate its side effect "
            "(inside a @task or @entrypoint, call it with run_effect(tool, args, ledger=...))"
        )
    return slot.start()


def body_slot(name: str) -> CallSlot:
    """The slot a plain callable's body enters (started), for ``name`` in the error.

    Raises:
        EffectsError: no dispatch is running here.
        MiddlewareOrderError: the body already ran in this dispatch.
    """
    slot = _CURRENT.get()
    if slot is None:
        raise EffectsError(f"{name} runs inside the decision engine's dispatch only")
    return slot.start()
