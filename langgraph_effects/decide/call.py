"""One tool call of an effect tool, with its identity derived once.

``EffectCall.build`` turns a tool call (name, id, arguments) and the thread it
runs in into everything the decision loop needs: the target, the payload
digest, the operation id and key, the provider idempotency key and the
write-ahead draft. The arguments are canonicalised once, here: the digest is
computed from that text and the draft carries it to the ledger.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langgraph_effects.core.digest import canonical_json
from langgraph_effects.core.identity import encode_origins, first_open, nth_open
from langgraph_effects.core.ids import (
    MAX_CANDIDATES,
    candidate_operation_id,
    idempotency_key,
    intent_operation_id,
)
from langgraph_effects.core.model import (
    Operation,
    OperationDraft,
    OperationKey,
    key_retention_seconds,
)
from langgraph_effects.effects import EffectContext, EffectSpec

if TYPE_CHECKING:
    from langgraph_effects.decide.identity import Timeline

__all__ = ["EffectCall", "Execute", "ProviderResult"]

Execute = Callable[[dict[str, Any]], Any]
"""Run the tool with these arguments (through ToolNode / the middleware chain)."""


@dataclass(frozen=True, slots=True)
class ProviderResult:
    """What an effect's body may return when it knows the provider's id for its result.

    The loop records ``result`` (as it records any returned value) and
    ``provider_result_id`` with it (``Operation.provider_result_id``, on the
    receipt and on a late receipt's evidence). The outbox relay's deliveries
    return one (the provider's message id); a tool's plain value has no id.
    """

    result: Any
    provider_result_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectCall:
    """One tool call of an effect tool, with its identity derived (see ``build``)."""

    spec: EffectSpec
    tool_name: str
    tool_call_id: str
    args: dict[str, Any]
    tenant_id: str
    workflow_id: str
    target: str | None
    payload_digest: str
    operation_id: str
    idempotency_key: str
    single: bool = True
    """The only effect call of its task: an answer without operation_id applies to it."""
    siblings: Mapping[str, OperationDraft] = field(default_factory=dict)
    """The effect calls of its task by operation id (an answer may name one of them)."""
    preapproved_by: str | None = None
    """A person already approved this exact call upstream (LangChain's HITL middleware):
    the approval is recorded under that name instead of asking twice."""
    timeline: Timeline | None = field(default=None, repr=False, compare=False)
    """Where the call runs (``decide.identity``): its task, step and their lineage; None
    outside a graph task."""
    index: int = 0
    """Which of the call's candidate ids this is (``core.ids.candidate_operation_id``)."""
    fixed_id: bool = False
    """The id is fixed (an intent key's, or a draft the face built): one operation, never
    walked from candidate to candidate."""
    task_id: str | None = None
    """LangGraph's task running the call: answers it applied are recorded under it, so
    the values LangGraph hands that task again are recognised and never re-applied."""
    user: str | None = None
    """The run's authenticated user (LangGraph Server's ``langgraph_auth_user``): an
    answer this run applies is recorded as decided by that user."""
    write_ahead: OperationDraft = field(repr=False, compare=False)
    """What ``prepare`` writes for this call, built once by ``build`` (see ``draft``)."""

    @classmethod
    def build(
        cls,
        spec: EffectSpec,
        *,
        tool_name: str,
        tool_call_id: str,
        args: Mapping[str, Any],
        tenant_id: str,
        workflow_id: str,
        single: bool = True,
        siblings: Mapping[str, OperationDraft] | None = None,
        preapproved_by: str | None = None,
        timeline: Timeline | None = None,
        index: int = 0,
        twin: int = 0,
        task_id: str | None = None,
        user: str | None = None,
        canonical: bytes | None = None,
        digest: str | None = None,
    ) -> EffectCall:
        """Derive target, digest and ids (``canonical``: ``args`` already canonicalised;
        ``digest``: the payload digest when it is known, one under a key rotated out).

        The operation id: the application's intent key's; else a candidate of tenant,
        thread, action and digest, which the decision loop walks on from to the call's
        operation (``decide.identity``): the first at or after ``index`` that the
        state does not list as answered, or, for a call ``twin`` identical calls of its
        AIMessage come before (same tool, same arguments, in the message's order), the
        ``twin``-th such (``core.identity.nth_open``): each open candidate before it
        is an earlier twin's start, so the ``k``-th twin pays one prepare, not ``k``.
        """
        args = dict(args)
        target = spec.target_of(args)
        payload_json = canonical if canonical is not None else canonical_json(args)
        if digest is None:
            digest = spec.digest_of(target, args, canonical=payload_json)
        intent = spec.intent_of(args)
        if intent is not None:
            op_id = intent_operation_id(tenant_id=tenant_id, action=spec.action, intent_key=intent)
        else:
            scope = None if timeline is None else timeline.scope

            def candidate(i: int) -> str:
                return candidate_operation_id(
                    tenant_id=tenant_id,
                    workflow_id=workflow_id,
                    action=spec.action,
                    payload_digest=digest,
                    index=i,
                    scope=scope,
                )

            answered = frozenset() if timeline is None else timeline.answered
            index = nth_open(twin, index, candidate, answered)
            op_id = candidate(index)
        key = idempotency_key(op_id)
        draft = OperationDraft.with_payload_json(
            payload_json.decode(),
            tenant_id=tenant_id,
            operation_id=op_id,
            workflow_id=workflow_id,
            action=spec.action,
            action_version=spec.version,
            target=target,
            payload_digest=digest,
            payload=args if spec.store_payload else None,
            payload_stored=spec.store_payload,
            idempotency_key=key,
            # What the provider promises for that key (None: no deduplication):
            # the CLI and reviews judge a resend from the record alone.
            key_retention_seconds=key_retention_seconds(spec.contract),
            tool_call_id=tool_call_id,
            origin=None if timeline is None else encode_origins([timeline.origin(tool_call_id)]),
        )
        return cls(
            spec=spec,
            tool_name=tool_name,
            tool_call_id=tool_call_id,
            args=args,
            tenant_id=tenant_id,
            workflow_id=workflow_id,
            target=target,
            payload_digest=digest,
            operation_id=op_id,
            idempotency_key=key,
            single=single,
            siblings={} if siblings is None else siblings,
            preapproved_by=preapproved_by,
            timeline=timeline,
            index=index,
            fixed_id=intent is not None,
            task_id=task_id,
            user=user,
            write_ahead=draft,
        )

    @classmethod
    def of_draft(
        cls, spec: EffectSpec, draft: OperationDraft, *, args: Mapping[str, Any]
    ) -> EffectCall:
        """A call whose write-ahead record the face built itself: ids, target and digest
        are the draft's (the outbox relay's, fixed when the entry was enqueued)."""
        key = draft.idempotency_key or idempotency_key(draft.operation_id)
        return cls(
            spec=spec,
            tool_name=draft.action,
            tool_call_id=draft.tool_call_id or draft.operation_id,
            args=dict(args),
            tenant_id=draft.tenant_id,
            workflow_id=draft.workflow_id or draft.operation_id,
            target=draft.target,
            payload_digest=draft.payload_digest,
            operation_id=draft.operation_id,
            idempotency_key=key,
            fixed_id=True,
            write_ahead=draft,
        )

    @property
    def key(self) -> OperationKey:
        return OperationKey(tenant_id=self.tenant_id, operation_id=self.operation_id)

    def at(self, index: int) -> EffectCall:
        """The same call at its ``index``-th candidate id (``decide.identity``), or the
        first after it that the call's state does not list as answered
        (``core.identity.first_open``)."""
        scope = None if self.timeline is None else self.timeline.scope

        def candidate(i: int) -> str:
            return candidate_operation_id(
                tenant_id=self.tenant_id,
                workflow_id=self.workflow_id,
                action=self.spec.action,
                payload_digest=self.payload_digest,
                index=i,
                scope=scope,
            )

        if self.timeline is not None and self.timeline.answered:
            index = first_open(index, candidate, self.timeline.answered)
        return self.at_id(candidate(index), index=index)

    def sibling(self, op_id: str) -> OperationDraft | None:
        """The write-ahead record of the call of this task whose operation is ``op_id``,
        or None when no call of this task is that operation.

        ``siblings`` holds each call at the candidate it starts from; a call the
        identity walk moved on (past a repeat's record, a parallel branch's:
        ``decide.identity``) is at a later one, so an answer naming it is matched
        against those too: each group of identical calls once, up to the last candidate
        a walk takes (``core.ids.MAX_CANDIDATES``), so no answer naming a call of this
        task is refused. An answer naming none costs that many ids per group (about
        0.15 s), paid only by an answer that is refused.
        """
        found = self.siblings.get(op_id)
        if found is not None or not op_id.startswith("op-"):
            return found
        scope = None if self.timeline is None else self.timeline.scope
        groups = {
            (d.tenant_id, d.workflow_id, d.action, d.payload_digest): d
            for d in self.siblings.values()
            if d.workflow_id is not None
        }
        for (tenant_id, workflow_id, action, digest), draft in groups.items():
            assert workflow_id is not None
            for index in range(1, MAX_CANDIDATES + 1):
                candidate = candidate_operation_id(
                    tenant_id=tenant_id,
                    workflow_id=workflow_id,
                    action=action,
                    payload_digest=digest,
                    index=index,
                    scope=scope,
                )
                if candidate == op_id:
                    key = idempotency_key(op_id)
                    return draft.model_copy(update={"operation_id": op_id, "idempotency_key": key})
        return None

    def at_id(self, op_id: str, *, index: int | None = None) -> EffectCall:
        """The same call under operation id ``op_id`` (a candidate, or a known record's)."""
        key = idempotency_key(op_id)
        draft = self.write_ahead.model_copy(update={"operation_id": op_id, "idempotency_key": key})
        return dataclasses.replace(
            self,
            operation_id=op_id,
            idempotency_key=key,
            index=self.index if index is None else index,
            write_ahead=draft,
        )

    def with_args(self, args: Mapping[str, Any]) -> EffectCall:
        """The same tool call with other arguments: another digest, so its identity is
        derived again from its first candidate (the decision loop walks it)."""
        return self._rebuilt(args=args)

    def with_digest(self, digest: str) -> EffectCall:
        """The same call as a key rotated out digested it: its identity under that key."""
        return self._rebuilt(args=self.args, digest=digest)

    def _rebuilt(self, *, args: Mapping[str, Any], digest: str | None = None) -> EffectCall:
        return EffectCall.build(
            self.spec,
            tool_name=self.tool_name,
            tool_call_id=self.tool_call_id,
            args=args,
            tenant_id=self.tenant_id,
            workflow_id=self.workflow_id,
            single=self.single,
            siblings=self.siblings,
            preapproved_by=self.preapproved_by,
            timeline=self.timeline,
            task_id=self.task_id,
            user=self.user,
            digest=digest,
        )

    def draft(self) -> OperationDraft:
        """The write-ahead record of this call (built once, by ``build``)."""
        return self.write_ahead

    def context(self, op: Operation | None) -> EffectContext:
        return EffectContext(
            operation_id=self.operation_id,
            idempotency_key=(op.idempotency_key if op else None) or self.idempotency_key,
            attempt=op.attempts if op else 0,
            tenant_id=self.tenant_id,
            action=self.spec.action,
            target=self.target,
            workflow_id=self.workflow_id,
            tool_call_id=self.tool_call_id,
            payload_digest=self.payload_digest,
            payload=self.args,
        )
