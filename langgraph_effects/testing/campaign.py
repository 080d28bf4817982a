"""The recovery campaign: prove zero duplicate effects, no lost receipt, honest unknowns.

Run it: ``python -m langgraph_effects.testing.campaign`` (``--help`` for flags).
Five parts, each a row group of the printed table:

* **randomized**: ``--schedules`` seeded :class:`~.scenario.Schedule`\\ s, run
  in-process with ``InjectedCrash`` on a SQLite ``:memory:`` ledger and an
  in-memory checkpointer. Each draws crash points, lost responses and
  requests, late answers, lagging search, key expiry, revoked authorizations,
  concurrent resumers, sync or async, and one scenario :class:`~.scenario.Kind`:
  reviews over several rounds, ``require_approval`` (approve, reject, edit),
  time travel from a history snapshot's own config, ``update_state`` forks,
  resumes without a tenant or under another, calls re-issued with new ids
  under the default durability (the AIMessage lost, or the request sent
  again), ``EffectMiddleware`` in ``create_agent`` (with LangChain's
  ``ToolRetryMiddleware`` absent, listed before it or after it), subgraphs, a node
  ``RetryPolicy``, a Functional API workflow (``run_effect`` in tasks or the
  entrypoint's body), an in-process MCP server's tools through ``mcp_effects``, and
  issue 22's identity paths (``testing.draws``: summarized threads, hand-made ``Send``
  fan-outs, no checkpointer, colliding edits, parallel branches, sub-agents, a worker
  agent run inside a tool), with a deliberate repeat of the request in a third of the
  other kinds' schedules (base, replays, forks, key rotations and workflows included),
  and an operator deciding pending questions at the console before the person answers
  them in the UI (``operator_decisions``, half of the ``review_rounds`` schedules).
  Beside the kinds, issue 23's receipt draws (``scenario.receipts``): in a third of the
  schedules that fan out, the last call is slow and the process dies while it is in its
  provider call, once its siblings answered; in some 15% of all, the first receipt
  commit on the SQLite connection fails as a dropped connection does. Each receipt that
  came back before is counted lost if a later run takes its operation over.
  People answer by position or by interrupt id, sometimes with a bad answer first.
  Schedule ``i`` has seed ``--seed + i``: a failing one prints its seed and
  replays alone with ``--seed SEED --schedules 1``.
  The table below the main one breaks the schedules down per kind.
* **control**: the same schedules through a plain ``ToolNode`` (no ledger, the
  stock ``tools_condition``, or ``create_agent`` without the middleware): its
  duplicates, per kind, show what the figures mean.
* **kills**: every crash point x provider kind x backend (SQLite file,
  PostgreSQL) x sync/async, killed for real (``os._exit``) in a forked child
  and resumed in another fresh process (children fork from a server that
  preloaded LangGraph, so each costs milliseconds, not seconds).
* **stale**: a live worker loses its footing mid-call: frozen with SIGSTOP
  past its lease while another process recovers the operation, then thawed;
  or (PostgreSQL) its ledger connections terminated while the clock runs on
  (see :class:`StaleCase`).
* **concurrency**: ``--processes`` (8) processes resume the same 100 crashed
  threads against PostgreSQL at once: exactly one effect per intent.

Counted at the fake providers: **duplicates** (effects beyond the intended
ones), **lost receipts** (an applied effect the ledger does not own up to, or
that the model was told was not carried out), **lost answers** (a person's
answer consumed silently: the same question asked again, unexplained),
**refused answers** (a valid answer to the question still asked, refused in words),
**lost effects** (an intended effect that never acted: the model told it was
done more often than the provider applied it, or the thread ended with a call
never answered),
**mislabelled** operations and
**violations** (a bad answer accepted, a valid one refused, another tenant's
resume not refused...; see :class:`~.scenario.ScenarioReport`).

Exit status: 0 when the node shows none of those (and the control does show
duplicates); 1 otherwise; 2 on bad arguments or an unreachable PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import logging
import os
import random
import signal
import sqlite3
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.types import Command

from langgraph_effects.core.model import Operation, OperationStatus, utcnow
from langgraph_effects.core.plan import receipt_conflict
from langgraph_effects.decide import DurabilityWarning
from langgraph_effects.decide.identity import NoCheckpointerWarning
from langgraph_effects.ledger.base import DEFAULT_LEASE
from langgraph_effects.testing._progress import Advance, Progress
from langgraph_effects.testing.assertions import mislabelled_operations
from langgraph_effects.testing.faults import CrashPlan, CrashPoint, InjectedCrash, scaled
from langgraph_effects.testing.providers import Fault
from langgraph_effects.testing.scenario import (
    ForkedChild,
    Kind,
    ProviderKind,
    Providers,
    Scenario,
    ScenarioReport,
    Schedule,
    arun_scenario,
    build_graph,
    builtin_call,
    confirm_if_seen,
    effect_tools,
    run_in_forked_child,
    run_scenario,
    start_forked_child,
)
from langgraph_effects.testing.scenario.receipts import DroppingConnection

__all__ = [
    "PROBLEM_KINDS",
    "CampaignResult",
    "KillCase",
    "StaleCase",
    "concurrency",
    "kill_cases",
    "kill_matrix",
    "main",
    "problem_kinds",
    "randomized",
    "randomized_by_kind",
    "replay_line",
    "run_campaign",
    "run_schedule",
    "stale_cases",
    "stale_matrix",
]

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
PARTS = ("randomized", "control", "kills", "stale", "concurrency")
_MAX_PROBLEMS = 20  # per batch: enough to act on, not a wall of text
_MODULE = "langgraph_effects.testing.campaign"  # __name__ is __mp_main__ in a worker


# --------------------------------------------------------------------------- randomized


def run_schedule(
    seed: int, *, control: bool = False, kinds: Sequence[Kind] | None = None
) -> ScenarioReport:
    """Run the schedule of ``seed`` (its kind drawn from ``kinds``, default ``DRAWN``)
    in-process on a fresh SQLite ``:memory:`` ledger."""
    from langgraph_effects.ledger.sqlite import AsyncSQLiteLedger, SQLiteLedger

    schedule = Schedule.generate(seed, kinds)
    providers = Providers.open(None)
    scenario = schedule.scenario(providers, control=control)
    if schedule.dropped_receipt == "none" or control:
        conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    else:
        # The driver's connection drops the first receipt commit (scenario.receipts).
        dropping = sqlite3.connect(
            ":memory:", check_same_thread=False, isolation_level=None, factory=DroppingConnection
        )
        dropping.drops, dropping.after = 1, schedule.dropped_receipt == "after"
        slow = scenario.receipts_due
        scenario = replace(
            scenario,
            receipts_due=lambda: {**({} if slow is None else slow()), **dropping.dropped},
        )
        conn = dropping
    try:
        if scenario.asynchronous:
            aledger = AsyncSQLiteLedger(conn, clock=providers.clock.now)
            asyncio.run(aledger.setup())
            return run_scenario(scenario, ledger=aledger)
        ledger = SQLiteLedger(conn, clock=providers.clock.now)
        ledger.setup()
        return run_scenario(scenario, ledger=ledger)
    finally:
        conn.close()
        providers.close()


def randomized(
    seeds: Sequence[int], *, control: bool = False, kinds: Sequence[Kind] | None = None
) -> ScenarioReport:
    """Run the schedules of ``seeds`` and sum their reports (problems capped)."""
    total = ScenarioReport.empty("randomized (ToolNode control)" if control else "randomized")
    for report in randomized_by_kind(seeds, control=control, kinds=kinds).values():
        total = total + replace(report, problems=report.problems[:_MAX_PROBLEMS])
    return total


def randomized_by_kind(
    seeds: Sequence[int], *, control: bool = False, kinds: Sequence[Kind] | None = None
) -> dict[str, ScenarioReport]:
    """Run the schedules of ``seeds`` (kinds drawn from ``kinds``, default ``DRAWN``); one
    summed report per scenario kind (problems capped)."""
    _quiet_langgraph()
    by_kind: dict[str, ScenarioReport] = {}
    for seed in seeds:
        kind = Schedule.generate(seed, kinds).kind.value
        report = run_schedule(seed, control=control, kinds=kinds)
        if report.problems and not control:
            replay = replay_line(seed, report, kinds)
            report = replace(report, problems=(*report.problems, replay))
        total = by_kind.get(kind, ScenarioReport.empty(kind))
        if len(total.problems) >= _MAX_PROBLEMS:
            report = replace(report, problems=())
        by_kind[kind] = replace(total + report, scenario=kind)
    return by_kind


PROBLEM_KINDS = (
    "duplicates",
    "lost_receipts",
    "lost_answers",
    "refused_answers",
    "lost_effects",
    "mislabelled",
    "violations",
)
"""The counts of a report that are broken promises: each names a kind of problem."""


def problem_kinds(report: ScenarioReport) -> tuple[str, ...]:
    """The kinds of problem ``report`` counts (``PROBLEM_KINDS`` whose count is not 0), as a
    schedule's replay line names them: a check replays only the seeds of its own kind."""
    return tuple(kind for kind in PROBLEM_KINDS if getattr(report, kind))


