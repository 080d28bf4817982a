"""Every exception langgraph-effects raises.

The tree::

    EffectsError
    ├── InvalidInput (also ValueError)        bad ids, payloads, statuses, answers
    │   ├── PayloadMismatch                   same operation key, another payload digest
    │   ├── InvalidAnswer                     a resume value that answers no pending request
    │   └── TenantMismatch                    a thread resumed under a tenant it is not bound to
    ├── MiddlewareOrderError                  agent middleware listed in an order that cannot work
    ├── IllegalTransition                     the state machine refuses the move
    ├── EffectUnconfirmed                     run_effect: not confirmed, and nothing was resent
    ├── LedgerError
    │   ├── LedgerNotSetUp                    call ledger.setup() first
    │   ├── LedgerUnavailable                 the database could not be reached or failed
    │   ├── OperationNotFound                 no such operation for that tenant
    │   ├── StaleFencingToken                 a newer lease owns the operation
    │   ├── LeaseHeld                         a live lease owns the operation
    │   ├── ConcurrentUpdate                  the record changed under a conditional write
    │   └── StaleVersion                      a run journal append expected an older version
    └── ProviderError                         raised by effect tools, read by the runner
        ├── EffectRejected                    definitive: the provider said no, nothing applied
        └── TransientProviderError            provably not applied, safe to retry later

Everything else a tool raises is *ambiguous*: the provider may or may not have
acted, and the operation becomes ``unknown``. Exceptions carry typed attributes
so callers never parse messages.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "RECORD_MOVED",
    "ConcurrentUpdate",
    "EffectRejected",
    "EffectUnconfirmed",
    "EffectsError",
    "IllegalTransition",
    "InvalidAnswer",
    "InvalidInput",
    "LeaseHeld",
    "LedgerError",
    "LedgerNotSetUp",
    "LedgerUnavailable",
    "MiddlewareOrderError",
    "OperationNotFound",
    "PayloadKeyMissing",
    "PayloadMismatch",
    "ProviderError",
    "StaleFencingToken",
    "StaleVersion",
    "TenantMismatch",
    "TransientProviderError",
]


class EffectsError(Exception):
    """Root of every exception raised by langgraph-effects."""


class InvalidInput(EffectsError, ValueError):
    """An argument is malformed; nothing was written."""


class PayloadMismatch(InvalidInput):
    """The operation exists with a different payload digest; nothing was overwritten."""

    def __init__(self, operation_id: str, *, expected: str, actual: str) -> None:
        self.operation_id = operation_id
        self.expected = expected
        self.actual = actual
        keyed = expected.startswith("hmac:"), actual.startswith("hmac:")
        hint = _KEYED_HINT if keyed[0] != keyed[1] else _ROTATED_HINT if all(keyed) else ""
        super().__init__(
            f"operation {operation_id!r} was prepared with payload digest {expected[:12]}…, "
            f"this call has {actual[:12]}…: the same intent key cannot carry another payload{hint}"
        )


_KEYED_HINT = (
    " (one digest is keyed, 'hmac:', the other plain SHA-256: the effect's store_payload "
    "policy changed since the record was written, or it predates keyed digests)"
)


class PayloadKeyMissing(PayloadMismatch):
    """This very call (its task and tool call) has an open record whose keyed digest none
    of the effect's payload keys gives: the key it was digested under was dropped from
    ``payload_key`` before the record settled. Nothing was written or sent."""

    def __init__(self, operation_id: str, *, expected: str, actual: str, action: str) -> None:
        InvalidInput.__init__(
            self,
            f"effect {action!r}: this call's own record {operation_id!r} is still open and "
            f"was digested under a payload key no longer listed ({expected[:12]}…; the "
            f"current key gives {actual[:12]}…; or the effect's version changed). Sending "
            "it under the new key would act twice and orphan that record: list the old key "
            "after the new one, payload_key=[new, old] or LGE_PAYLOAD_OLD_KEYS, until its "
            "records are settled (docs/payload-keys.md)",
        )
        self.operation_id = operation_id
        self.expected = expected
        self.actual = actual


_ROTATED_HINT = (
    " (both digests are keyed: the payload differs, or payload_key changed since the "
    "record was written; after a rotation list the old key after the new one, "
    "payload_key=[new, old] or LGE_PAYLOAD_OLD_KEYS, until its records are settled: "
    "docs/payload-keys.md)"
)


class InvalidAnswer(InvalidInput):
    """A resume value is not a valid answer to the request; nothing was recorded.

    Marked as an invalid resume for LangGraph, so ``ToolNode`` never turns it
    into a ToolMessage: nothing is saved, and the request is asked again, saying why
    (``decide.drive``), under the same interrupt id.
    """

    def __init__(self, message: str, *, operation_id: str | None = None) -> None:
        self.operation_id = operation_id
        super().__init__(message)
        # langgraph.errors.is_invalid_resume() reads this flag.
        self._langgraph_invalid_resume = True


class TenantMismatch(InvalidInput):
    """A thread runs under a tenant other than the one it is bound to; nothing was dispatched.

    A thread is bound to the tenant of its first effect (``Ledger.bind_thread``). The
    error goes to whoever asked under ``requested``: it never names the tenant that owns
    the thread (an operator finds it in the ledger's ``lge_threads``).
    """

    def __init__(self, workflow_id: str, *, requested: str) -> None:
        super().__init__(
            f"thread {workflow_id!r} does not belong to tenant {requested!r}: nothing was "
            "dispatched. Resume it with the tenant it belongs to (or none: that tenant is used)."
        )
        self.workflow_id = workflow_id
        self.requested = requested


class MiddlewareOrderError(EffectsError):
    """``create_agent`` middleware is listed in an order that cannot keep the guarantee."""


class IllegalTransition(EffectsError):
    """The state machine does not allow moving ``operation_id`` from ``status`` to ``target``."""

    def __init__(self, operation_id: str, *, status: str, target: str, why: str = "") -> None:
        self.operation_id = operation_id
        self.status = status
        self.target = target
        msg = f"operation {operation_id!r} cannot move from {status!r} to {target!r}"
        super().__init__(f"{msg}: {why}" if why else msg)


class EffectUnconfirmed(EffectsError):
    """``run_effect``: the effect's outcome is not confirmed, and nothing was resent.

    The operation stays in the ledger, ``unknown`` (the provider may have acted)
    or ``prepared`` (released after transient failures), for a later run or an
    operator to settle; ``status`` says which.
    """

    def __init__(self, operation_id: str, *, status: str, detail: str | None = None) -> None:
        self.operation_id = operation_id
        self.status = status
        self.detail = detail
        why = f": {detail}" if detail else ""
        super().__init__(
            f"operation {operation_id!r} is {status}, not confirmed{why}; nothing was resent "
            "(langgraph-effects show / resolve decides it)"
        )


class LedgerError(EffectsError):
    """A ledger could not do what was asked."""


class LedgerNotSetUp(LedgerError):
    """The ledger's tables do not exist (or are older than this code)."""

    def __init__(self, detail: str = "") -> None:
        msg = "the ledger is not set up: call ledger.setup() once before using it"
        super().__init__(f"{msg} ({detail})" if detail else msg)


class LedgerUnavailable(LedgerError):
    """The database behind the ledger failed or cannot be reached."""


class OperationNotFound(LedgerError):
    """No operation with that id exists for that tenant."""

    def __init__(self, tenant_id: str, operation_id: str) -> None:
        self.tenant_id = tenant_id
        self.operation_id = operation_id
        super().__init__(f"no operation {operation_id!r} for tenant {tenant_id!r}")


class StaleFencingToken(LedgerError):
    """A write carried a fencing token older than the operation's current one."""

    def __init__(self, operation_id: str, *, token: int, current: int) -> None:
        self.operation_id = operation_id
        self.token = token
        self.current = current
        super().__init__(
            f"operation {operation_id!r}: fencing token {token} is stale (current is {current}); "
            "another worker took the lease over and nothing was changed"
        )


class LeaseHeld(LedgerError):
    """Another owner holds a lease on the operation."""

    def __init__(self, operation_id: str, *, owner: str | None, expires_at: Any) -> None:
        self.operation_id = operation_id
        self.owner = owner
        self.expires_at = expires_at
        super().__init__(
            f"operation {operation_id!r} is leased by {owner!r} until {expires_at}: not claimed"
        )


class ConcurrentUpdate(LedgerError):
    """The record's version or status changed between read and conditional write."""

    def __init__(self, operation_id: str, *, expected: str, status: str) -> None:
        self.operation_id = operation_id
        self.expected = expected
        self.status = status
        super().__init__(
            f"operation {operation_id!r} changed concurrently: expected {expected}, found {status}"
        )


class StaleVersion(LedgerError):
    """A run journal append expected a version the run has already moved past.

    Nothing was written: another worker appended first. Re-read the snapshot
    and decide again from its ``next_action``.
    """

    def __init__(self, run_id: str, *, expected: int, current: int) -> None:
        self.run_id = run_id
        self.expected = expected
        self.current = current
        super().__init__(
            f"run {run_id!r}: append expected version {expected}, the run is at {current}; "
            "another worker moved it first and nothing was written"
        )


class ProviderError(EffectsError):
    """Base for the errors an effect tool raises to classify a provider's answer."""


class EffectRejected(ProviderError):
    """The provider definitively refused and did not act (validation, permission, conflict).

    The operation becomes ``rejected`` and is never retried.
    """

    def __init__(self, reason: str, *, code: str | None = None, detail: Any = None) -> None:
        self.reason = reason
        self.code = code
        self.detail = detail
        super().__init__(reason)


class TransientProviderError(ProviderError):
    """The provider refused before processing (429, 503): provably not applied.

    The call is retried with bounded backoff; ``retry_after`` (seconds) is honoured.
    """

    def __init__(self, reason: str, *, retry_after: float | None = None) -> None:
        self.reason = reason
        self.retry_after = retry_after
        super().__init__(reason)


RECORD_MOVED: tuple[type[EffectsError], ...] = (
    StaleFencingToken,
    IllegalTransition,
    ConcurrentUpdate,
    LeaseHeld,
)
"""The refusals of a conditional write that mean "the record moved under you": nothing was
changed, and the caller reads the record again (the decision loop) or says so (the CLI)."""
