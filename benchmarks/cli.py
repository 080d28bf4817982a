"""Benchmark 8: CPU seconds per operator command (``langgraph-effects ...``) on SQLite.

An operator runs ``list`` and ``show`` many times during an incident, so each
must cost little: the targets are under 0.3 s for ``--help`` and ``--version``
and under 0.5 s for ``list`` and ``show``. Each command runs as a fresh process
(``python -c "from langgraph_effects.cli import main; main()" ...``, what the
console script does) against a SQLite ledger of a few operations; the figure is
the child's user + system CPU time (``RUSAGE_CHILDREN``), not wall time, so a
loaded machine changes it little. Median of ``--rounds`` runs per command,
commands interleaved round by round.

Run: ``python -m benchmarks.cli [--rounds 9]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks._common import Report, sqlite_dir, write_json

__all__ = ["COMMANDS", "TARGETS", "main", "run"]

# command name -> its arguments ({db} and {op} are filled in); the bound is the target.
COMMANDS: dict[str, list[str]] = {
    "--version": ["--version"],
    "--help": ["--help"],
    "list": ["list", "--db", "{db}"],
    "show": ["show", "{op}", "--tenant", "acme", "--db", "{db}"],
    "list --json": ["list", "--db", "{db}", "--json"],
    "stats": ["stats", "--db", "{db}"],
}
TARGETS: dict[str, float] = {"--version": 0.3, "--help": 0.3, "list": 0.5, "show": 0.5}

_ENTRY = "from langgraph_effects.cli import main; main()"


def _populate(path: Path) -> str:
    """A SQLite ledger with a few operations in each open state; returns one operation id."""
    from langgraph_effects._owners import current_owner
    from langgraph_effects.core.digest import payload_digest
    from langgraph_effects.core.model import OperationDraft
    from langgraph_effects.ledger.sqlite import SQLiteLedger

    with SQLiteLedger.from_conn_string(str(path)) as ledger:
        ledger.setup()
        for n in range(12):
            payload = {"case": n}
            draft = OperationDraft(
                tenant_id="acme",
                operation_id=f"op-bench-{n:04d}",
                workflow_id=f"thread-{n}",
                action="crm.close_case",
                target=f"case-{n}",
                payload_digest=payload_digest("crm.close_case", 1, f"case-{n}", payload),
                payload=payload,
                idempotency_key=f"lge-{n}",
            )
            claimed = ledger.prepare(draft, owner=current_owner())
            if n % 3 == 0:
                token = claimed.operation.fencing_token
                ledger.mark_unknown("acme", draft.operation_id, token=token, reason="timeout")
    return "op-bench-0000"


def _cpu_seconds(argv: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, check=False, env=os.environ.copy())
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[3:]} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run(rounds: int = 9) -> Report:
    """CPU seconds per command, median of ``rounds`` fresh processes each."""
    report = Report(
        "CPU seconds per CLI command (fresh process, SQLite)",
        ["command", "median s", "min s", "max s", "target s", "met"],
    )
    with sqlite_dir() as directory:
        db = directory / "effects.db"
        op = _populate(db)
        argvs = {
            name: [sys.executable, "-c", _ENTRY]
            + [a.format(db=f"sqlite:///{db}", op=op) for a in args]
            for name, args in COMMANDS.items()
        }
        samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
        for _ in range(rounds):
            for name, argv in argvs.items():
                samples[name].append(_cpu_seconds(argv))
    for name, values in samples.items():
        median = statistics.median(values)
        bound = TARGETS.get(name)
        met = "-" if bound is None else ("yes" if median < bound else "NO")
        report.add(name, median, min(values), max(values), bound if bound else "-", met)
        report.data[name] = values
        report.ratios[f"cli_cpu_s_{name.strip('-').replace(' --', '_')}"] = median
    report.notes.append(
        "user + system CPU of the child process (RUSAGE_CHILDREN), Python start-up included"
    )
    return report


def main(argv: Sequence[str] | None = None) -> Report:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="processes per command (median)")
    args = parser.parse_args(argv)
    report = run(rounds=args.rounds)
    print(report.table())
    write_json("cli.json", report.as_dict())
    return report


if __name__ == "__main__":
    main()
