"""``Scenario``: one scenario's settings, as a schedule draws them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from langchain_core.tools import BaseTool

from langgraph_effects.core.model import (
    Decision,
    Operation,
)
from langgraph_effects.ledger.base import DEFAULT_LEASE
from langgraph_effects.testing.draws import (
    Shape,
    Variant,
)
from langgraph_effects.testing.faults import (
    CrashPoint,
)
from langgraph_effects.testing.providers import (
    FakeClock,
    FakeProvider,
)
from langgraph_effects.testing.scenario.graph import ToolRetryOrder
from langgraph_effects.testing.scenario.policies import defer
from langgraph_effects.testing.scenario.receipts import SlowSibling
from langgraph_effects.testing.scenario.tools import ReviewPolicy
from langgraph_effects.testing.workflows import Layout

# --------------------------------------------------------------------------- the scenario


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One thread's story: what the model proposes, where it crashes, who resumes, who answers.

    Args:
        tools: effect tools (or, with ``control``, plain tools) as given to the node.
        tool_calls: the tool calls the scripted model proposes in one AIMessage
            (``{"name", "args", "id"}``; fixed ids).
        providers: the fake providers the tools call: effects and duplicates are counted there.
        clock: the ``FakeClock`` shared by providers, ledger and node; advanced past
            the lease after each in-process crash.
        crash_at: arm this point (``RAISE``) for the whole scenario; it fires once.
        crash_hit: crash on the ``hit``-th reach of the point.
        resumers: how many resumers pick the thread up at once after the first run.
        policy: answers review and approval interrupts; None answers leave them pending.
        between: called after the first run, before the resumers (revoke, expire keys...).
        applied: ground truth, effects the provider applied for an operation
            (None: unknown to the harness); enables the provider-side mislabel checks.
        control: run the tools in a plain ``ToolNode`` (no ledger).
        asynchronous: drive the graph with ``ainvoke`` (the ledger may be async).
        thread_id: the LangGraph thread (and the operations' tenant).
        lease_for: the node's lease.
        interrupt_on_unknown: as for ``EffectToolNode``.
        max_rounds: resume/answer rounds after the first run before giving up.
        name: a label for the report.
        tenant_from_config: pass the tenant in ``config["configurable"]["tenant_id"]``
            (as most applications do) instead of to the node.
        resume_tenant: how the resumes after the first run name the tenant:
            ``same``; ``absent`` (no ``tenant_id``: the thread's bound tenant must
            be used); ``other`` (one resume under another tenant first: it must be
            refused, nothing dispatched).
        travel: after the thread ends, re-run it from a random history snapshot's
            own config (``history``, no tenant in it) or from an ``update_state``
            fork of one (``fork``), then answer again.
        reissue: after the first run, the model re-issues the calls with new
            tool-call ids: ``lost`` (the checkpoint holding its AIMessage was lost:
            the thread goes on from the checkpoint before the model ran) or
            ``resend`` (the person sends the request again in a new turn; see
            ``reused_ids`` and ``summarize``).
        face: ``node`` (``EffectToolNode`` in a hand-built graph),
            ``middleware`` (``EffectMiddleware`` in ``create_agent``) or ``functional``
            (an ``@entrypoint`` + ``@task`` workflow calling ``run_effect``, laid out as
            ``layout``).
        tool_retry: ``middleware`` face: ``ToolRetryMiddleware`` listed ``before``
            ``EffectMiddleware`` (a retry re-runs the decision) or ``after`` it (a retry
            would re-enter the tool inside its dispatch: refused with
            ``MiddlewareOrderError`` before the provider acts again, and the run resumed).
        subgraph: run agent and tools as a subgraph (``node`` face).
        flakes: a read-only sibling call fails that many times; a node
            ``RetryPolicy`` re-runs the whole node (``node`` face).
        by_position: chance that an answer to a lone interrupt is given by
            position (``Command(resume=value)``) rather than by interrupt id.
        bad_answers: chance that a round starts with a bad answer (it must be
            refused and the request stay answerable).
        seed: seeds the story's own choices (position or id, bad answers).
        count_by_target: count duplicates per target against the intended
            effects (two identical calls, a call repeated on purpose and an edit
            are intended), instead of the providers' per-payload count.
    """

    tools: Sequence[BaseTool]
    tool_calls: Sequence[Mapping[str, Any]]
    providers: Sequence[FakeProvider]
    clock: FakeClock | None = None
    crash_at: CrashPoint | None = None
    crash_hit: int = 1
    resumers: int = 1
    policy: ReviewPolicy = defer
    between: Callable[[], None] | None = None
    applied: Callable[[Operation], int | None] | None = None
    control: bool = False
    asynchronous: bool = False
    thread_id: str = "scenario"
    lease_for: timedelta = DEFAULT_LEASE
    interrupt_on_unknown: bool = True
    max_rounds: int = 8
    fresh: bool = True
    """Start the thread; False: it was started elsewhere (a killed process), only resume it."""
    name: str = "scenario"
    tenant_from_config: bool = False
    resume_tenant: Literal["same", "absent", "other"] = "same"
    travel: Literal["none", "history", "fork"] = "none"
    reissue: Literal["none", "lost", "resend"] = "none"
    tools_after: Sequence[BaseTool] | None = None
    """The tools every run after the first uses: the deployment restarted with other
    settings (a rotated ``payload_key``, listed after the new one)."""
    reused_ids: bool = False
    """A re-sent request's calls keep the first proposal's tool-call ids (``call_0``
    every turn), instead of new ones."""
    summarize: bool = False
    """The thread first runs to its end; then its answered exchange is removed from the
    messages (``RemoveMessage``, as summarization and the delete-messages recipe do)
    before the request is sent again."""
    summary: bool = False
    """With ``summarize``: every message is replaced by one summary (``RemoveMessage`` of
    all, as ``SummarizationMiddleware`` does), not only the answered exchange removed."""
    shape: Shape = "agent"
    """``node`` face: the graph the calls run in (``testing.draws``): ``agent`` (agent ->
    tools -> agent), ``parallel``, ``fanout``, ``sub_agent`` or ``stateless``."""
    variant: Variant = "send"
    """The shape's variant (``draws.VARIANTS``)."""
    repeat: bool = False
    """After the thread ends, the person asks for the same again (new tool-call ids, but
    index ids for ``fanout`` and the worker's own for ``sub_agent``)."""
    requests: int = 1
    """``stateless`` shape: how many times the same request is sent, each its own invoke."""
    collide: bool = False
    """The reviewer's edits give a call the arguments of another call of its tool (a
    sibling, or one a repeated turn's earlier answer carried out)."""
    console: Callable[[dict[str, Any]], Decision | None] | None = None
    """An operator at the console (``policies.console``): before the person in the UI
    answers the pending questions, it may decide one of them (None: it does not), as
    ``langgraph-effects approve/reject/resolve`` do; the person answers the question
    still shown anyway. Their word is the last before dispatch: it wins over the
    operator's approval; a decision the operator made final stands, and is not redone."""
    face: Literal["node", "middleware", "functional"] = "node"
    layout: Layout = "tasks"
    """``functional`` face: where the workflow runs the calls (``testing.workflows``)."""
    tool_retry: ToolRetryOrder = "none"
    subgraph: bool = False
    flakes: int = 0
    by_position: float = 0.0
    bad_answers: float = 0.0
    seed: int = 0
    count_by_target: bool = False
    slow_sibling: SlowSibling | None = None
    """``node`` face: one call of the fan-out is slow and the process dies while it is in
    its provider call, once its siblings came back (``receipts.SlowSibling``: give its
    ``pause`` to the tools; the node gets its ``wrap_tool_call`` hooks)."""
    receipts_due: Callable[[], Mapping[str, int]] | None = None
    """The operation ids and tool-call ids whose receipt came back before a crash or a
    failed commit (``receipts``), each with the fencing token it came under: it must be
    recorded from it, never taken over past that token by a later run (counted as a lost
    receipt)."""
