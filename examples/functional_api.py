"""An effect inside LangGraph's Functional API (``@entrypoint`` + ``@task``), killed and resumed.

The entrypoint closes a CRM case through a ``@task`` whose body calls the effect
with ``run_effect(close_case, args, ledger=ledger)``. LangGraph keeps a task's
result once it finished, nothing more: a task killed between the CRM's answer and
its saved result runs again on resume. ``run_effect`` finds the same operation
(the task's id, kept by the checkpoint, and the call's place in the task) and
settles it through the CRM's status lookup instead of closing the case again (or,
when the CRM shows nothing, resends under the same idempotency key, which the CRM
deduplicates).

Run it::

    python examples/functional_api.py                              # one run, one closure
    python examples/functional_api.py --crash-at after_provider    # killed after the CRM closed
    python examples/functional_api.py --resume --dir DIR           # a fresh process resumes
    python examples/functional_api.py --postgres postgresql://postgres@127.0.0.1:5432/test

``--crash-at`` takes ``before_prepare``, ``after_claim``, ``after_provider`` or
``after_receipt`` (``POINT:N``: the N-th time): the process really exits (code
137) and prints the ``--resume --dir DIR`` command; the resume runs
``entrypoint.invoke(None, config)`` in a fresh process. ``--postgres URL`` keeps
the ledger and LangGraph's checkpoints in PostgreSQL, in a schema of the run's
own; the fake CRM stays a SQLite file.

What it prints: the entrypoint's result, the ledger's operation with its status
and events, and ``CRM closures of case-318: 1``, whatever crashed. Exit code 0
when that count is 1 and the operation is confirmed; 137 when a crash point
killed it; 3 when the armed point was not reached (nothing died); 1 otherwise.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from _common import (
    begin,
    example_parser,
    open_ledger,
    open_saver,
    table,
    who,
)
from langgraph.func import entrypoint, task

from langgraph_effects import (
    EffectContext,
    Evidence,
    Ledger,
    Operation,
    OperationStatus,
    ProviderContract,
    effect,
    run_effect,
)
from langgraph_effects.testing import FakeCRM

TENANT = "acme"
THREAD = "onboarding-7"
CASE = "case-318"
CRASH_POINTS = ("before_prepare", "after_claim", "after_provider", "after_receipt")
KEYS_24H = ProviderContract(idempotency_window=timedelta(hours=24), status_lookup=True)


def build_flow(crm: FakeCRM, ledger: Ledger, saver: Any) -> Any:
    """The effect, the task that calls it, and the entrypoint."""

    def find_closure(op: Operation) -> Evidence:
        # Conclusive only when the CRM shows THIS operation's key on the case.
        case = crm.get_case(op.target or "")
        if case["status"] == "closed" and case["closed_by"] == op.idempotency_key:
            return Evidence.confirmed(
                f"{case['case_id']} closed by this operation",
                result={k: case[k] for k in ("case_id", "status", "version")},
            )
        return Evidence.inconclusive(f"{case['case_id']} is {case['status']}, not by this key")

    @effect(
        "crm.close_case",
        target=lambda a: a["case_id"],
        contract=KEYS_24H,  # the CRM deduplicates a resend under the same key for 24 h
        reconcile=find_closure,
    )
    def close_case(case_id: str, resolution: str, ctx: EffectContext) -> dict[str, Any]:
        """Close a CRM case with a resolution."""
        closed = crm.close_case(case_id, resolution, idempotency_key=ctx.idempotency_key)
        return {k: closed[k] for k in ("case_id", "status", "version")}

    @task
    def close(case_id: str) -> Any:
        args = {"case_id": case_id, "resolution": "onboarding complete"}
        return run_effect(close_case, args, ledger=ledger, tenant_id=TENANT)

    @entrypoint(checkpointer=saver)
    def onboard(case_id: str) -> dict[str, Any]:
        return {"closed": close(case_id).result()}

    return onboard


def report(directory: Path, ledger: Ledger) -> int:
    """Print what the ledger and the CRM say; return the exit code."""
    ops = ledger.list(tenant_id=TENANT)
    print("\nLedger operations:")
    print(
        table(
            [(o.operation_id, o.action, o.target, o.status.value, o.attempts) for o in ops],
            header=("operation", "action", "target", "status", "attempts"),
        )
    )
    for o in ops:
        steps = [f"{e.kind.value}({who(e.actor)})" for e in ledger.events(TENANT, o.operation_id)]
        print(f"  {o.action}: {' -> '.join(steps)}")
    with FakeCRM(directory / "crm.db") as crm:
        closures = crm.effects_for(CASE)
    print(f"\nCRM closures of {CASE}: {closures}")
    ok = closures == 1 and [o.status for o in ops] == [OperationStatus.CONFIRMED]
    print("OK: the effect happened exactly once." if ok else "NOT DONE: see above.")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = example_parser(__doc__, CRASH_POINTS)
    args = parser.parse_args(argv)
    run = begin("functional_api", parser, args, stores="ledger, checkpoints")
    directory, pg = run.directory, run.pg

    config = {"configurable": {"thread_id": THREAD}}
    with (
        FakeCRM(directory / "crm.db") as crm,
        open_ledger(directory, pg) as ledger,
        open_saver(directory, pg) as saver,
    ):
        onboard = build_flow(crm, ledger, saver)
        plan = run.arm()
        if not args.resume:
            print(f"\nonboard.invoke({CASE!r}): the task closes the case through run_effect")
            out = onboard.invoke(CASE, config, durability="sync")
            print(f"  result: {out}")
        elif onboard.get_state(config).next:
            print("\nA fresh process resumes the thread: onboard.invoke(None, config)")
            out = onboard.invoke(None, config, durability="sync")
            print(f"  result: {out}")
        elif onboard.get_state(config).values:
            print("\nThe thread is finished; nothing to resume there.")
        elif ledger.list(tenant_id=TENANT):
            # LangGraph saves a run's first checkpoint while its first task already runs:
            # the kill beat it. The request is sent again, as its user would; the task
            # meets the operation the killed run left.
            print("\nThe kill came before the first checkpoint: onboard.invoke(CASE) again")
            out = onboard.invoke(CASE, config, durability="sync")
            print(f"  result: {out}")
        else:
            print(f"Nothing to resume in {directory}: run without --resume first.")
            return 1
        return run.exit_code(plan, report(directory, ledger))


if __name__ == "__main__":
    sys.exit(main())
