"""``Schedule`` and ``Kind``: the seeded draws of a campaign, each a scenario to run."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from typing import Any, Literal

from langchain_core.tools import BaseTool

from langgraph_effects.testing.draws import (
    VARIANTS,
    Shape,
    Variant,
    index_ids,
)
from langgraph_effects.testing.faults import (
    CrashPoint,
)
from langgraph_effects.testing.mcp_server import READ_ONLY, SERVER, mcp_tools
from langgraph_effects.testing.providers import (
    Fault,
)
from langgraph_effects.testing.scenario.case import Scenario
from langgraph_effects.testing.scenario.graph import ToolRetryOrder
from langgraph_effects.testing.scenario.policies import (
    confirm_if_seen,
    console,
    defer,
    operator,
    retry_when_safe,
)
from langgraph_effects.testing.scenario.receipts import SlowSibling
from langgraph_effects.testing.scenario.tools import (
    RETENTION,
    ProviderKind,
    Providers,
    ReviewPolicy,
    builtin_call,
    control_tools,
    effect_tools,
)
from langgraph_effects.testing.workflows import LAYOUTS, Layout

# --------------------------------------------------------------------------- schedules


Revocation = Literal["none", "provider", "hook"]
PolicyName = Literal["confirm_if_seen", "retry_when_safe", "defer", "operator"]


class Kind(StrEnum):
    """What a schedule exercises besides crashes and provider faults (one kind each).

    Every kind but ``base`` answers through :func:`operator` more often than not
    (several rounds, by position or by interrupt id, sometimes a bad answer
    first) and counts duplicates per target against the intended effects.
    """

    BASE = "base"
    """Crashes, faults, lagging search, key expiry, revocation, racing resumers."""
    REVIEW_ROUNDS = "review_rounds"
    """Reviews over several rounds: every resend can be lost again (retry -> unknown -> review)."""
    APPROVAL = "approval"
    """``require_approval`` effects: approve, reject or edit, then dispatch, unknown, review."""
    HISTORY = "history_replay"
    """After the thread ends: ``invoke(None, snapshot.config)`` from a random history snapshot."""
    FORK = "update_state_fork"
    """After the thread ends: an ``update_state`` fork of a random snapshot, run on."""
    NO_TENANT = "no_tenant"
    """Resumes without ``tenant_id`` in the config: the thread's bound tenant applies."""
    OTHER_TENANT = "other_tenant"
    """A resume under another tenant first: refused, nothing dispatched."""
    REISSUED = "reissued_call"
    """Default durability lost the AIMessage: the model re-issues the calls with new ids."""
    RESENT = "resent_request"
    """The person sends the request again: unanswered calls map back, answered ones repeat."""
    REUSED_IDS = "reused_ids"
    """As ``resent_request``, the model reusing its first proposal's tool-call ids (``call_0``
    every turn): an older ToolMessage with a new call's id answers nothing of it."""
    KEY_ROTATION = "key_rotation"
    """Only keyed digests kept (``store_payload=False``); the ``payload_key`` is rotated
    between the first run and the resume, the old key listed after the new one."""
    SUMMARIZED = "summarized_thread"
    """As ``resent_request``, the answered exchange removed first (``RemoveMessage``, or
    every message replaced by a summary, as ``SummarizationMiddleware`` does): answered
    calls still repeat on purpose."""
    HAND_MADE = "hand_made_ids"
    """No AIMessage proposes the calls: a router sends each as ``Send("tools", [call])``
    with an index id (``mail-0``...), the same ids again in the next turn."""
    NO_CHECKPOINTER = "no_checkpointer"
    """A stateless service: no checkpointer, each request its own invoke (twice the same),
    a node ``RetryPolicy`` re-running the calls within one."""
    COLLIDING = "colliding_edits"
    """Approvals whose reviewer edits a call to the arguments of a sibling (two calls of
    one tool) or, in a repeated turn, of an earlier answered call."""
    PARALLEL = "parallel_branches"
    """Two tool nodes issue the same call in one superstep (an audit branch)."""
    SUB_AGENT = "sub_agent"
    """A supervisor hands a worker subgraph only the latest request, asked again next turn."""
    MIDDLEWARE = "middleware"
    """``EffectMiddleware`` in ``create_agent`` (one task per call)."""
    SUBGRAPH = "subgraph"
    """Agent and tools as a subgraph of the graph the person talks to."""
    RETRY_POLICY = "retry_policy"
    """A sibling read fails; the node's ``RetryPolicy`` re-runs every call of the node."""
    FUNCTIONAL = "functional_api"
    """The graph is an ``@entrypoint`` + ``@task`` workflow calling ``run_effect`` /
    ``arun_effect``: a task per call, every call in one task, or in the entrypoint's body."""
    OUT_OF_BAND = "operator_decisions"
    """As ``review_rounds`` (approvals in half of them): while questions are pending an
    operator decides some at the console (``langgraph-effects approve/reject/resolve``),
    then the person answers in the UI anyway (``Scenario.console``). Drawn as a
    ``review_rounds`` variant."""
    MCP = "mcp_tools"
    """The tools are an in-process MCP server's (``testing.mcp_server``), declared with
    ``mcp_effects`` from its annotations (trusted, or not: every tool an effect); async."""