def replay_line(seed: int, report: ScenarioReport, kinds: Sequence[Kind] | None = None) -> str:
    """How a schedule with problems is replayed, naming the kinds of problem it showed
    (``problem_kinds``): ``replay (lost_answers): python -m ... --seed N --schedules 1``."""
    named = ", ".join(problem_kinds(report))
    drawn = "" if kinds is None else f" --kinds {','.join(k.value for k in kinds)}"
    return (
        f"replay{f' ({named})' if named else ''}: "
        f"python -m {_MODULE} --seed {seed} --schedules 1{drawn}"
    )


def _merge(a: dict[str, ScenarioReport], b: dict[str, ScenarioReport]) -> dict[str, ScenarioReport]:
    return {
        k: replace(a.get(k, ScenarioReport.empty()) + b.get(k, ScenarioReport.empty()), scenario=k)
        for k in sorted(a.keys() | b.keys())
    }


Case = TypeVar("Case")


def _ignore(n: int = 1) -> None:
    """An ``advance`` that reports nothing."""


def _counted(
    run: Callable[[Case], ScenarioReport], advance: Advance
) -> Callable[[Case], ScenarioReport]:
    """``run``, then ``advance(1)``: a case that ended counts as done."""

    def counted(case: Case) -> ScenarioReport:
        try:
            return run(case)
        finally:
            advance(1)

    return counted


def _quiet_langgraph() -> None:
    # When an injected crash (a BaseException) aborts a step while a sibling task
    # interrupts, LangGraph's executor logs the sibling's GraphInterrupt from a
    # future callback. Expected here, and noise in the table.
    logging.getLogger("concurrent.futures").setLevel(logging.CRITICAL)
    # Schedules run LangGraph's default durability on purpose: the advice is noise
    # here, and where a host turns warnings into errors it must not fail a run.
    warnings.filterwarnings("ignore", category=DurabilityWarning)
    # The no_checkpointer kind runs without one on purpose (the warning is tested apart).
    warnings.filterwarnings("ignore", category=NoCheckpointerWarning)


# --------------------------------------------------------------------------- kills


@dataclass(frozen=True, slots=True, kw_only=True)
class KillCase:
    """One real-kill case: a crash point, a provider, a backend, a mode."""

    backend: str
    asynchronous: bool
    kind: ProviderKind
    point: CrashPoint
    ledger_url: str
    """A SQLite file path or a PostgreSQL URL."""
    checkpoint_url: str
    directory: str
    """Where this case's fake providers keep their files."""
    run: str

    @property
    def tag(self) -> str:
        """A short unique name for this case: run, backend, mode, provider and crash point."""
        mode = "async" if self.asynchronous else "sync"
        return f"k{self.run}-{self.backend}-{mode}-{self.kind.value}-{self.point.value}"

    @property
    def group(self) -> str:
        """The report row this case counts in: backend, mode and provider kind."""
        return f"kills {self.backend}/{'async' if self.asynchronous else 'sync'} {self.kind.value}"

    def providers(self) -> Providers:
        """The case's fake providers, opened on its directory (their counts survive kills)."""
        return Providers.open(Path(self.directory))

    def scenario(self, providers: Providers, *, fresh: bool) -> Scenario:
        """The scenario this case runs: one built-in call of its provider kind, killed at its point.

        AFTER_PREPARE exists only when the record is written unclaimed (an
        authorize hook); DURING_REVIEW_RESUME needs a review, which a keyed
        provider reaches when its declared key window is closed.
        """
        review = self.point in (CrashPoint.DURING_REVIEW_RESUME, CrashPoint.AFTER_ANSWER)
        tools = effect_tools(
            providers,
            authorize=self.point is CrashPoint.AFTER_PREPARE,
            key_window=timedelta(0) if review else timedelta(hours=24),
        )
        return Scenario(
            tools=tools,
            tool_calls=[builtin_call(self.kind, 0, tag=self.tag)],
            providers=providers.all,
            clock=providers.clock,
            policy=confirm_if_seen(providers.shows),
            applied=providers.applied,
            asynchronous=self.asynchronous,
            thread_id=self.tag,
            fresh=fresh,
            name=self.tag,
        )

    def script(self, providers: Providers) -> None:
        """Provider faults that make the crash point reachable."""
        if self.point is CrashPoint.DURING_RECONCILE:
            providers[self.kind].faults.push(Fault.LOSE_RESPONSE)
        elif self.point in (CrashPoint.DURING_REVIEW_RESUME, CrashPoint.AFTER_ANSWER):
            fault = (
                Fault.LOSE_RESPONSE if self.kind is ProviderKind.TICKETING else Fault.LOSE_REQUEST
            )
            providers[self.kind].faults.push(fault)


