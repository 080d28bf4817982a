"""Value objects: operations, evidence, leases, events, contracts. Pure, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from langgraph_effects.core.actors import (
    APPROVED_BY_PREFIX,
    TAKEOVER_PREFIX,
    approver,
    reconciler_source,
)
from langgraph_effects.core.digest import DIGEST_PATTERN, canonical_json
from langgraph_effects.core.storable import (
    MAX_SOURCE,
    MAX_SUMMARY,
    clip,
    plain_json,
    storable,
    storable_text,
)
from langgraph_effects.errors import InvalidInput

__all__ = [
    "APPROVED_BY_PREFIX",
    "CONVERGENT_WINDOW",
    "REPLACED_BY_PREFIX",
    "TAKEOVER_PREFIX",
    "TERMINAL",
    "Decision",
    "EventKind",
    "Evidence",
    "EvidenceKind",
    "LeaseOwner",
    "Operation",
    "OperationDraft",
    "OperationEvent",
    "OperationKey",
    "OperationStatus",
    "Prepared",
    "ProviderContract",
    "Resolution",
    "describe_actor",
    "key_retention_seconds",
    "reconciled_evidence",
    "replaced_reason",
    "replacement",
    "unvalidated",
    "utcnow",
]

JSON = Any  # a JSON value: dict, list, str, int, float, bool or None


def utcnow() -> datetime:
    """The current time in UTC (timezone-aware): the default clock of ledgers and faces."""
    return datetime.now(UTC)


class OperationStatus(StrEnum):
    """Where an operation stands. ``confirmed`` and ``rejected`` are terminal."""

    PREPARED = "prepared"
    DISPATCHING = "dispatching"
    CONFIRMED = "confirmed"
    REJECTED = "rejected"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        """True for ``confirmed`` and ``rejected``: states no transition leaves."""
        return self in TERMINAL


TERMINAL = frozenset({OperationStatus.CONFIRMED, OperationStatus.REJECTED})
"""The states no transition leaves (``OperationStatus.terminal``)."""


class EventKind(StrEnum):
    """What an entry of the event log records. Each transition verb is one kind."""

    PREPARE = "prepare"
    APPROVE = "approve"
    CLAIM = "claim"
    RELEASE = "release"
    CONFIRM = "confirm"
    REJECT = "reject"
    MARK_UNKNOWN = "mark_unknown"
    RESOLVE = "resolve"
    EVIDENCE = "evidence"


class EvidenceKind(StrEnum):
    """What evidence says: ``confirmed`` or ``rejected`` (conclusive), or ``inconclusive``."""

    CONFIRMED = "confirmed"
    REJECTED = "rejected"
    INCONCLUSIVE = "inconclusive"


class Decision(StrEnum):
    """A person's decision on an operation (review) or a proposed call (approval)."""

    CONFIRM = "confirm"
    REJECT = "reject"
    RETRY = "retry"
    APPROVE = "approve"


