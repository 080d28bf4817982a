"""``RunMachine``: which event is allowed in which state, and the snapshot it leads to."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from langgraph_effects.errors import IllegalTransition, InvalidInput
from langgraph_effects.journal.model import RESUMED, RunEvent, RunSnapshot, RunState, Transition


class RunMachine:
    """A declared state machine: states, allowed transitions, one next action per state.

    Every run also accepts ``resumed`` (a worker picked it up again; no state
    change) in any non-terminal state. ``expire_event``, when given, is the
    next action wherever the lease has expired or the attempts are spent.

    Raises:
        InvalidInput: an unknown state in a transition, a non-terminal state
            without a next action, or two transitions for one (event, state).
    """

    def __init__(
        self,
        name: str,
        *,
        states: Sequence[RunState],
        transitions: Sequence[Transition],
        initial: str,
        expire_event: str | None = None,
    ) -> None:
        self.name = name
        self.states = {s.name: s for s in states}
        self.initial = initial
        self.expire_event = expire_event
        if len(self.states) != len(states):
            raise InvalidInput(f"machine {name!r}: duplicate state names")
        if initial not in self.states:
            raise InvalidInput(f"machine {name!r}: unknown initial state {initial!r}")
        for s in states:
            if not s.terminal and s.next_action is None:
                raise InvalidInput(f"machine {name!r}: state {s.name!r} needs a next_action")
        self._table: dict[tuple[str, str], Transition] = {}
        for t in transitions:
            for state in (*t.sources, *([t.target] if t.target else [])):
                if state not in self.states:
                    raise InvalidInput(f"machine {name!r}: {t.event!r} names unknown {state!r}")
            for source in t.sources:
                if (t.event, source) in self._table:
                    raise InvalidInput(f"machine {name!r}: two transitions for {t.event!r}")
                self._table[(t.event, source)] = t
        self.transitions = tuple(transitions)

    def allowed(self, state: str) -> list[Transition]:
        """The transitions allowed in ``state``, in declaration order."""
        return [t for t in self.transitions if state in t.sources]

    def next_action(self, snapshot: RunSnapshot, now: datetime) -> str | None:
        """The one action a worker should take now (None when the run is over)."""
        state = self.states[snapshot.state]
        if state.terminal:
            return None
        if self.expire_event and (
            snapshot.lease_expired(now)
            or (
                snapshot.attempts_left <= 0
                and any(t.consumes_attempt for t in self.allowed(state.name))
            )
        ):
            return self.expire_event
        return state.next_action

    def start(
        self,
        run_id: str,
        *,
        resource: str | None,
        attempts: int,
        lease_expires_at: datetime | None,
        now: datetime,
    ) -> RunSnapshot:
        draft = RunSnapshot(
            run_id=run_id,
            machine=self.name,
            resource=resource,
            state=self.initial,
            next_action=None,
            attempts_left=attempts,
            lease_expires_at=lease_expires_at,
            version=1,
            updated_at=now,
        )
        return draft.model_copy(update={"next_action": self.next_action(draft, now)})

    def apply(self, snap: RunSnapshot, event: RunEvent, now: datetime) -> RunSnapshot:
        """The snapshot after ``event`` (pure), or ``IllegalTransition``."""

        def refuse(why: str) -> IllegalTransition:
            return IllegalTransition(snap.run_id, status=snap.state, target=event.type, why=why)

        state = self.states[snap.state]
        if event.type == RESUMED and not state.terminal:
            target, consumes, evidence = snap.state, False, False
        else:
            t = self._table.get((event.type, snap.state))
            if t is None:
                allowed = ", ".join(x.event for x in self.allowed(snap.state)) or "nothing"
                raise refuse(f"not allowed in {snap.state!r} (allowed: {allowed})")
            if t.guard is not None and not t.guard(snap, event, now):
                raise refuse(f"condition not met: {t.condition}")
            target, consumes, evidence = (
                t.target or snap.state,
                t.consumes_attempt,
                t.accepts_evidence,
            )
        if consumes and snap.attempts_left <= 0:
            raise refuse("no attempts left")
        evidence_ids = snap.evidence_ids
        if evidence:
            if event.evidence_id is None:
                raise refuse("this transition accepts evidence: give evidence_id")
            if event.evidence_id in evidence_ids:
                raise refuse(f"evidence {event.evidence_id!r} was already accepted")
            evidence_ids = (*evidence_ids, event.evidence_id)
        new = snap.model_copy(
            update={
                "state": target,
                "attempts_left": snap.attempts_left - (1 if consumes else 0),
                "lease_expires_at": event.lease_expires_at or snap.lease_expires_at,
                "evidence_ids": evidence_ids,
                "version": snap.version + 1,
                "updated_at": now,
            }
        )
        return new.model_copy(update={"next_action": self.next_action(new, now)})

    def describe(self) -> str:
        """A plain-text table of the machine, for docs and review screens."""
        lines = [f"{self.name}: starts in {self.initial}"]
        for s in self.states.values():
            lines.append(
                f"  {s.name}: next {s.next_action or '-'}{' (terminal)' if s.terminal else ''}"
            )
        for t in self.transitions:
            lines.append(
                f"  {t.event}: {'|'.join(t.sources)} -> {t.target or '(same)'}  when {t.condition}"
            )
        return "\n".join(lines)