@contextlib.contextmanager
def _sync_stores(case: KillCase | StaleCase, clock: Any) -> Iterator[tuple[Any, Any]]:
    if case.backend == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        from langgraph_effects.ledger.postgres import PostgresLedger

        with (
            PostgresLedger.from_conn_string(case.ledger_url, clock=clock, max_size=4) as ledger,
            PostgresSaver.from_conn_string(case.checkpoint_url) as saver,
        ):
            yield ledger, saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    from langgraph_effects.ledger.sqlite import SQLiteLedger

    conn = sqlite3.connect(case.checkpoint_url, check_same_thread=False)
    try:
        with SQLiteLedger.from_conn_string(case.ledger_url, clock=clock) as ledger:
            yield ledger, SqliteSaver(conn)
    finally:
        conn.close()


@contextlib.asynccontextmanager
async def _async_stores(case: KillCase | StaleCase, clock: Any) -> Any:
    if case.backend == "postgres":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        from langgraph_effects.ledger.postgres import AsyncPostgresLedger

        async with (
            AsyncPostgresLedger.from_conn_string(case.ledger_url, clock=clock, max_size=4) as led,
            AsyncPostgresSaver.from_conn_string(case.checkpoint_url) as saver,
        ):
            yield led, saver
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from langgraph_effects.ledger.sqlite import AsyncSQLiteLedger

    async with (
        AsyncSQLiteLedger.from_conn_string(case.ledger_url, clock=clock) as led,
        AsyncSqliteSaver.from_conn_string(case.checkpoint_url) as saver,
    ):
        yield led, saver


def _kill_child(case: KillCase, fresh: bool) -> ScenarioReport:
    """In a fresh process: run (and, when armed, die) or resume one case; report."""
    _quiet_langgraph()
    providers = case.providers()
    scenario = case.scenario(providers, fresh=fresh)
    try:
        if case.asynchronous:

            async def go() -> ScenarioReport:
                async with _async_stores(case, providers.clock.now) as (ledger, saver):
                    return await arun_scenario(scenario, ledger=ledger, checkpointer=saver)

            return asyncio.run(go())
        with _sync_stores(case, providers.clock.now) as (ledger, saver):
            return run_scenario(scenario, ledger=ledger, checkpointer=saver)
    finally:
        providers.close()


def _setup_backend(backend: str, ledger_url: str, checkpoint_url: str) -> None:
    """Create the ledger's and the saver's tables once, before any child runs."""
    case = KillCase(
        backend=backend,
        asynchronous=False,
        kind=ProviderKind.CRM,
        point=CrashPoint.AFTER_CLAIM,
        ledger_url=ledger_url,
        checkpoint_url=checkpoint_url,
        directory="",
        run="",
    )
    with _sync_stores(case, utcnow) as (ledger, saver):
        ledger.setup()
        saver.setup()


def kill_cases(
    backends: Sequence[str], workdir: Path, *, postgres_url: str | None
) -> list[KillCase]:
    """Every crash point x provider kind x backend x mode (ticketing has nothing to reconcile)."""
    run = uuid.uuid4().hex[:6]
    workdir.mkdir(parents=True, exist_ok=True)
    cases = []
    for backend in backends:
        if backend == "postgres":
            if postgres_url is None:
                raise ValueError("the postgres backend needs --postgres-url")
            ledger_url = checkpoint_url = postgres_url
        else:
            ledger_url = str(workdir / "ledger.db")
            checkpoint_url = str(workdir / "checkpoints.db")
        _setup_backend(backend, ledger_url, checkpoint_url)
        for asynchronous in (False, True):
            for kind in ProviderKind:
                for point in CrashPoint:
                    if kind is ProviderKind.TICKETING and point is CrashPoint.DURING_RECONCILE:
                        continue
                    case = KillCase(
                        backend=backend,
                        asynchronous=asynchronous,
                        kind=kind,
                        point=point,
                        ledger_url=ledger_url,
                        checkpoint_url=checkpoint_url,
                        directory="",
                        run=run,
                    )
                    directory = workdir / case.tag
                    directory.mkdir(parents=True)
                    cases.append(replace(case, directory=str(directory)))
    return cases


def _one_kill(case: KillCase) -> ScenarioReport:
    providers = case.providers()
    try:
        case.script(providers)
    finally:
        providers.close()
    first = run_in_forked_child(_kill_child, case, True, crash_at=case.point, mode="exit")
    second = run_in_forked_child(_kill_child, case, False)
    if not first.crashed:
        problem = f"{case.tag}: the crash point was not reached ({first.error or 'no crash'})"
        return ScenarioReport(scenario=case.group, intents=1, errors=1, problems=(problem,))
    if not isinstance(second.value, ScenarioReport):
        problem = f"{case.tag}: the resume failed: {second.error or second.exitcode}"
        return ScenarioReport(scenario=case.group, intents=1, errors=1, problems=(problem,))
    return replace(second.value, scenario=case.group, crashes=second.value.crashes + 1)


def kill_matrix(
    cases: Sequence[KillCase], *, workers: int = 2, advance: Advance = _ignore
) -> dict[str, ScenarioReport]:
    """Run every case (killed child, then resumed child); sum the reports per group.
    ``advance(1)`` is called as each case ends."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        reports = list(pool.map(_counted(_one_kill, advance), cases))
    groups: dict[str, ScenarioReport] = {}
    for report in reports:
        groups[report.scenario] = groups.get(report.scenario, ScenarioReport.empty()) + report
    return groups


# --------------------------------------------------------------------------- stale workers


StaleFault = Literal["sigstop", "renewal"]
_RENEWAL_LEASE = timedelta(seconds=1.5)  # renewed every 0.5 s of real time


@dataclass(frozen=True, slots=True, kw_only=True)
class StaleCase:
    """A live worker that loses its footing in the middle of a provider call.

    ``sigstop``: the worker is frozen (SIGSTOP) ``before`` or ``after`` the
    provider call, past its lease; another process recovers the operation
    (reconcile, safe retry or review); then the worker is thawed (SIGCONT)
    and finishes its call: no duplicate, and its late receipt must leave a
    trace in the event log (never "not carried out" for an applied effect).
    ``renewal`` (PostgreSQL): the worker blocks before the provider call while
    its ledger connections are terminated; the clock runs on; its lease must
    still be renewed, so another process neither dispatches nor asks a person.
    """

    fault: StaleFault
    backend: str
    asynchronous: bool
    kind: ProviderKind
    stop: Literal["before", "after"]
    ledger_url: str
    checkpoint_url: str
    directory: str
    run: str

    @property
    def tag(self) -> str:
        """A short unique name for this case: run, fault, backend, mode, provider and stop."""
        mode = "async" if self.asynchronous else "sync"
        return f"w{self.run}-{self.fault}-{self.backend}-{mode}-{self.kind.value}-{self.stop}"

    @property
    def group(self) -> str:
        """The report row this case counts in: fault, backend and mode."""
        mode = "async" if self.asynchronous else "sync"
        return f"{self.fault} {self.backend}/{mode}"

    @property
    def app_name(self) -> str:
        """The PostgreSQL application_name of this case's connections (at most 63 characters)."""
        return f"lge-{self.tag}"[:63]

    def providers(self) -> Providers:
        """The case's fake providers, opened on its directory (their counts survive kills)."""
        return Providers.open(Path(self.directory))


