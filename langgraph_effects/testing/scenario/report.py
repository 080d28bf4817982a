"""``ScenarioReport``: what one scenario counted, intended against acted."""

from __future__ import annotations

from dataclasses import dataclass, fields

# --------------------------------------------------------------------------- the report


@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioReport:
    """What one scenario (or, summed with ``+``, a batch of them) did.

    Attributes:
        scenario: a label.
        runs: scenarios summed into this report.
        intents: tool calls the model proposed (one intent each).
        effects: effects the providers applied.
        duplicates: applied effects beyond the first per intent (providers' count).
        unknown: operations left ``unknown`` at the end.
        human_resolved: operations a person (the review policy, an operator) decided.
        completed: runs whose thread finished with every operation terminal.
        stale_token_refusals: fenced writes the ledger refused (a late worker).
        mislabelled: operations whose record contradicts the provider or the rules.
        lost_receipts: effects a provider applied that the ledger does not record
            (not confirmed, not an evidenced or pending unknown) or that the model was
            told were not carried out; a person's own decision excepted.
        lost_answers: answers a person gave that were consumed silently: not
            applied, not refused, and the same question (same operation, status and
            attempts) asked again without a ``notice`` saying why.
        refused_answers: valid answers refused in words: the question the ledger still
            asked (an approval never approved nor sent, a review of the attempts shown)
            asked again unchanged, its notice a refusal (``decide.answers.REFUSED_NOTE``).
        lost_effects: intended effects that never acted: the model was told an
            operation was done more often than the provider applied it (a call meant
            again, answered with an earlier call's receipt), or the thread ended with a
            call of its last AIMessage never answered; a person's own decision excepted.
        violations: broken promises that are neither: a bad answer accepted, a
            valid answer refused, a resume under another tenant not refused, an
            operation recorded under a tenant the thread was not bound to, a call
            repeated on purpose that got no operation of its own.
        crashes: injected crashes that struck.
        errors: runs that failed with another exception (a resume may finish them).
        problems: one line per finding above, for the failure message.
    """

    scenario: str = ""
    runs: int = 1
    intents: int = 0
    effects: int = 0
    duplicates: int = 0
    unknown: int = 0
    human_resolved: int = 0
    completed: int = 0
    stale_token_refusals: int = 0
    mislabelled: int = 0
    lost_receipts: int = 0
    lost_answers: int = 0
    refused_answers: int = 0
    lost_effects: int = 0
    violations: int = 0
    crashes: int = 0
    errors: int = 0
    problems: tuple[str, ...] = ()

    @property
    def completion_rate(self) -> float:
        """The share of runs that completed (1.0 when there were none)."""
        return self.completed / self.runs if self.runs else 1.0

    def __add__(self, other: ScenarioReport) -> ScenarioReport:
        counts = {
            f.name: getattr(self, f.name) + getattr(other, f.name)
            for f in fields(self)
            if f.name != "scenario"
        }
        return ScenarioReport(scenario=self.scenario or other.scenario, **counts)

    @classmethod
    def empty(cls, scenario: str = "") -> ScenarioReport:
        """A report of no runs, to add others to."""
        return cls(scenario=scenario, runs=0)
