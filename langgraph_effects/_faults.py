"""Crash points: the hook library code calls at every boundary of an effect call.

Private home of the machinery behind ``langgraph_effects.testing.faults`` (its
public face, with the documentation and ``run_in_child``). It lives here so the
runner and the outbox relay can call ``crash_point`` without importing the
testing package: imports run one way, library -> testing. Nothing heavy is
imported; when nothing is armed ``crash_point`` is one global read.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from types import TracebackType
from typing import Self

__all__ = [
    "CRASH_EXIT_CODE",
    "ENV_VAR",
    "CrashMode",
    "CrashPlan",
    "CrashPoint",
    "InjectedCrash",
    "crash_env",
    "crash_point",
]

ENV_VAR = "LGE_CRASH_AT"
CRASH_EXIT_CODE = 137  # 128 + SIGKILL: what a shell reports for a killed process


class CrashPoint(StrEnum):
    """The boundaries of one effect call where a process can die.

    ARCHITECTURE.md, "The life of one tool call", draws them on a call's way.

    Each member says what is durable when the crash strikes there.
    """

    BEFORE_PREPARE = "before_prepare"
    """Nothing written: no ledger record, the provider heard nothing."""
    AFTER_PREPARE = "after_prepare"
    """The record is written (``prepared``), not claimed; the provider heard nothing."""
    AFTER_CLAIM = "after_claim"
    """Claimed (``dispatching``, lease held); the provider has heard nothing yet."""
    AFTER_PROVIDER = "after_provider"
    """The provider acted and answered; the receipt is not recorded (still ``dispatching``)."""
    AFTER_RECEIPT = "after_receipt"
    """The receipt is recorded (``confirmed``/``rejected``); the checkpoint is not saved."""
    DURING_RECONCILE = "during_reconcile"
    """The reconciler has asked the provider; its evidence is not recorded."""
    DURING_REVIEW_RESUME = "during_review_resume"
    """A person's answer has arrived; the resolution is not recorded."""
    AFTER_ANSWER = "after_answer"
    """A person's answer is recorded in the ledger; LangGraph has not saved it (the
    request is shown again on resume)."""


class CrashMode(StrEnum):
    """How an armed crash point kills."""

    RAISE = "raise"
    EXIT = "exit"
    KILL = "kill"


class InjectedCrash(BaseException):
    """Raised at an armed crash point in ``RAISE`` mode.

    A ``BaseException`` on purpose: handlers for ``Exception`` (LangGraph's,
    a tool's, ours) must let it through, as they would let a dying process.
    """

    def __init__(self, point: CrashPoint) -> None:
        self.point = point
        super().__init__(f"injected crash at {point.value}")


@dataclass(eq=False)
class CrashPlan:
    """One armed crash: at ``point``, on its ``hit``-th reach, by ``mode``.

    While armed the plan also counts every point reached (``hits``), so a test
    can check which boundaries a run crossed; ``point=None`` only counts
    (see :meth:`observe`). A plan fires at most once.
    """

    point: CrashPoint | None
    mode: CrashMode = CrashMode.RAISE
    hit: int = 1
    hits: dict[CrashPoint, int] = field(default_factory=dict)
    fired: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.hit < 1:
            raise ValueError("hit counts from 1")
        self.mode = CrashMode(self.mode)
        if self.point is not None:
            self.point = CrashPoint(self.point)

    @classmethod
    def arm(
        cls, point: CrashPoint, mode: CrashMode | str = CrashMode.RAISE, *, hit: int = 1
    ) -> CrashPlan:
        """Arm ``point`` for this process (replacing any armed plan) and return the plan.

        Use it as a context manager to disarm afterwards::

            with CrashPlan.arm(CrashPoint.AFTER_CLAIM):
                with pytest.raises(InjectedCrash):
                    graph.invoke(...)
        """
        return _install(cls(point, CrashMode(mode), hit))

    @classmethod
    def observe(cls) -> CrashPlan:
        """Arm a plan that never crashes and only counts the points reached."""
        return _install(cls(None))

    @staticmethod
    def disarm() -> None:
        """Disarm whatever plan is armed in this process."""
        global _armed
        _armed = None

    @staticmethod
    def current() -> CrashPlan | None:
        """The plan armed in this process, if any."""
        return _armed

    @classmethod
    def from_env(cls, value: str | None) -> CrashPlan | None:
        """Parse ``point[:mode[:hit]]`` (mode defaults to ``exit``); None or empty: None."""
        if not value:
            return None
        point, mode, hit = ([*value.split(":"), "", ""])[:3]
        try:
            return cls(CrashPoint(point), CrashMode(mode or CrashMode.EXIT), int(hit or 1))
        except ValueError as exc:
            points = ", ".join(p.value for p in CrashPoint)
            raise ValueError(
                f"{ENV_VAR}={value!r}: expected point[:mode[:hit]], point one of {points},"
                " mode one of raise, exit, kill, hit >= 1"
            ) from exc

    def to_env(self) -> str:
        """The ``LGE_CRASH_AT`` value that arms this plan in another process."""
        if self.point is None:
            raise ValueError("an observing plan has no crash point to pass on")
        return f"{self.point.value}:{self.mode.value}:{self.hit}"

    def reached(self, point: CrashPoint) -> None:
        """Count ``point`` and crash if this is the armed point's ``hit``-th reach."""
        with self._lock:
            n = self.hits[point] = self.hits.get(point, 0) + 1
            fire = not self.fired and point is self.point and n == self.hit
            self.fired = self.fired or fire
        if fire:
            _crash(point, self.mode)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _armed
        if _armed is self:
            _armed = None


def _install(plan: CrashPlan) -> CrashPlan:
    global _armed
    _armed = plan
    return plan


# Set by run_in_child in the child: tells the parent which point fired before dying.
_report: Callable[[CrashPoint], None] | None = None


def _crash(point: CrashPoint, mode: CrashMode) -> None:
    if _report is not None and mode is not CrashMode.RAISE:
        _report(point)
    if mode is CrashMode.EXIT:
        os._exit(CRASH_EXIT_CODE)
    if mode is CrashMode.KILL:
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedCrash(point)


_armed: CrashPlan | None = CrashPlan.from_env(os.environ.get(ENV_VAR))


def crash_point(point: CrashPoint) -> None:
    """The hook library code calls at each boundary; a no-op unless a plan is armed."""
    plan = _armed
    if plan is not None:
        plan.reached(point)


def crash_env(
    point: CrashPoint, mode: CrashMode | str = CrashMode.EXIT, *, hit: int = 1
) -> dict[str, str]:
    """Environment entries that arm ``point`` in a subprocess (merge into ``os.environ``)."""
    return {ENV_VAR: CrashPlan(point, CrashMode(mode), hit).to_env()}