_FIRST_KINDS: tuple[Kind, ...] = (
    Kind.BASE,
    Kind.REVIEW_ROUNDS,
    Kind.APPROVAL,
    Kind.HISTORY,
    Kind.FORK,
    Kind.NO_TENANT,
    Kind.OTHER_TENANT,
    Kind.REISSUED,
    Kind.RESENT,
    Kind.MIDDLEWARE,
    Kind.SUBGRAPH,
    Kind.RETRY_POLICY,
)
"""The kinds drawn before the variants below existed: each seed still draws among these
first, so its schedule is the one it always was."""
_VARIANTS = {
    Kind.BASE: Kind.KEY_ROTATION,
    Kind.RESENT: Kind.REUSED_IDS,
    Kind.NO_TENANT: Kind.FUNCTIONAL,
    Kind.OTHER_TENANT: Kind.MCP,
    # Issue 22's identity draws (testing.draws).
    Kind.REISSUED: Kind.SUMMARIZED,
    Kind.FORK: Kind.HAND_MADE,
    Kind.HISTORY: Kind.NO_CHECKPOINTER,
    Kind.APPROVAL: Kind.COLLIDING,
    Kind.RETRY_POLICY: Kind.PARALLEL,
    Kind.SUBGRAPH: Kind.SUB_AGENT,
    # Issue 23: an operator deciding at the console while a question is pending.
    Kind.REVIEW_ROUNDS: Kind.OUT_OF_BAND,
}
"""Half the schedules of a kind become its variant, by a random stream of their own."""
DRAWN: tuple[Kind, ...] = (*_FIRST_KINDS, *_VARIANTS.values())
"""The kinds a schedule draws by default: every kind (``--kinds`` narrows them). A kind
the library does not pass yet stays out of it, named here, and is drawn only when asked
for (``python -m langgraph_effects.testing.campaign --kinds ...``): none today."""