def stale_cases(
    backends: Sequence[str], workdir: Path, *, postgres_url: str | None
) -> list[StaleCase]:
    """``sigstop``: every backend x {CRM, ticketing} x {before, after} (PostgreSQL also async);
    ``renewal``: PostgreSQL x {sync, async} x {CRM, ticketing}."""
    run = uuid.uuid4().hex[:6]
    cases: list[StaleCase] = []
    for backend in backends:
        if backend == "postgres":
            if postgres_url is None:
                raise ValueError("the postgres backend needs --postgres-url")
            ledger_url = checkpoint_url = postgres_url
            _setup_backend(backend, ledger_url, checkpoint_url)
        else:
            ledger_url = checkpoint_url = ""  # a file per case, below
        workdir.mkdir(parents=True, exist_ok=True)
        modes = (False, True) if backend == "postgres" else (False,)
        shapes: list[tuple[StaleFault, bool, str]] = [
            ("sigstop", a, stop) for a in modes for stop in ("before", "after")
        ]
        if backend == "postgres":
            shapes += [("renewal", a, "before") for a in modes]
        for fault, asynchronous, stop in shapes:
            for kind in (ProviderKind.CRM, ProviderKind.TICKETING):
                case = StaleCase(
                    fault=fault,
                    backend=backend,
                    asynchronous=asynchronous,
                    kind=kind,
                    stop=stop,  # type: ignore[arg-type]
                    ledger_url=ledger_url,
                    checkpoint_url=checkpoint_url,
                    directory="",
                    run=run,
                )
                directory = workdir / case.tag
                directory.mkdir(parents=True)
                if backend == "sqlite":
                    # A file per case: a frozen process may hold SQLite's one write lock.
                    ledger_url = str(directory / "ledger.db")
                    checkpoint_url = str(directory / "checkpoints.db")
                    _setup_backend(backend, ledger_url, checkpoint_url)
                case = replace(
                    case,
                    directory=str(directory),
                    ledger_url=ledger_url,
                    checkpoint_url=checkpoint_url,
                )
                cases.append(case)
    return cases


def _stale_child(case: StaleCase, role: str) -> dict[str, Any]:
    """In a fresh process: the ``worker`` (freezes or blocks in its call) or the ``recoverer``.

    Each invokes the graph itself (no scenario story: its clock moves would
    disturb the lease under test) and answers reviews as a careful operator.
    Returns the texts of the tool messages and the last error.
    """
    _quiet_langgraph()
    providers = case.providers()
    gate = Path(case.directory)

    def pause(action: str, where: str) -> None:
        # Wait at the gate; the parent freezes this process here (sigstop) or
        # cuts its connections. Idle at the gate, no other thread of ours is
        # inside a transaction of the fakes' files when the process freezes.
        if where != case.stop:
            return
        (gate / "inside").touch()
        while not (gate / "release").exists():
            time.sleep(0.01)

    worker = role == "worker"
    tools = effect_tools(providers, pause=pause if worker else None)
    lease = _RENEWAL_LEASE if case.fault == "renewal" else DEFAULT_LEASE
    graph_args: dict[str, Any] = {
        "node_kwargs": {"tenant_id": case.tag, "clock": providers.clock.now, "lease_for": lease}
    }
    calls = [builtin_call(case.kind, 0, tag=case.tag)]
    config = {"configurable": {"thread_id": case.tag}}
    policy = confirm_if_seen(providers.shows)
    first: Any = {"messages": [HumanMessage(content="go", id="human")]} if worker else None
    ledger_case = replace(case, ledger_url=_with_app_name(case.ledger_url, case.app_name))
    # A worker's connections carry the case's application_name: a renewal case terminates
    # its ledger connections; a sigstop case is frozen only while none of them (ledger or
    # saver) holds an open transaction (``_freeze``).
    stores = (
        ledger_case
        if worker and case.fault == "renewal"
        else replace(ledger_case, checkpoint_url=_with_app_name(case.checkpoint_url, case.app_name))
        if worker
        else case
    )
    error: str | None = None

    def answers(state: Any) -> Any:
        return Command(resume={i.id: policy(i.value) for i in state.interrupts})

    try:
        if case.asynchronous:

            async def go() -> Any:
                async with _async_stores(stores, providers.clock.now) as (ledger, saver):
                    graph = build_graph(
                        tools, calls, ledger=ledger, checkpointer=saver, **graph_args
                    )
                    step, err = first, None
                    for _ in range(4):
                        try:
                            await graph.ainvoke(step, config)
                        except Exception as exc:
                            err = f"{type(exc).__name__}: {exc}"
                            break
                        state = await graph.aget_state(config)
                        if worker or not state.interrupts:
                            break
                        step = answers(state)
                    return (await graph.aget_state(config)).values, err

            values, error = asyncio.run(go())
        else:
            with _sync_stores(stores, providers.clock.now) as (ledger, saver):
                graph = build_graph(tools, calls, ledger=ledger, checkpointer=saver, **graph_args)
                step = first
                for _ in range(4):
                    try:
                        graph.invoke(step, config)
                    except Exception as exc:
                        error = f"{type(exc).__name__}: {exc}"
                        break
                    state = graph.get_state(config)
                    if worker or not state.interrupts:
                        break
                    step = answers(state)
                values = graph.get_state(config).values
    finally:
        providers.close()
    texts = [str(m.content) for m in values.get("messages", []) if isinstance(m, ToolMessage)]
    return {"tool_messages": texts, "error": error}


def _with_app_name(url: str, name: str) -> str:
    if "://" not in url:
        return url  # a SQLite path
    return f"{url}{'&' if '?' in url else '?'}application_name={name}"


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("T")
    except (OSError, IndexError):
        return False


