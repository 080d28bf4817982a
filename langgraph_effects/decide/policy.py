"""What a face does where the decision loop would hold its caller.

The loop has three places where it could wait for the world instead of
returning: an ``unknown`` nothing resolves (ask a person), another worker's
live lease (wait for its outcome), a transient refusal (sleep, then resend
under the lease still held). A graph face holds its task there; a face that
works a queue (the outbox relay) returns the record instead and schedules
the next look itself. ``Policy`` says which, for each of the three; the rules
that decide (``core.plan``) are the same either way.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Policy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """Where the loop may hold its caller (True) or returns the record as it stands (False).

    Attributes:
        ask_on_unknown: ask a person (``Ask``) when nothing resolves an unknown
            operation; False: return the ``unknown`` record.
        wait_for_lease: wait (``Sleep``) for a live owner's outcome, up to its
            lease; False: return its ``dispatching`` record at once, never
            dispatching (look again after ``lease_expires_at``).
        retry_transient: resend a transient refusal after ``core.plan.backoff``
            under the lease still held; False: release the operation to
            ``prepared`` at once and return it (the face schedules the resend).
    """

    ask_on_unknown: bool = True
    wait_for_lease: bool = True
    retry_transient: bool = True

    @classmethod
    def returning(cls) -> Policy:
        """Never hold: return the record wherever the loop would ask, wait or sleep."""
        return cls(ask_on_unknown=False, wait_for_lease=False, retry_transient=False)