_POINTS = tuple(CrashPoint)
_TOOL_RETRY: tuple[ToolRetryOrder, ...] = ("none", "before", "after")
_FAULTS = (
    None,
    None,
    Fault.LOSE_RESPONSE,
    Fault.LOSE_RESPONSE,
    Fault.LOSE_REQUEST,
    Fault.TRANSIENT,
    Fault.REJECT,
    Fault.LATE,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """One seeded random scenario over the built-in providers (see :meth:`generate`).

    Everything derives from ``seed``: ``Schedule.generate(seed)`` is the same
    schedule on every machine, so a failing one replays from its seed alone.
    """

    seed: int
    calls: tuple[ProviderKind, ...]
    faults: tuple[Fault | None, ...]
    """One scripted fault per call, aimed at its provider's next effect call."""
    transient_retry_after: float
    crash_at: CrashPoint | None
    crash_hit: int
    search_delay: bool
    """The mail search lags an hour: the reconciler sees nothing for a while."""
    late_lands: bool
    """Advance the clock past a LATE request's delay before resuming."""
    expire_keys: bool
    """Advance the clock past the key retention before resuming."""
    revoke: Revocation
    resumers: int
    asynchronous: bool
    policy: PolicyName
    kind: Kind = Kind.BASE
    refaults: tuple[Fault | None, ...] = ()
    """Scripted after ``faults``: what each resend meets (a retried call can be lost again)."""
    key_window_zero: bool = False
    """The keyed tools declare no key window: their unknowns go to a person, not to a retry."""
    approval: bool = False
    """The effects require approval before their first dispatch."""
    twins: bool = False
    """The first call is proposed twice in one AIMessage (same arguments, two intents)."""
    flakes: int = 0
    by_position: float = 0.0
    bad_answers: float = 0.0
    tool_retry: ToolRetryOrder = "none"
    """``middleware`` kind: where ``ToolRetryMiddleware`` sits (``Scenario.tool_retry``)."""
    layout: Layout = "tasks"
    """``functional_api`` kind: where the workflow runs the calls (``Scenario.layout``)."""
    trusted: bool = True
    """``mcp_tools`` kind: whether ``mcp_effects`` believes the server's annotations."""
    repeat: bool = False
    """After the thread ends the person asks for the same again (a new turn, new ids)."""
    variant: Variant = "send"
    """``parallel_branches`` and ``sub_agent`` kinds: the graph's variant (``draws.VARIANTS``)."""
    summary: bool = False
    """``summarized_thread`` kind: every message replaced by a summary, not only the
    answered exchange removed."""
    slow_sibling: bool = False
    """A fan-out's last call is slow: the process dies while it is in its provider call,
    after its siblings answered (``receipts.SlowSibling``), instead of at ``crash_at``."""
    slow_acted: bool = False
    """``slow_sibling``: the provider acted before the death (else it heard nothing yet)."""
    dropped_receipt: Literal["none", "before", "after"] = "none"
    """The ledger's first receipt commit fails as a dropped connection does, rolled back
    (``before``) or committed with its answer lost (``after``): tried again
    (``receipts.DroppingConnection``, on the campaign's SQLite connection)."""

    @classmethod
    def generate(cls, seed: int, kinds: Sequence[Kind] | None = None) -> Schedule:
        """The schedule of ``seed`` (a seeded ``random.Random``; no global state), its
        kind drawn from ``kinds`` (default ``DRAWN``)."""
        schedule = cls._generate(seed, kinds)
        # Issue 23's receipt draws, from a stream of their own.
        drawn = random.Random(f"receipts-{seed}")
        slow, acted, drop, after = (drawn.random() for _ in range(4))
        fanout = schedule.kind not in _NO_FANOUT and len(schedule.calls) + schedule.twins > 1
        return schedule.with_(
            slow_sibling=fanout and slow < _SLOW_SIBLINGS,
            slow_acted=acted < 0.5,
            dropped_receipt="none" if drop >= _DROPPED else "after" if after < 0.5 else "before",
        )

    @classmethod
    def _generate(cls, seed: int, kinds: Sequence[Kind] | None) -> Schedule:
        rng = random.Random(seed)
        calls = tuple(rng.choice(list(ProviderKind)) for _ in range(rng.choice((1, 1, 2, 3))))
        base = cls._draw(rng, seed, calls)
        kind: Kind
        if kinds is None:
            kind = rng.choice(_FIRST_KINDS)
            if kind in _VARIANTS and random.Random(f"variant-{seed}").random() < 0.5:
                kind = _VARIANTS[kind]
        else:
            kind = rng.choice(list(kinds))
        if kind is Kind.BASE:
            return base.with_(repeat=random.Random(f"repeat-{seed}").random() < _REPEATS)
        faults = base.faults
        if kind in (Kind.REVIEW_ROUNDS, Kind.OUT_OF_BAND):
            lost = (Fault.LOSE_RESPONSE, Fault.LOSE_REQUEST, Fault.LOSE_RESPONSE, Fault.LATE)
            faults = tuple(rng.choice(lost) for _ in calls)
        operator_answers = (
            kind in (Kind.REVIEW_ROUNDS, Kind.OUT_OF_BAND, Kind.APPROVAL, Kind.COLLIDING)
            or rng.random() < 0.6
        )
        # The kinds drawn later draw what is theirs from streams of their own.
        faces = random.Random(f"faces-{seed}")
        drawn = random.Random(f"identity-{seed}")
        if kind is Kind.COLLIDING:  # two calls of one tool: an edit can collide
            calls = (calls[0], *calls)[:3]
            base = base.with_(calls=calls, faults=(base.faults[0], *base.faults)[:3])
            faults = base.faults
        if kind is Kind.NO_CHECKPOINTER:  # nobody can be asked: no unknown is drawn
            faults = tuple(f if f in _STATELESS_FAULTS else None for f in faults)
        schedule = base.with_(
            kind=kind,
            faults=faults,
            refaults=tuple(rng.choice(_FAULTS) for _ in calls),
            key_window_zero=rng.random()
            < (0.7 if kind in (Kind.REVIEW_ROUNDS, Kind.OUT_OF_BAND) else 0.25),
            approval=kind in (Kind.APPROVAL, Kind.COLLIDING)
            or (
                kind is Kind.OUT_OF_BAND
                and random.Random(f"console-approval-{seed}").random() < 0.5
            )
            or (kind in (Kind.MIDDLEWARE, Kind.SUBGRAPH) and rng.random() < 0.3)
            or (kind in (Kind.FUNCTIONAL, Kind.MCP) and faces.random() < 0.3)
            or (kind in _SHAPES and kind is not Kind.NO_CHECKPOINTER and drawn.random() < 0.3),
            twins=(
                kind in (Kind.REISSUED, Kind.RESENT, Kind.REUSED_IDS, Kind.SUMMARIZED)
                and calls[0] is not ProviderKind.TICKETING
                and rng.random() < 0.4
            )
            or (
                kind in (Kind.FUNCTIONAL, Kind.MCP)
                and calls[0] is not ProviderKind.TICKETING
                and faces.random() < 0.4
            )
            or (
                kind in (Kind.HAND_MADE, Kind.SUB_AGENT)
                and calls[0] is not ProviderKind.TICKETING
                and drawn.random() < 0.4
            ),
            layout=faces.choice(LAYOUTS) if kind is Kind.FUNCTIONAL else "tasks",
            trusted=faces.random() < 0.75 if kind is Kind.MCP else True,
            # langchain-mcp-adapters' tools are async only.
            asynchronous=base.asynchronous or kind is Kind.MCP,
            flakes=rng.choice((1, 2)) if kind is Kind.RETRY_POLICY else 0,
            policy="operator" if operator_answers else base.policy,
            by_position=rng.choice((0.0, 0.5, 1.0)),
            bad_answers=rng.choice((0.0, 0.0, 0.3, 0.6)),
            # Its own stream: every other draw of every seed stays as it was.
            tool_retry=random.Random(f"tool-retry-{seed}").choice(_TOOL_RETRY)
            if kind is Kind.MIDDLEWARE
            else "none",
        )
        # Issue 22's draws (testing.draws), from a stream of their own.
        repeat = kind in (Kind.HAND_MADE, Kind.SUB_AGENT) or (
            kind in _REPEATABLE and random.Random(f"repeat-{seed}").random() < _REPEATS
        )
        if kind is Kind.NO_CHECKPOINTER:
            return schedule.with_(
                crash_at=None,  # a crash is the client's retry: a new request by design
                refaults=tuple(f if f in _STATELESS_FAULTS else None for f in schedule.refaults),
                flakes=drawn.choice((1, 2)),
                approval=False,
                twins=False,
            )
        shape = _SHAPES.get(kind, "agent")
        return schedule.with_(
            repeat=repeat,
            summary=kind is Kind.SUMMARIZED and drawn.random() < 0.5,
            variant=drawn.choice(VARIANTS[shape]) if shape in VARIANTS else "send",
        )

    @classmethod
    def _draw(cls, rng: random.Random, seed: int, calls: tuple[ProviderKind, ...]) -> Schedule:
        return cls(
            seed=seed,
            calls=calls,
            faults=tuple(rng.choice(_FAULTS) for _ in calls),
            transient_retry_after=rng.choice((0.0, 0.0, 5.0)),
            crash_at=rng.choice((None, *_POINTS, *_POINTS)),
            crash_hit=rng.choice((1, 1, 1, 2)),
            search_delay=rng.random() < 0.3,
            late_lands=rng.random() < 0.5,
            expire_keys=rng.random() < 0.15,
            revoke=rng.choice(("none",) * 6 + ("provider", "hook")),
            resumers=rng.choice((1, 1, 1, 2, 3)),
            asynchronous=rng.random() < 0.25,
            policy=rng.choice(("confirm_if_seen", "retry_when_safe", "retry_when_safe", "defer")),
        )

    def control_crash(self) -> CrashPoint | None:
        """Where the crash lands in a control's tool (before or after the provider call)."""
        if self.crash_at in (
            CrashPoint.BEFORE_PREPARE,
            CrashPoint.AFTER_PREPARE,
            CrashPoint.AFTER_CLAIM,
        ):
            return CrashPoint.AFTER_CLAIM
        if self.crash_at in (CrashPoint.AFTER_PROVIDER, CrashPoint.AFTER_RECEIPT):
            return CrashPoint.AFTER_PROVIDER
        return None  # reconciliation and review do not exist without a ledger

    def scenario(self, providers: Providers, *, control: bool = False) -> Scenario:
        """The :class:`Scenario` of this schedule over ``providers`` (fresh ones per run)."""
        tag = f"s{self.seed}"
        dying = self.slow_sibling and not control
        # The slow call comes to its provider last: it meets the last call's fault, none.
        faults = (*self.faults[:-1], None) if dying else self.faults
        scripted = [*zip(self.calls, faults, strict=True)]
        scripted += zip(self.calls, self.refaults, strict=False)
        for kind in ProviderKind:
            script = [f for k, f in scripted if k is kind]
            for fault in script:
                providers[kind].faults.push(
                    Fault.NONE if fault is None else fault,
                    retry_after=self.transient_retry_after,
                    delay=timedelta(minutes=10),
                )

        def between() -> None:
            if self.late_lands:
                providers.clock.advance(timedelta(minutes=11))
            if self.expire_keys:
                providers.clock.advance(RETENTION + timedelta(hours=1))
            if self.revoke == "provider":
                for provider in providers.all:
                    provider.revoke_authorization()
            elif self.revoke == "hook":
                providers.authorized = False

        calls = [builtin_call(k, n, tag=tag) for n, k in enumerate(self.calls)]
        if self.twins:
            calls.insert(1, {**calls[0], "id": f"{calls[0]['id']}-twin"})
        if self.kind is Kind.HAND_MADE:
            calls = index_ids(calls)
        careful = confirm_if_seen(providers.shows)
        policy: ReviewPolicy = {
            "confirm_if_seen": careful,
            "retry_when_safe": retry_when_safe(careful),
            "defer": defer,
            "operator": operator(
                providers,
                random.Random(f"operator-{self.seed}"),
                collide=calls if self.kind is Kind.COLLIDING else (),
                # tools_a runs the AIMessage's calls in one task (draws.build_shape)
                one_task=self.kind is Kind.PARALLEL and self.variant != "send",
            ),
        }[self.policy]
        at_console = (
            console(providers, random.Random(f"console-{self.seed}"))
            if self.kind is Kind.OUT_OF_BAND
            else None
        )
        if self.kind is Kind.MCP:  # and a read of the server's, which stays a plain tool
            lookup = {"case_id": f"case-{tag}-0"}
            calls.append({"name": "lookup_case", "args": lookup, "id": f"call-{tag}-lookup"})
        rotated = self.kind is Kind.KEY_ROTATION and not control

        def tools_of(keys: Sequence[str] | None) -> list[Any]:
            if self.kind is Kind.MCP:
                return self._mcp_tools(providers, control=control)
            if control:
                return list(control_tools(providers))
            return list(
                effect_tools(
                    providers,
                    authorize=self.revoke == "hook",
                    key_window=timedelta(0) if self.key_window_zero else RETENTION,
                    require_approval=self.approval,
                    payload_key=keys,
                    pause=None if slow is None else slow.pause,
                )
            )

        slow = (
            SlowSibling(str(calls[-1]["id"]), [str(c["id"]) for c in calls], acted=self.slow_acted)
            if dying
            else None
        )
        tools = tools_of([_OLD_KEY] if rotated else None)
        story = self.kind
        return Scenario(
            tools=tools,
            tools_after=tools_of([_NEW_KEY, _OLD_KEY]) if rotated else None,
            tool_calls=calls,
            providers=providers.all,
            clock=providers.clock,
            # The slow sibling's death is the schedule's crash.
            crash_at=self.control_crash() if control else None if slow else self.crash_at,
            slow_sibling=slow,
            receipts_due=None if slow is None else lambda: slow.due,
            crash_hit=self.crash_hit,
            resumers=self.resumers,
            policy=policy,
            console=at_console,
            between=between,
            applied=providers.applied,
            control=control,
            # MCP tools are async only: their control runs async too.
            asynchronous=self.asynchronous and (not control or story is Kind.MCP),
            thread_id=tag,
            # Short in real time: a resumer meeting a lease left by a cancelled
            # sibling waits at most this long before it reports LeaseHeld.
            lease_for=timedelta(seconds=0.5),
            name=f"schedule {self.seed} ({story.value}"
            + (f", ToolRetryMiddleware {self.tool_retry}" if self.tool_retry != "none" else "")
            + (f", {self.layout}" if story is Kind.FUNCTIONAL else "")
            + ("" if self.trusted else ", untrusted server")
            + ")",
            # A stateless service names no thread: its tenant goes to the node.
            tenant_from_config=story not in (Kind.BASE, Kind.NO_CHECKPOINTER),
            resume_tenant=_RESUME_TENANT.get(story, "same"),
            travel=_TRAVEL.get(story, "none"),
            reissue=_REISSUE.get(story, "none"),
            reused_ids=story is Kind.REUSED_IDS,
            summarize=story is Kind.SUMMARIZED,
            summary=self.summary,
            shape=_SHAPES.get(story, "agent"),
            variant=self.variant,
            repeat=self.repeat,
            requests=2 if story is Kind.NO_CHECKPOINTER else 1,
            collide=story is Kind.COLLIDING,
            interrupt_on_unknown=story is not Kind.NO_CHECKPOINTER,
            face=_FACES.get(story, "node"),
            layout=self.layout,
            tool_retry=self.tool_retry,
            subgraph=story is Kind.SUBGRAPH,
            flakes=self.flakes,
            by_position=self.by_position,
            bad_answers=self.bad_answers,
            seed=self.seed,
            # A deliberate repeat is a second effect of the same payload: counted by target.
            count_by_target=story is not Kind.BASE or self.repeat,
            max_rounds=12 if story is not Kind.BASE else 8,
        )

    def with_(self, **changes: Any) -> Schedule:
        """A copy with some fields changed (to pin a dimension in a test)."""
        return replace(self, **changes)

    def _mcp_tools(self, providers: Providers, *, control: bool) -> list[BaseTool]:
        """The in-process MCP server's tools: plain for a control, else through ``mcp_effects``."""
        from langgraph_effects.mcp import mcp_effects

        served = mcp_tools(providers, control=control)
        if control:
            return served
        asked = [t.name for t in served if t.name not in READ_ONLY] if self.approval else []
        return mcp_effects(
            served,
            trusted=self.trusted,
            server=SERVER,
            target={"close_case": "case_id", "send_mail": "to", "create_ticket": "title"},
            require_approval=asked,
        )


_NO_FANOUT = frozenset(
    {Kind.MIDDLEWARE, Kind.FUNCTIONAL, Kind.MCP, Kind.SUB_AGENT, Kind.NO_CHECKPOINTER}
)
"""The kinds whose calls do not fan out from an ``EffectToolNode`` of the built-in tools."""
_SLOW_SIBLINGS = 0.3
"""Of the schedules that fan out: a slow sibling killed mid fan-out."""
_DROPPED = 0.15
"""Of all schedules: the first receipt commit drops its connection."""

_OLD_KEY, _NEW_KEY = "campaign-key-old-" + "5a" * 8, "campaign-key-new-" + "c3" * 8
"""The ``payload_key`` a ``key_rotation`` schedule starts with, and the one it rotates to."""

_SHAPES: dict[Kind, Shape] = {
    Kind.PARALLEL: "parallel",
    Kind.HAND_MADE: "fanout",
    Kind.SUB_AGENT: "sub_agent",
    Kind.NO_CHECKPOINTER: "stateless",
}
_REPEATABLE = frozenset(
    {
        Kind.HISTORY,
        Kind.FORK,
        Kind.KEY_ROTATION,
        Kind.FUNCTIONAL,
        Kind.REVIEW_ROUNDS,
        Kind.OUT_OF_BAND,
        Kind.APPROVAL,
        Kind.COLLIDING,
        Kind.NO_TENANT,
        Kind.OTHER_TENANT,
        Kind.MIDDLEWARE,
        Kind.SUBGRAPH,
        Kind.RETRY_POLICY,
        Kind.PARALLEL,
        Kind.MCP,
    }
)
"""The kinds whose person asks for the same again, in a third of their schedules (and
``base``, from the same stream): after a replay or a fork, a repeat asked once the first
answer was delivered acts again, and a replay from before it sends nothing again; under
a rotated ``payload_key`` the repeat is told apart by keyed digests alone."""
_REPEATS = 0.3
_STATELESS_FAULTS = (Fault.TRANSIENT, Fault.REJECT)
"""What a ``no_checkpointer`` schedule's providers may answer besides success."""
_TRAVEL: dict[Kind, Literal["history", "fork"]] = {Kind.HISTORY: "history", Kind.FORK: "fork"}
_FACES: dict[Kind, Literal["middleware", "functional"]] = {
    Kind.MIDDLEWARE: "middleware",
    Kind.FUNCTIONAL: "functional",
}
_REISSUE: dict[Kind, Literal["lost", "resend"]] = {
    Kind.REISSUED: "lost",
    Kind.RESENT: "resend",
    Kind.REUSED_IDS: "resend",
    Kind.SUMMARIZED: "resend",
}
_RESUME_TENANT: dict[Kind, Literal["absent", "other"]] = {
    Kind.NO_TENANT: "absent",
    Kind.OTHER_TENANT: "other",
}