def _until(condition: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + scaled(timeout)
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _ledger_view(case: StaleCase, clock: Any) -> tuple[list[Operation], list[Any]]:
    with _sync_stores(case, clock) as (ledger, _saver):
        ops = ledger.list(tenant_id=case.tag, limit=10)
        events = [e for op in ops for e in ledger.events(case.tag, op.operation_id)]
    return ops, events


def _one_stale(case: StaleCase) -> ScenarioReport:
    """Run one case (see :class:`StaleCase`); report duplicates, lost receipts, violations."""
    providers = case.providers()
    problems: list[str] = []
    violations = 0
    lost = 0
    worker: ForkedChild | None = None
    try:
        worker = start_forked_child(_stale_child, case, "worker")
        gate = Path(case.directory)
        alive = worker.process.is_alive
        reached = _until(lambda: (gate / "inside").exists() or not alive())
        reached = reached and (gate / "inside").exists()
        if reached and case.fault == "sigstop":
            reached = _freeze(worker.pid, case)
        if not reached:
            exit_ = worker.wait(5)
            problem = f"{case.tag}: the worker never reached its pause ({exit_.error or exit_})"
            return ScenarioReport(scenario=case.group, intents=1, errors=1, problems=(problem,))
        if case.fault == "sigstop":
            providers.clock.advance(DEFAULT_LEASE + timedelta(seconds=1))
        else:
            _terminate_backends(case)
            for _ in range(16):  # the ledger's clock runs at real speed: 4 s, 2.7 leases
                time.sleep(0.25)
                providers.clock.advance(timedelta(seconds=0.25))
        recoverer = run_in_forked_child(_stale_child, case, "recoverer")
        if not recoverer.ok:
            problems.append(f"{case.tag}: the recoverer failed: {recoverer.error}")
        ops, before = _ledger_view(case, providers.clock.now)
        if case.fault == "renewal":
            touched = [e for e in before if e.to_status is not OperationStatus.DISPATCHING]
            moved = [e for e in touched if e.kind.value != "prepare"]
            if providers[case.kind].effects or moved:
                violations += 1
                problems.append(
                    f"{case.tag}: the worker was alive and renewing, yet the recoverer acted: "
                    f"{providers[case.kind].effects} effect(s), events "
                    f"{[(e.kind.value, e.to_status.value) for e in moved]}"
                )
        else:
            os.kill(worker.pid, signal.SIGCONT)
        (gate / "release").touch()
        done = worker.wait(60)
        ops, after = _ledger_view(case, providers.clock.now)
        applied = sum(providers.applied(op) or 0 for op in ops)
        messages = (done.value or {}).get("tool_messages", []) if done.ok else []
        if case.fault == "sigstop" and applied and len(after) == len(before):
            lost += 1
            problems.append(
                f"{case.tag}: the thawed worker's receipt left no trace in the event log "
                f"(ops {[(op.status.value) for op in ops]})"
            )
        if applied and any("NOT carried out" in m or "was not carried out" in m for m in messages):
            lost += 1
            problems.append(f"{case.tag}: the worker told the model 'not carried out': {messages}")
        if applied and any(
            op.status is OperationStatus.REJECTED and not _operator_last(after, op) for op in ops
        ):
            lost += 1
            problems.append(f"{case.tag}: applied, but the ledger says rejected")
        duplicates = providers[case.kind].duplicates
        if duplicates:
            problems.append(f"{case.tag}: {duplicates} duplicate effect(s) at the provider")
        return ScenarioReport(
            scenario=case.group,
            intents=1,
            effects=providers[case.kind].effects,
            duplicates=duplicates,
            unknown=sum(1 for op in ops if op.status is OperationStatus.UNKNOWN),
            completed=int(all(op.status.terminal for op in ops) and bool(ops)),
            lost_receipts=lost,
            violations=violations,
            crashes=1,
            problems=tuple(problems),
        )
    finally:
        if worker is not None and worker.process.is_alive():
            # Never leave a frozen worker behind: it may hold database locks that stall
            # every later test on the same server.
            os.kill(worker.pid, signal.SIGCONT)
            worker.process.kill()
            worker.process.join(5)
        providers.close()


def _freeze(pid: int, case: StaleCase) -> bool:
    """SIGSTOP the worker at a moment when none of its connections holds a transaction.

    A process frozen inside the saver's transaction (LangGraph's PostgreSQL saver
    writing the previous step in the background) holds row locks the recoverer
    waits on: that stalls LangGraph's saver, not the ledger, and proves nothing
    about effects. So freeze, look, and thaw and retry while a transaction is open.
    """
    for _ in range(500):
        os.kill(pid, signal.SIGSTOP)
        if not _until(lambda: _stopped(pid)):
            return False
        if not _holds_transaction(case):
            return True
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)
    return False


def _holds_transaction(case: StaleCase) -> bool:
    if case.backend != "postgres":
        return False  # not observable from outside; SQLite's writes are short and retried
    import psycopg

    with psycopg.connect(case.ledger_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = %s AND xact_start IS NOT NULL",
            (case.app_name,),
        ).fetchone()
    return bool(row and row[0])


def _operator_last(events: Sequence[Any], op: Operation) -> bool:
    """A person rejected it on the evidence they had, and a receipt that arrived later is
    kept as a conflict for review (``core.plan.receipt_conflict``): truthful, not hidden."""
    mine = [e for e in events if e.operation_id == op.operation_id]
    if receipt_conflict(op, mine) is not None:
        return any(e.evidence is not None and e.evidence.source == "operator" for e in mine)
    return bool(mine) and mine[-1].evidence is not None and mine[-1].evidence.source == "operator"


def _terminate_backends(case: StaleCase) -> None:
    import psycopg

    with psycopg.connect(case.ledger_url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (case.app_name,),
        )


def stale_matrix(
    cases: Sequence[StaleCase], *, workers: int = 4, advance: Advance = _ignore
) -> dict[str, ScenarioReport]:
    """Run every case (mostly waiting, so several at once); sum the reports per group.
    ``advance(1)`` is called as each case ends."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        reports = list(pool.map(_counted(_one_stale, advance), cases))
    groups: dict[str, ScenarioReport] = {}
    for report in reports:
        groups[report.scenario] = groups.get(report.scenario, ScenarioReport.empty()) + report
    return groups


# --------------------------------------------------------------------------- concurrency


_CONCURRENT_POINTS = (
    CrashPoint.AFTER_CLAIM,
    CrashPoint.AFTER_PROVIDER,
    CrashPoint.AFTER_RECEIPT,
    CrashPoint.BEFORE_PREPARE,
)


def _concurrent_scenario(providers: Providers, run: str, i: int, *, fresh: bool) -> Scenario:
    tag = f"c{run}-{i}"
    return Scenario(
        tools=effect_tools(providers),
        tool_calls=[
            builtin_call(ProviderKind.CRM, 0, tag=tag),
            builtin_call(ProviderKind.MAIL, 1, tag=tag),
        ],
        providers=providers.all,
        clock=providers.clock,
        policy=confirm_if_seen(providers.shows),
        applied=providers.applied,
        thread_id=tag,
        fresh=fresh,
        name=tag,
    )


def _crash_threads(url: str, directory: str, run: str, threads: int) -> int:
    """In one child: start every thread and crash it in-process at a boundary; then die."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from langgraph_effects.ledger.postgres import PostgresLedger

    _quiet_langgraph()
    providers = Providers.open(Path(directory))
    crashed = 0
    with (
        PostgresLedger.from_conn_string(url, clock=providers.clock.now, max_size=2) as ledger,
        PostgresSaver.from_conn_string(url) as saver,
    ):
        for i in range(threads):
            sc = _concurrent_scenario(providers, run, i, fresh=True)
            graph = build_graph(
                sc.tools,
                sc.tool_calls,
                ledger=ledger,
                checkpointer=saver,
                node_kwargs={"tenant_id": sc.thread_id, "clock": providers.clock.now},
            )
            point = _CONCURRENT_POINTS[i % len(_CONCURRENT_POINTS)]
            config = {"configurable": {"thread_id": sc.thread_id}}
            with CrashPlan.arm(point):
                try:
                    graph.invoke({"messages": [HumanMessage(content="go", id="human")]}, config)
                except InjectedCrash:
                    crashed += 1
    providers.close()
    # The child then exits: its leases stay alive by the clock, and only the
    # owner's death (a gone pid) lets the resumers take them over.
    return crashed


