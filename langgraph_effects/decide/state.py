"""What one run of the decision loop has learned (``Pass``), and the settings and shared
steps of every part of the loop (``LoopBase``; ``decide.loop``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from langgraph_effects.core.model import (
    Evidence,
    Operation,
)
from langgraph_effects.decide.actions import (
    Action,
    Get,
    Hook,
    LedgerAction,
    ledger,
)
from langgraph_effects.decide.answers import (
    Answers,
)
from langgraph_effects.decide.call import EffectCall
from langgraph_effects.decide.messages import Trace
from langgraph_effects.decide.policy import Policy
from langgraph_effects.errors import (
    RECORD_MOVED,
    EffectRejected,
)

MAX_STEPS = 64
"""The most steps one pass of the loop, or one read of the answers held for it, takes."""


@dataclass(slots=True)
class Pass:
    """What one run of the decision loop has learned so far."""

    call: EffectCall
    trace: Trace = field(default_factory=Trace)
    """How this run obtained its answer (``Via``), for the ToolMessage's trace metadata."""
    claimed: bool = False
    reconciled: bool = False
    retried: bool = False
    retry_forbidden: bool = False
    transient_retries: int = 0
    evidence: list[Evidence] = field(default_factory=list)
    late_receipt: Evidence | None = None
    receipts_read: bool = False
    """The log was searched for a receipt kept but not applied (``recorded_receipt``)."""
    answers: dict[str, Answers] = field(default_factory=dict)
    """By operation id: the answers applied to it in this task, and how many of them
    LangGraph has handed back to this run so far (see ``Answers``)."""
    notice: str | None = None
    """Why the person's last answer did not decide the operation, for the next request."""
    followed: set[str] = field(default_factory=set)
    """Edited calls whose answers ``_follow_edit`` carried over from the calls they
    replaced, and ``_last_word`` has not read yet."""
    edits_followed: set[str] = field(default_factory=set)
    """Every call ``_follow_edit`` left for its replacement in this pass: never twice
    (a chain of edits ends; it never cycles)."""


class LoopBase:
    """The decision loop's settings and the steps every part of it takes (a conditional
    write that re-reads a moved record, the ``authorize`` hook): ``Loop`` is made of
    this, ``decide.dispatching.Dispatching`` and ``decide.asking.Asking``."""

    __slots__ = ("anonymous_answers", "clock", "lease_for", "policy")

    def __init__(
        self,
        *,
        lease_for: timedelta,
        clock: Callable[[], datetime],
        policy: Policy,
        anonymous_answers: bool = False,
    ) -> None:
        self.lease_for = lease_for
        self.clock = clock
        self.policy = policy
        self.anonymous_answers = anonymous_answers

    @property
    def interrupt_on_unknown(self) -> bool:
        """Ask a person when nothing resolves an unknown (``Policy.ask_on_unknown``)."""
        return self.policy.ask_on_unknown

    def _guarded(
        self, p: Pass, op: Operation, action: LedgerAction[Operation]
    ) -> Generator[Action, Any, Operation]:
        """Run a conditional write; if the record moved under us, re-read it instead."""
        try:
            return (yield from ledger(action))
        except RECORD_MOVED:
            p.claimed = False
            fresh = yield from ledger(Get(op.key))
            assert fresh is not None
            return fresh

    def _refusal(self, p: Pass, op: Operation) -> Generator[Action, Any, str | None]:
        """Ask the effect's ``authorize`` hook; the refusal's text, or None if allowed."""
        assert p.call.spec.authorize is not None
        try:
            allowed = yield Hook(p.call.spec.authorize, p.call.context(op))
        except EffectRejected as exc:
            return f"authorization refused: {exc.reason}"
        return None if allowed else "authorization refused"