class _Frozen(BaseModel):
    """A value of the package: built from bad input, it raises ``InvalidInput`` naming the
    model and each field that is wrong (not pydantic's report, with its links)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise InvalidInput(invalid_fields(type(self).__name__, exc)) from exc


def invalid_fields(model: str, exc: ValidationError) -> str:
    """``model``'s wrong fields in one sentence: ``Evidence: summary: Input should be a valid
    string (got 123)``."""
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "value"
        got = repr(error.get("input"))
        got = got if len(got) <= 60 else got[:57] + "..."
        problems.append(f"{where}: {error['msg']} (got {got})")
    return f"{model}: " + "; ".join(problems)


M = TypeVar("M", bound=BaseModel)

_ALL_FIELDS: dict[type[BaseModel], set[str]] = {}
"""By model: its field names, the fields set of every ``unvalidated`` instance of it."""


def unvalidated(model: type[M], values: dict[str, Any]) -> M:
    """``model`` holding ``values`` as they are: no validation, no copy.

    For values the package itself made or checked, on its hot path: a row of
    its own schema read back (every column was validated on the way in and
    the schema constrains the rest), an event it derives from that row. What
    ``model_construct`` does, without its per-field Python loop (it is slower
    than validating). ``values`` must name every field, in declaration order,
    each already of its field's type (enum members, aware datetimes): the
    instance is then equal to, and dumps like, the validated one.
    Never for values from outside the package: validate those.

    Every such instance of ``model`` shares one set of field names as its fields set
    (all of them): pydantic never changes it in place on a frozen model (``model_copy``
    copies it before adding to it), so one set per model is made, not one per record.
    """
    obj = model.__new__(model)
    object.__setattr__(obj, "__dict__", values)
    fields = _ALL_FIELDS.get(model)
    if fields is None:
        fields = _ALL_FIELDS[model] = set(model.model_fields)
    object.__setattr__(obj, "__pydantic_fields_set__", fields)
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj


class Evidence(_Frozen):
    """What a reconciliation (or a receipt) saw at the provider.

    Only ``confirmed`` and ``rejected`` are conclusive. An empty search on an
    eventually consistent index, or a target that merely looks done, is
    ``inconclusive``: it never resolves an ``unknown`` operation.
    """

    kind: EvidenceKind
    summary: str = ""
    provider_result_id: str | None = None
    provider_request_id: str | None = None
    result: JSON = None
    source: str = "reconciler"
    observed_at: datetime = Field(default_factory=utcnow)

    @field_validator("summary", "source", "provider_result_id", "provider_request_id")
    @classmethod
    def _storable_text(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Evidence is stored as it is made, and a long summary or source must
        # still fit the Resolution it settles (core.storable).
        if value is None:
            return None
        limit = {"summary": MAX_SUMMARY, "source": MAX_SOURCE}.get(info.field_name or "", 1000)
        return clip(storable_text(value), limit)

    @field_validator("result")
    @classmethod
    def _storable_result(cls, value: JSON) -> JSON:
        return storable(value) if plain_json(value) else storable_text(str(value))

    @property
    def conclusive(self) -> bool:
        """True unless ``inconclusive``: only conclusive evidence may settle an ``unknown``."""
        return self.kind is not EvidenceKind.INCONCLUSIVE

    @classmethod
    def confirmed(
        cls,
        summary: str = "",
        *,
        provider_result_id: str | int | None = None,
        provider_request_id: str | None = None,
        result: JSON = None,
        source: str = "reconciler",
    ) -> Self:
        """Conclusive: the provider applied exactly this operation."""
        return cls(
            kind=EvidenceKind.CONFIRMED,
            summary=summary,
            provider_result_id=None if provider_result_id is None else str(provider_result_id),
            provider_request_id=provider_request_id,
            result=result,
            source=source,
        )

    @classmethod
    def rejected(cls, summary: str, *, source: str = "reconciler", result: JSON = None) -> Self:
        """Conclusive: the provider did not apply the operation and never will."""
        return cls(kind=EvidenceKind.REJECTED, summary=summary, source=source, result=result)

    @classmethod
    def inconclusive(cls, summary: str, *, source: str = "reconciler") -> Self:
        """Not enough to decide; the operation stays ``unknown``."""
        return cls(kind=EvidenceKind.INCONCLUSIVE, summary=summary, source=source)


def reconciled_evidence(answer: Any) -> Evidence:
    """What a reconciler's return value proves: itself if it is ``Evidence``, else nothing.

    A reconciler that returns ``None`` or anything else is a broken lookup, not
    evidence either way: inconclusive evidence naming what came back, so the
    operation goes to review instead of failing every pass (runner and relay).
    A reconciler cannot speak for an operator: evidence it gives with source
    ``operator`` is recorded as the reconciler's (``core.actors.reconciler_source``).
    """
    if isinstance(answer, Evidence):
        source = reconciler_source(answer.source)
        return answer if source == answer.source else answer.model_copy(update={"source": source})
    return Evidence.inconclusive(
        f"the reconciler returned {type(answer).__name__}, not Evidence: {answer!r:.200}"
    )


class Resolution(_Frozen):
    """A person's (or a reconciler's) decision on an operation.

    ``confirm`` / ``reject`` / ``retry`` decide an ``unknown`` operation;
    ``approve`` / ``reject`` decide a ``prepared`` one out of band (the next
    run then dispatches it without asking, or replays the rejection).
    ``by`` is the actor the event log records; an operator tool that checked
    who is at the keyboard also records the name given (``claimed_by``) and
    the identity it verified (``verified_by``) in the event's detail.
    """

    decision: Decision
    by: str = Field(min_length=1, max_length=200)
    reason: str = Field(default="", max_length=4000)
    result: JSON = None
    provider_result_id: str | None = None
    evidence: Evidence | None = None
    answer: str | None = Field(default=None, max_length=400)
    """The interrupt answer this resolution applies (its task and digest), logged in the
    event so the value LangGraph hands the task again is recognised, never re-applied."""
    claimed_by: str | None = Field(default=None, max_length=200)
    verified_by: str | None = Field(default=None, max_length=200)

    def detail(self) -> dict[str, Any]:
        """The event detail of this decision: what, why, and who as claimed and verified."""
        out: dict[str, Any] = {"decision": self.decision.value, "reason": self.reason}
        if self.claimed_by is not None:
            out["claimed_by"] = self.claimed_by
        if self.verified_by is not None:
            out["verified_by"] = self.verified_by
        return out


CONVERGENT_WINDOW = timedelta(days=36525)
"""The key window of ``ProviderContract.convergent()``: a century, i.e. no expiry."""


class ProviderContract(_Frozen):
    """What the provider promises about retries.

    Args:
        idempotency_window: how long the provider remembers an idempotency key
            (Stripe: at least 24 h). ``None``: the provider honours no key.
        safety_margin: retries under the key stop this long before the window
            closes, so clock skew and slow requests never cross it.
        status_lookup: the provider can be asked whether an operation happened
            (a reconciler should then be given).
        max_transient_retries: bounded in-process retries after a
            ``TransientProviderError``.
    """

    idempotency_window: timedelta | None = None
    safety_margin: timedelta = timedelta(minutes=5)
    status_lookup: bool = False
    max_transient_retries: int = Field(default=3, ge=0, le=20)
    backoff_initial: float = Field(default=0.05, ge=0)
    backoff_max: float = Field(default=2.0, ge=0)

    @property
    def honours_key(self) -> bool:
        """True when the provider deduplicates by idempotency key (a window is declared)."""
        return self.idempotency_window is not None

    @property
    def key_retention(self) -> timedelta | None:
        """How long after the first dispatch a resend under the key is safe: the window
        minus the safety margin (never negative); None without a key contract."""
        if self.idempotency_window is None:
            return None
        return max(self.idempotency_window - self.safety_margin, timedelta(0))

    @classmethod
    def convergent(cls) -> Self:
        """A provider where the same payload sent again changes nothing more, ever.

        An upsert by a natural key (Salesforce's external id, HubSpot's unique
        property), an MCP tool with ``idempotentHint``: the payload itself is the
        key, so an unclear outcome is resent with the same pinned payload at any
        time. Modelled as a key window of a century with no safety margin.
        """
        return cls(idempotency_window=CONVERGENT_WINDOW, safety_margin=timedelta(0))


def key_retention_seconds(contract: ProviderContract | None) -> float | None:
    """The retention a record keeps of ``contract``'s promise (``Operation.key_retention_seconds``).

    The window minus the safety margin, in seconds; None when the provider
    honours no key, so the record never claims a deduplication the provider
    does not offer. ``core.plan.recorded_contract`` reads it back.
    """
    retention = None if contract is None else contract.key_retention
    return None if retention is None else retention.total_seconds()


class LeaseOwner(_Frozen):
    """Who holds a lease: enough to tell, on the same host, a dead owner from a live one.

    The process start time excludes PID reuse: a new process with the same pid
    has another start time. ``nonce`` tells two claims of one process apart.
    A pure value: this process's owner and the liveness check, which read the
    process table, are ``langgraph_effects._owners.current_owner`` and
    ``provably_dead``.
    """

    host: str
    pid: int
    started_at: float
    nonce: str

    def encode(self) -> str:
        """The owner as the ledger stores it: ``host|pid|started_at|nonce``."""
        return f"{self.host}|{self.pid}|{self.started_at:.2f}|{self.nonce}"

    @classmethod
    def decode(cls, value: str) -> Self:
        """The owner a stored ``lease_owner`` names (``encode``'s inverse)."""
        host, pid, started, nonce = value.rsplit("|", 3)
        return cls(host=host, pid=int(pid), started_at=float(started), nonce=nonce)

    def describe(self) -> str:
        """The owner for a person: ``process 23379 on vm``."""
        return f"process {self.pid} on {self.host}"


def describe_actor(actor: str) -> str:
    """An event's actor, or a record's lease owner, as a person reads it.

    A process (a lease owner, stored ``host|pid|started_at|nonce``) reads as
    ``process 23379 on vm``, one taking over a lapsed lease as ``process 23379
    on vm, taking over``; a person's or the system's name (``ana``, ``ledger``,
    ``reconciler``) stays as it is. The stored form is for machines (``--json``).
    """
    taking_over = actor.startswith(TAKEOVER_PREFIX)
    owner = actor.removeprefix(TAKEOVER_PREFIX)
    if owner.count("|") < 3:
        return actor
    try:
        described = LeaseOwner.decode(owner).describe()
    except (ValueError, TypeError):  # another tool's owner: shown as written
        return actor
    return f"{described}, taking over" if taking_over else described


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationKey:
    """What addresses one operation in a ledger: its tenant and its id.

    The ``Ledger`` methods take the two as separate arguments (their public
    signatures); the decision engine carries this one value instead.
    """

    tenant_id: str
    operation_id: str


class OperationDraft(_Frozen):
    """What ``Ledger.prepare`` writes ahead of a dispatch."""

    tenant_id: str = Field(min_length=1, max_length=200)
    operation_id: str = Field(min_length=1, max_length=200)
    workflow_id: str | None = Field(default=None, max_length=500)
    action: str = Field(min_length=1, max_length=200)
    action_version: int = Field(default=1, ge=1)
    target: str | None = Field(default=None, max_length=1000)
    payload_digest: str = Field(pattern=DIGEST_PATTERN)
    payload: JSON = None
    payload_stored: bool = True
    authorization_ref: str | None = None
    provider: str | None = None
    idempotency_key: str | None = Field(default=None, max_length=255)
    key_retention_seconds: float | None = Field(default=None, ge=0)
    """How long after the first dispatch the provider still deduplicates ``idempotency_key``
    (its window minus a safety margin); None: no key contract, or not recorded."""
    tool_call_id: str | None = None
    origin: str | None = None
    """Where the call was met (``core.identity``: task, tool-call id, step checkpoints),
    as the JSON text the record keeps; None for a call outside a graph task."""

    @field_validator("tenant_id", "operation_id", "action")
    @classmethod
    def _no_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @property
    def key(self) -> OperationKey:
        return OperationKey(tenant_id=self.tenant_id, operation_id=self.operation_id)

    @classmethod
    def with_payload_json(cls, payload_json: str, **fields: Any) -> Self:
        """A draft whose payload the caller already turned into canonical JSON text."""
        draft = cls(**fields)
        draft.__dict__[_PAYLOAD_JSON] = (draft.payload, payload_json)
        return draft

    def payload_json(self) -> str | None:
        """The payload as canonical JSON text (None without a payload), computed once.

        Kept beside the fields, not as one: it takes no part in equality or
        serialization, and a copy with another payload computes its own.

        Raises:
            InvalidInput: the payload is not plain JSON, or is over 1 MiB as JSON.
        """
        if self.payload is None:
            return None
        known = self.__dict__.get(_PAYLOAD_JSON)
        if known is None or known[0] is not self.payload:
            known = (self.payload, canonical_json(self.payload).decode())
            self.__dict__[_PAYLOAD_JSON] = known
        text: str = known[1]
        return text


_PAYLOAD_JSON = "_payload_json"

REPLACED_BY_PREFIX = "replaced by "
"""The rejection reason of an operation a reviewer's edit replaced: ``replaced by`` +
the replacing operation's id (``replaced_reason``), as ledgers have always stored it."""


def replaced_reason(operation_id: str, by: str) -> str:
    """The rejection reason that records an edit by ``by`` replacing an operation with
    ``operation_id`` (``replacement``'s inverse; ``Operation.replaced_by`` reads it)."""
    return f"{REPLACED_BY_PREFIX}{operation_id} (edited by {by})"


def replacement(error: str | None) -> str | None:
    """The id of the operation a rejection reason says replaced it (``replaced_reason``);
    None: not replaced."""
    if error is None or not error.startswith(REPLACED_BY_PREFIX):
        return None
    return error.removeprefix(REPLACED_BY_PREFIX).split(" ", 1)[0] or None


class Operation(_Frozen):
    """The ledger's current record of one operation (one row)."""

    tenant_id: str
    operation_id: str
    workflow_id: str | None = None
    action: str
    action_version: int = 1
    target: str | None = None
    payload_digest: str
    payload: JSON = None
    payload_stored: bool = True
    authorization_ref: str | None = None
    provider: str | None = None
    tool_call_id: str | None = None
    origin: str | None = None
    """The origins of the calls that are this operation (``core.identity``), JSON text."""
    status: OperationStatus
    idempotency_key: str | None = None
    key_retention_seconds: float | None = None
    provider_request_id: str | None = None
    provider_result_id: str | None = None
    result: JSON = None
    error: str | None = None
    attempts: int = 0
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    fencing_token: int = 0
    record_version: int = 1
    evidence_checked_at: datetime | None = None
    created_at: datetime
    updated_at: datetime
    """Moves on every write, evidence and approval included."""
    status_changed_at: datetime
    """When ``status`` last changed (creation counts): the age of an ``unknown``.
    Defaults to ``updated_at`` when not given."""
    first_dispatched_at: datetime | None = None
    last_dispatched_at: datetime | None = None
    resolved_at: datetime | None = None

    @model_validator(mode="before")
    @classmethod
    def _status_changed_defaults_to_updated(cls, data: Any) -> Any:
        # Records built by hand (tests, third-party ledgers) before this field existed.
        if isinstance(data, dict) and data.get("status_changed_at") is None:
            data = {**data, "status_changed_at": data.get("updated_at")}
        return data

    @property
    def key(self) -> OperationKey:
        return OperationKey(tenant_id=self.tenant_id, operation_id=self.operation_id)

    def lease_alive(self, now: datetime) -> bool:
        """True while the record is ``dispatching`` under a lease unexpired at ``now``."""
        return (
            self.status is OperationStatus.DISPATCHING
            and self.lease_expires_at is not None
            and now < self.lease_expires_at
        )

    @property
    def approved_by(self) -> str | None:
        """Who approved the first dispatch out of band (``Ledger.approve``, an operator's
        ``approve``): ``authorization_ref`` is then ``approved-by:NAME``. None: nobody."""
        return approver(self.authorization_ref)

    @property
    def replaced_by(self) -> str | None:
        """The id of the operation that replaced this one when a reviewer edited the
        call (rejected with ``replaced_reason``); None: not replaced."""
        return replacement(self.error) if self.status is OperationStatus.REJECTED else None

    @property
    def owner(self) -> LeaseOwner | None:
        """The holder of the current lease, decoded; None when no lease was ever taken."""
        return LeaseOwner.decode(self.lease_owner) if self.lease_owner else None


class OperationEvent(_Frozen):
    """One entry of the append-only event log: a transition, with who and why."""

    tenant_id: str
    operation_id: str
    seq: int
    kind: EventKind
    from_status: OperationStatus | None
    to_status: OperationStatus
    actor: str
    fencing_token: int | None = None
    evidence: Evidence | None = None
    detail: JSON = None
    at: datetime
    event_id: int | None = None
    """Ledger-wide, increasing: ``Ledger.feed(after_id=...)`` follows the log."""


class Prepared(_Frozen):
    """What ``prepare`` returns: the record, and whether this call created it."""

    operation: Operation
    created: bool
