"""Deferred receipts: the receipts of calls prepared together, committed together.

The parallel effect calls of one task (``tools_condition``) are claimed with
one ``prepare_many`` before the fan-out (``EffectToolNode``). Their receipts are
recorded the same way, with one ``confirm_many`` after it: a call whose
provider answered hands its receipt here and goes on at once with the record
that receipt writes (``core.transitions.moved``), waiting neither for a commit
nor for a sibling. The task commits the receipts before it returns, so
LangGraph saves none of the task's answers before the ledger holds them::

    prepare_many ── fan-out: dispatch, hold receipt (x N) ── confirm_many ── task returns

Nothing is traded for it:

- until its receipt commits, a record is ``dispatching`` under this process's
  lease, exactly as between a provider's answer and a single ``confirm``, and
  its lease is still renewed. A crash there is that window: the record is taken
  over, marked ``unknown`` and reconciled, never sent again.
- the answer a call goes on with is the record the commit writes. A receipt the
  fence refuses (the process was frozen past its lease and the operation taken
  over) is kept as evidence, as any late receipt (``Loop.late_receipt``), and the
  task fails with the refusal, so LangGraph saves none of its answers; the next
  run asks the ledger, replays what committed and settles the taken-over
  operation from the kept receipt, never sending it again. A commit that fails
  (the ledger unreachable) fails the task the same way.
- a receipt handed in after the commit (a sibling still running when the task
  failed) is recorded on its own, as any receipt.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Generator
from datetime import datetime
from typing import Any

from langgraph_effects.core.model import Operation, OperationStatus
from langgraph_effects.core.transitions import moved
from langgraph_effects.decide.actions import Action, Confirm, ConfirmMany, RecordEvidence, ledger
from langgraph_effects.decide.loop import RECEIPT_REFUSED, late_receipt
from langgraph_effects.ledger._values import json_text

__all__ = ["DeferredReceipts", "Held", "commit"]


class DeferredReceipts:
    """The receipts a task holds for its one ``confirm_many`` (see the module).

    Args:
        clock: the runner's time source (the answer's timestamps).
    """

    def __init__(self, clock: Callable[[], datetime]) -> None:
        self._clock = clock
        self._lock = threading.Lock()  # never held across I/O
        self._open = True
        self._held: list[tuple[Confirm, Callable[[], None]]] = []

    def hold(self, action: Confirm, renewing: Callable[[], Callable[[], None]]) -> Operation | None:
        """Hold ``action`` for the task's commit; return the record it will write.

        ``renewing()`` starts renewing the record's lease and returns what stops
        it (at the commit). None: the receipt cannot wait (the commit is done, or
        the loop did not say which record it moves): record it now.
        """
        record = action.moves
        if record is None:
            return None
        result = action.result
        _, answer = moved(
            record,
            OperationStatus.CONFIRMED,
            self._clock(),
            # What the ledger will hand back: the result as stored, JSON.
            result=None if result is None else json.loads(json_text(result, what="result") or ""),
            provider_result_id=action.provider_result_id,
        )
        with self._lock:
            if not self._open:
                return None
            self._held.append((action, renewing()))
        return answer

    def close(self) -> Held | None:
        """Stop holding; the receipts held (None: nothing was)."""
        with self._lock:
            self._open = False
            held, self._held = self._held, []
        return Held(held) if held else None


class Held:
    """The receipts a task held: one ``confirm_many`` (``batch``), and their renewals to stop."""

    def __init__(self, held: list[tuple[Confirm, Callable[[], None]]]) -> None:
        self.receipts = [action for action, _ in held]
        self._stops = [stop for _, stop in held]

    @property
    def batch(self) -> ConfirmMany:
        return ConfirmMany([action.confirmation for action in self.receipts])

    def stop_renewing(self) -> None:
        for stop in self._stops:
            stop()


def commit(held: Held) -> Generator[Action, Any, None]:
    """Commit the receipts a task held, in one ``confirm_many`` (driven by ``EffectRunner``).

    Raises:
        EffectsError: the first receipt the ledger refused (each refused by the fence
            kept as evidence first), or the commit's own error.
    """
    try:
        outcomes = yield from ledger(held.batch)
    finally:
        held.stop_renewing()
    refused: BaseException | None = None
    for action, outcome in zip(held.receipts, outcomes, strict=True):
        if isinstance(outcome, RECEIPT_REFUSED):
            kept = late_receipt(action.result, action.provider_result_id)
            yield from ledger(RecordEvidence(action.key, kept))
        if isinstance(outcome, BaseException) and refused is None:
            refused = outcome
    if refused is not None:
        raise refused