def _resume_threads(url: str, directory: str, run: str, threads: int, seed: int) -> ScenarioReport:
    """In one of the racing children: resume every thread, in a seeded order."""
    from langgraph.checkpoint.postgres import PostgresSaver

    from langgraph_effects.ledger.postgres import PostgresLedger

    _quiet_langgraph()
    providers = Providers.open(Path(directory))
    order = list(range(threads))
    random.Random(seed).shuffle(order)
    total = ScenarioReport.empty()
    with (
        PostgresLedger.from_conn_string(url, clock=providers.clock.now, max_size=2) as ledger,
        PostgresSaver.from_conn_string(url) as saver,
    ):
        for i in order:
            sc = _concurrent_scenario(providers, run, i, fresh=False)
            report = run_scenario(sc, ledger=ledger, checkpointer=saver)
            total = total + replace(report, problems=(), effects=0, duplicates=0)
        stale = ledger.stats().stale_token_refusals
    providers.close()
    return replace(total, stale_token_refusals=stale)


def concurrency(
    postgres_url: str, workdir: Path, *, processes: int = 8, threads: int = 100, seed: int = 0
) -> ScenarioReport:
    """``processes`` processes resume the same ``threads`` crashed threads against PostgreSQL.

    Returns one report over all threads: effects and duplicates counted at the
    providers, operations read from the ledger (each must be confirmed, once).
    """
    from langgraph_effects.ledger.postgres import PostgresLedger

    run = uuid.uuid4().hex[:6]
    directory = workdir / f"concurrency-{run}"
    directory.mkdir(parents=True)
    _setup_backend("postgres", postgres_url, postgres_url)
    start = run_in_forked_child(_crash_threads, postgres_url, str(directory), run, threads)
    if not start.ok:
        raise RuntimeError(f"the crashing child failed: {start.error or start.exitcode}")
    with ThreadPoolExecutor(max_workers=processes) as pool:
        exits = list(
            pool.map(
                lambda k: run_in_forked_child(
                    _resume_threads, postgres_url, str(directory), run, threads, seed + k
                ),
                range(processes),
            )
        )
    failed = [e.error or str(e.exitcode) for e in exits if not e.ok]
    providers = Providers.open(directory)
    problems: list[str] = [f"a resumer failed: {line}" for line in failed]
    with PostgresLedger.from_conn_string(postgres_url, clock=providers.clock.now) as ledger:
        ops = [op for i in range(threads) for op in ledger.list(tenant_id=f"c{run}-{i}", limit=100)]
        histories = {op.operation_id: ledger.events(op.tenant_id, op.operation_id) for op in ops}
    problems += mislabelled_operations(ops, histories, applied=providers.applied)
    unknown = sum(1 for op in ops if op.status is OperationStatus.UNKNOWN)
    confirmed = sum(1 for op in ops if op.status is OperationStatus.CONFIRMED)
    human = sum(e.human_resolved for e in (x.value for x in exits if x.ok))
    stale = sum(e.stale_token_refusals for e in (x.value for x in exits if x.ok))
    stats = [p.stats() for p in providers.all]
    effects = sum(st.effects for st in stats)
    replays = sum(st.replays for st in stats)
    intents = 2 * threads
    if effects != intents or replays:
        problems.append(
            f"concurrency: {effects} effects and {replays} keyed resends "
            f"for {intents} intents (expected exactly one dispatch each)"
        )
    duplicates = sum(st.duplicates for st in stats)
    providers.close()
    return ScenarioReport(
        scenario=f"concurrency postgres ({processes} procs x {threads} threads)",
        runs=threads,
        intents=intents,
        effects=effects,
        duplicates=duplicates,
        unknown=unknown,
        human_resolved=human,
        completed=confirmed // 2,
        stale_token_refusals=stale,
        mislabelled=len(problems) - len(failed),
        errors=len(failed),
        problems=tuple(problems),
    )


# --------------------------------------------------------------------------- the command


COLUMNS: dict[str, str] = {
    "scenario": "what ran: a part of the campaign, or one group of its cases",
    "runs": "scenarios run (schedules, kill cases, stale cases, resumer runs)",
    "intents": "tool calls the model proposed: each is one effect, intended once",
    "effects": "effects the fake providers applied (counted at the providers)",
    "duplicates": "effects beyond the first per intent: 0 for EffectToolNode; the control's "
    "count is what a plain ToolNode does",
    "unknown": "operations left unknown at the end: the provider may have acted, so the "
    "ledger says so instead of guessing",
    "human-resolved": "operations a person decided (a review answer, an operator)",
    "completion": "share of runs whose thread finished with every operation settled; the "
    "rest end waiting for a person, as they should",
    "mislabelled": "operations whose record contradicts what the provider did (must be 0)",
    "lost-receipts": "effects a provider applied that the ledger does not own up to, or "
    "that the model was told were not carried out (must be 0)",
    "lost-answers": "answers a person gave that were consumed silently: the same question "
    "asked again, neither applied nor refused, with no notice saying why (must be 0)",
    "refused-answers": "valid answers to the question the ledger still asked, refused in "
    "words: that question asked again unchanged, its notice a refusal (must be 0)",
    "lost-effects": "intended effects that never acted: an operation answered done in its "
    "timeline more often than its provider applied it, or a call the thread ended without "
    "(must be 0; the control's count is what a plain ToolNode does)",
    "violations": "other broken promises: a bad answer accepted, a valid one refused, a "
    "resume under another tenant not refused, ... (must be 0)",
    "stale-token": "writes of a late worker the ledger refused (its fencing token was "
    "stale): the fence working, not a failure",
}
"""What each column of the campaign's table counts, printed under it."""


