"""Crash points at every boundary of an effect call, and a child-process runner.

Library code calls :func:`crash_point` at each boundary the runner crosses::

    crash_point(CrashPoint.AFTER_CLAIM)

When nothing is armed that is one global read and a return. A test arms one
point, in one of three modes:

* ``CrashMode.RAISE``: raise :class:`InjectedCrash`, a ``BaseException`` so
  neither LangGraph's nor our ``except Exception`` swallows it: the crash
  leaves the process state (ledger rows, checkpoint) exactly as a real one;
* ``CrashMode.EXIT``: ``os._exit(137)``, no cleanup, no ``finally``;
* ``CrashMode.KILL``: ``SIGKILL`` to the process itself.

Arm in-process with ``CrashPlan.arm(CrashPoint.AFTER_CLAIM, mode="exit")``
(a context manager that disarms on exit), through the environment
(``LGE_CRASH_AT=after_claim[:mode[:hit]]``, read at import; mode defaults to
``exit`` there; :func:`crash_env` builds it for a subprocess), or let
:func:`run_in_child` arm a fresh spawned process: run to the crash there,
then resume in another fresh process and count effects at the fake provider.

Every wait for a child is a hang guard, never a budget: its timeout is
multiplied by :func:`timeout_scale` (``LGE_TEST_TIMEOUT_SCALE``, else the
machine's load per core), so a loaded machine runs slower but still green.

This module imports nothing heavy (no LangGraph), so the runner can import it
unconditionally.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langgraph_effects import _faults
from langgraph_effects._faults import (
    CRASH_EXIT_CODE,
    ENV_VAR,
    CrashMode,
    CrashPlan,
    CrashPoint,
    InjectedCrash,
    crash_env,
    crash_point,
)

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

__all__ = [
    "CRASH_EXIT_CODE",
    "ENV_VAR",
    "TIMEOUT_SCALE_VAR",
    "ChildExit",
    "CrashMode",
    "CrashPlan",
    "CrashPoint",
    "InjectedCrash",
    "crash_env",
    "crash_point",
    "run_in_child",
    "scaled",
    "timeout_scale",
]


# --------------------------------------------------------------------------- waits

TIMEOUT_SCALE_VAR = "LGE_TEST_TIMEOUT_SCALE"
"""The environment variable that multiplies every test wait (a number > 0)."""


def timeout_scale() -> float:
    """The factor every test wait is multiplied by: ``LGE_TEST_TIMEOUT_SCALE`` when set,
    else the machine's load per core (the larger of the 1- and 5-minute averages), at least 1.

    Read at each call, so a wait started while the machine is busy is given the room
    the load leaves it.

    Raises:
        ValueError: ``LGE_TEST_TIMEOUT_SCALE`` is not a number > 0.
    """
    raw = os.environ.get(TIMEOUT_SCALE_VAR, "").strip()
    if raw:
        try:
            factor = float(raw)
        except ValueError:
            factor = 0.0
        if not factor > 0:
            raise ValueError(f"{TIMEOUT_SCALE_VAR} must be a number > 0, got {raw!r}")
        return factor
    try:
        load = max(os.getloadavg()[:2])
    except OSError:  # no load average on this platform
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


def scaled(seconds: float) -> float:
    """``seconds`` of a hang guard, as long as this machine needs now (``timeout_scale``)."""
    return seconds * timeout_scale()


# --------------------------------------------------------------------------- child processes


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildExit:
    """How a child process ended.

    Attributes:
        exitcode: the process's exit code (negative: killed by that signal).
        crashed_at: the armed crash point that killed it, if one did.
        value: what the callable returned, when it returned.
        error: the traceback text, when the callable raised.
    """

    exitcode: int
    crashed_at: CrashPoint | None = None
    value: Any = None
    error: str | None = None

    @property
    def crashed(self) -> bool:
        """The process died as a crash does (exit 137 or SIGKILL), at a point or a fake's fault."""
        return self.exitcode in (CRASH_EXIT_CODE, -signal.SIGKILL)

    @property
    def ok(self) -> bool:
        """The callable returned normally."""
        return self.exitcode == 0 and self.error is None


def _child_main(
    conn: Connection,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    plan: tuple[CrashPoint, CrashMode, int] | None,
) -> None:
    def report(point: CrashPoint) -> None:
        conn.send(("crashed", point.value))

    _faults._report = report
    if plan is not None:
        CrashPlan.arm(plan[0], plan[1], hit=plan[2])
    try:
        value = fn(*args)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        conn.close()
        raise SystemExit(1) from None
    conn.send(("value", value))
    conn.close()


def run_in_child(
    fn: Callable[..., Any],
    *args: Any,
    crash_at: CrashPoint | None = None,
    mode: CrashMode | str = CrashMode.EXIT,
    hit: int = 1,
    timeout: float = 60.0,
) -> ChildExit:
    """Run ``fn(*args)`` in a fresh spawned process, optionally armed to crash.

    ``fn`` and ``args`` must be picklable (a module-level function; fakes with
    a ``path`` and file-backed ``FakeClock`` pickle as their files). The child
    starts clean (spawn, not fork): nothing of the parent's connections, locks
    or LangGraph state leaks into it, as after a real restart.

    Args:
        fn: what to run in the child.
        *args: its arguments.
        crash_at: arm this point in the child (``None``: run without a plan,
            except one armed by ``LGE_CRASH_AT`` in the environment).
        mode: ``exit`` or ``kill`` to die for real; ``raise`` makes the crash
            an exception reported in ``error``.
        hit: crash on the ``hit``-th reach of the point.
        timeout: seconds before the child is killed and ``TimeoutError`` raised
            (multiplied by ``timeout_scale()``: a hang guard, not a budget).

    Returns:
        How the child ended; ``crashed_at`` names the point that killed it.
    """
    import multiprocessing  # here, not at the top: crash_point must stay import-light

    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    plan = None if crash_at is None else (CrashPoint(crash_at), CrashMode(mode), hit)
    process = ctx.Process(target=_child_main, args=(sender, fn, args, plan))
    process.start()
    sender.close()  # only the child holds the sending end: its death means EOF here
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    messages: list[tuple[str, Any]] = []
    try:
        # Read before joining, so a large return value never blocks the child on a full pipe.
        while receiver.poll(max(0.0, deadline - time.monotonic())):
            messages.append(receiver.recv())
    except EOFError:
        pass
    finally:
        receiver.close()
    process.join(max(0.0, deadline - time.monotonic()))
    if process.exitcode is None:
        process.kill()
        process.join()
        raise TimeoutError(f"child running {fn!r} did not finish within {timeout:.0f}s")
    found = dict(messages)
    crashed = found.get("crashed")
    return ChildExit(
        exitcode=process.exitcode,
        crashed_at=None if crashed is None else CrashPoint(crashed),
        value=found.get("value"),
        error=found.get("error"),
    )