@dataclass(frozen=True, slots=True)
class CampaignResult:
    """The rows of the table, in order, the per-kind breakdown, and whether the campaign passed."""

    rows: tuple[ScenarioReport, ...]
    control: ScenarioReport | None
    seconds: dict[str, float]
    kinds: dict[str, ScenarioReport] = field(default_factory=dict)
    """The randomized EffectToolNode schedules, one summed report per scenario kind."""
    control_kinds: dict[str, ScenarioReport] = field(default_factory=dict)
    """The same schedules through the control, per kind."""

    @property
    def node_rows(self) -> tuple[ScenarioReport, ...]:
        """The rows of the effect-aware runs: every row but the plain-ToolNode control."""
        return tuple(r for r in self.rows if r is not self.control)

    @property
    def duplicates(self) -> int:
        """Duplicate effects counted at the fake providers in the effect-aware runs (must be 0)."""
        return sum(r.duplicates for r in self.node_rows)

    @property
    def mislabelled(self) -> int:
        """Operations whose final status contradicts what the provider did (must be 0)."""
        return sum(r.mislabelled for r in self.node_rows)

    @property
    def lost_receipts(self) -> int:
        """Effects the provider applied that no record confirms or keeps unknown (must be 0)."""
        return sum(r.lost_receipts for r in self.node_rows)

    @property
    def lost_answers(self) -> int:
        """Answers consumed silently: not applied, not refused, not re-asked saying why (0)."""
        return sum(r.lost_answers for r in self.node_rows)

    @property
    def refused_answers(self) -> int:
        """Valid answers to the current question refused in words (must be 0)."""
        return sum(r.refused_answers for r in self.node_rows)

    @property
    def lost_effects(self) -> int:
        """Intended effects that never acted: answered done more often than applied, or a
        call the thread ended without (must be 0)."""
        return sum(r.lost_effects for r in self.node_rows)

    @property
    def violations(self) -> int:
        """Broken invariants found by the assertions, over the effect-aware runs (must be 0)."""
        return sum(r.violations for r in self.node_rows)

    @property
    def ok(self) -> bool:
        """True when every count above is zero and the control shows its duplicates."""
        control_shows = self.control is None or self.control.duplicates > 0
        counts = (self.duplicates, self.mislabelled, self.lost_receipts, self.lost_answers)
        clean = counts == (0, 0, 0, 0) and self.lost_effects == self.violations == 0
        clean = clean and self.refused_answers == 0
        return clean and control_shows

    def table(self) -> str:
        """The result as an aligned text table, one row per scenario (the control marked)."""
        lines: list[tuple[str, ...]] = [tuple(COLUMNS)]
        for r in self.rows:
            control = r is self.control
            lines.append(
                (
                    r.scenario,
                    str(r.runs),
                    str(r.intents),
                    str(r.effects),
                    str(r.duplicates),
                    str(r.unknown),
                    str(r.human_resolved),
                    f"{100 * r.completion_rate:.1f}%",
                    "-" if control else str(r.mislabelled),
                    "-" if control else str(r.lost_receipts),
                    "-" if control else str(r.lost_answers),
                    "-" if control else str(r.refused_answers),
                    str(r.lost_effects),
                    "-" if control else str(r.violations),
                    str(r.stale_token_refusals),
                )
            )
        return _render(lines)

    def breakdown(self) -> str:
        """The randomized schedules per scenario kind, with the control's duplicates beside."""
        head: tuple[str, ...] = (
            "kind",
            "schedules",
            "duplicates",
            "lost-receipts",
            "lost-answers",
            "refused-answers",
            "lost-effects",
            "mislabelled",
        )
        head += ("violations", "completion", "control-duplicates", "control-lost-effects")
        lines: list[tuple[str, ...]] = [head]
        for kind, r in self.kinds.items():
            control = self.control_kinds.get(kind)
            lines.append(
                (
                    kind,
                    str(r.runs),
                    str(r.duplicates),
                    str(r.lost_receipts),
                    str(r.lost_answers),
                    str(r.refused_answers),
                    str(r.lost_effects),
                    str(r.mislabelled),
                    str(r.violations),
                    f"{100 * r.completion_rate:.1f}%",
                    "-" if control is None else str(control.duplicates),
                    "-" if control is None else str(control.lost_effects),
                )
            )
        return _render(lines)


def _render(lines: list[tuple[str, ...]]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = []
    for n, line in enumerate(lines):
        cells = [line[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(line[1:], widths[1:], strict=True)
        ]
        out.append("  ".join(cells))
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def run_campaign(
    *,
    schedules: int = 2000,
    seed: int = 0,
    backends: Sequence[str] = ("sqlite", "postgres"),
    parts: Sequence[str] = PARTS,
    processes: int = 8,
    threads: int = 100,
    workers: int = 2,
    postgres_url: str | None = DEFAULT_POSTGRES_URL,
    workdir: Path | None = None,
    control_every: int = 1,
    progress: Progress | None = None,
    kinds: Sequence[Kind] | None = None,
) -> CampaignResult:
    """Run the selected parts; see the module docstring. ``workers`` run schedules in parallel;
    the randomized schedules draw their kind from ``kinds`` (default ``scenario.DRAWN``).

    ``control_every``: the control runs every n-th schedule only (it is there
    to show the failures, which a share of the schedules shows plainly).
    ``progress``: where each part reports what it has done and its ETA (default:
    nothing is reported; the command passes one writing to stderr).
    """
    progress = progress or Progress("campaign", stream=io.StringIO(), bar=False)
    _quiet_langgraph()
    rows: list[ScenarioReport] = []
    control: ScenarioReport | None = None
    seconds: dict[str, float] = {}
    kinds_of: dict[str, dict[str, ScenarioReport]] = {}
    seeds = list(range(seed, seed + schedules))
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lge-campaign-")))
        for part in parts:
            started = time.perf_counter()
            if part in ("randomized", "control"):
                control_part = part == "control"
                batch = seeds[:: max(1, control_every)] if control_part else seeds
                with progress.part(part, len(batch), "schedules") as advance:
                    kinds_of[part] = _parallel_schedules(
                        batch, control=control_part, workers=workers, advance=advance, kinds=kinds
                    )
                report = _total(kinds_of[part], control=part == "control")
                rows.append(report)
                if part == "control":
                    control = report
            elif part == "kills":
                cases = kill_cases(backends, workdir / "kills", postgres_url=postgres_url)
                with progress.part(part, len(cases), "kill cases") as advance:
                    rows.extend(kill_matrix(cases, workers=workers, advance=advance).values())
            elif part == "stale":
                stale = stale_cases(backends, workdir / "stale", postgres_url=postgres_url)
                with progress.part(part, len(stale), "stale cases") as advance:
                    found = stale_matrix(stale, workers=2 * workers, advance=advance)
                rows.extend(found.values())
            elif part == "concurrency" and "postgres" in backends:
                if postgres_url is None:
                    raise ValueError("the concurrency part needs --postgres-url")
                with progress.part(part, 1, "runs") as advance:
                    rows.append(
                        concurrency(
                            postgres_url,
                            workdir / "concurrency",
                            processes=processes,
                            threads=threads,
                            seed=seed,
                        )
                    )
                    advance(1)
            seconds[part] = time.perf_counter() - started
    return CampaignResult(
        rows=tuple(rows),
        control=control,
        seconds=seconds,
        kinds=kinds_of.get("randomized", {}),
        control_kinds=kinds_of.get("control", {}),
    )


def _chunk(
    seeds: Sequence[int], control: bool, kinds: Sequence[Kind] | None
) -> dict[str, ScenarioReport]:
    return randomized_by_kind(seeds, control=control, kinds=kinds)


def _total(kinds: dict[str, ScenarioReport], *, control: bool) -> ScenarioReport:
    label = "randomized ToolNode (control)" if control else "randomized EffectToolNode"
    total = ScenarioReport.empty(label)
    for report in kinds.values():
        total = total + report
    return replace(total, scenario=label)


def _parallel_schedules(
    seeds: Sequence[int],
    *,
    control: bool,
    workers: int,
    advance: Advance = _ignore,
    kinds: Sequence[Kind] | None = None,
) -> dict[str, ScenarioReport]:
    """Run the schedules in chunks (in ``workers`` forked children at once, or here when
    there are few); ``advance`` counts each chunk's schedules as it ends."""
    size = max(1, min(50, len(seeds) // max(1, 4 * workers)))
    chunks = [seeds[i : i + size] for i in range(0, len(seeds), size)]
    if workers <= 1 or len(seeds) < 50:
        by_kind: dict[str, ScenarioReport] = {}
        for chunk in chunks:
            by_kind = _merge(by_kind, randomized_by_kind(chunk, control=control, kinds=kinds))
            advance(len(chunk))
        return by_kind

    def forked(chunk: Sequence[int]) -> Any:
        try:
            return run_in_forked_child(_chunk, chunk, control, kinds, timeout=3600)
        finally:
            advance(len(chunk))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        exits = list(pool.map(forked, chunks))
    by_kind = {}
    for e in exits:
        if not isinstance(e.value, dict):
            raise RuntimeError(f"a schedule worker failed: {e.error or e.exitcode}")
        by_kind = _merge(by_kind, e.value)
    return by_kind


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__name__}",
        description="Fault-injection campaign: crash, kill, resume, race; count duplicates.",
    )
    parser.add_argument("--schedules", type=int, default=2000, help="randomized schedules")
    parser.add_argument("--seed", type=int, default=0, help="first schedule's seed")
    parser.add_argument("--large", action="store_true", help="at least 20,000 schedules")
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite,postgres")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"which parts to run ({','.join(PARTS)})"
    )
    parser.add_argument(
        "--processes", type=int, default=8, help="concurrent resumer processes (concurrency)"
    )
    parser.add_argument("--threads", type=int, default=100, help="threads they resume")
    parser.add_argument("--workers", type=int, default=2, help="parallel worker processes")
    parser.add_argument(
        "--control-every", type=int, default=1, help="run the control on every n-th schedule"
    )
    parser.add_argument(
        "--kinds",
        default="",
        help=f"the scenario kinds schedules draw, comma-separated (default: those drawn in CI; "
        f"all: {','.join(k.value for k in Kind)})",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("LGE_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL),
        help="PostgreSQL for the postgres backend (default: $LGE_TEST_POSTGRES_URL or local)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command: run, print the table and any problems; the exit status says pass/fail."""
    args = _parser().parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    names = [k.strip() for k in args.kinds.split(",") if k.strip()]
    bad = [b for b in backends if b not in ("sqlite", "postgres")] + [
        p for p in parts if p not in PARTS
    ]
    bad += [k for k in names if k not in {kind.value for kind in Kind}]
    if bad:
        print(f"unknown backend, part or kind: {', '.join(bad)}", file=sys.stderr)
        return 2
    if "postgres" in backends:
        problem = _postgres_problem(args.postgres_url)
        if problem:
            print(f"PostgreSQL unusable ({problem}); use --backends sqlite", file=sys.stderr)
            return 2
    schedules = max(args.schedules, 20_000) if args.large else args.schedules
    with contextlib.ExitStack() as stack:
        url = None
        if "postgres" in backends:
            url = stack.enter_context(own_schema(args.postgres_url))
        return _report(args, backends, parts, names, schedules, url)


def _report(
    args: argparse.Namespace,
    backends: list[str],
    parts: list[str],
    names: list[str],
    schedules: int,
    postgres_url: str | None,
) -> int:
    result = run_campaign(
        progress=Progress("campaign"),
        schedules=schedules,
        seed=args.seed,
        backends=backends,
        parts=parts,
        processes=args.processes,
        threads=args.threads,
        workers=args.workers,
        postgres_url=postgres_url,
        control_every=args.control_every,
        kinds=[Kind(k) for k in names] or None,
    )
    print(result.table())
    print("\ncolumns:")
    for name, meaning in COLUMNS.items():
        print(f"  {name}: {meaning}")
    if result.kinds:
        print("\nrandomized schedules per kind:")
        print(result.breakdown())
    timing = ", ".join(f"{part} {s:.1f}s" for part, s in result.seconds.items())
    print(f"\ntime: {timing}")
    for row in result.rows:
        for line in row.problems:
            if row is not result.control:
                print(f"PROBLEM {line}")
    if result.control is not None and result.control.duplicates == 0:
        print("PROBLEM the control shows no duplicates: the schedules prove nothing")
    print(
        f"\nEffectToolNode: {result.duplicates} duplicates, {result.lost_receipts} lost receipts, "
        f"{result.lost_answers} lost answers, {result.refused_answers} refused answers, "
        f"{result.lost_effects} lost effects, "
        f"{result.mislabelled} mislabelled, {result.violations} violations"
        + ("" if result.control is None else f"; control: {result.control.duplicates} duplicates")
    )
    return 0 if result.ok else 1


@contextlib.contextmanager
def own_schema(url: str) -> Iterator[str]:
    """``url`` in a schema of the campaign's own, dropped afterwards: the tables its
    ledgers and checkpointers set up never land in the database's ``public`` schema
    (or in one a test or an application uses). A URL that names its own
    ``search_path`` is the caller's choice, used as it is."""
    if "search_path" in url:
        yield url
        return
    import psycopg
    from psycopg import sql

    name = f"lge_campaign_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _postgres_problem(url: str) -> str | None:
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # any failure: report it, do not crash
        return str(exc).strip() or type(exc).__name__
    return None


if __name__ == "__main__":
    raise SystemExit(main())
