"""The benchmark scripts still run: a tiny run of each, checking the JSON they write.

Sizes are tiny, so the figures mean nothing and nothing here is timed; what is
asserted is that every script completes against the real ledgers, counts what
it claims to count, and writes the ratios the README and issue 7 rely on.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest

# The benchmarks package sits beside tests/, not inside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks._common import PgTrace
from benchmarks.lifecycle import _sqlite_counts

REQUIRED_RATIOS = (
    "postgres_n1",
    "postgres_n10",
    "sqlite_n1",
    "sqlite_n10",
    "ledger_vs_floor_postgres",
    "ledger_vs_dbos_step",
)

TRACE = "\n".join(
    [
        'F\t40\tParse\t "_pg3_0" "WITH op AS (UPDATE t SET a = 1 RETURNING *) SELECT * FROM op" 0',
        "F\t4\tSync",
        "B\t4\tParseComplete",
        "B\t5\tReadyForQuery\t I",
        'F\t20\tBind\t "" "_pg3_0" 0 0 1 0',
        "F\t4\tSync",
        'B\t15\tCommandComplete\t "SELECT 1"',
        "B\t5\tReadyForQuery\t I",
        'F\t10\tQuery\t "BEGIN"',
        "B\t5\tReadyForQuery\t T",
        'F\t20\tBind\t "" "_pg3_1" 0 0 1 0',
        "F\t4\tSync",
        "B\t5\tReadyForQuery\t T",
        'F\t11\tQuery\t "COMMIT"',
        "B\t5\tReadyForQuery\t I",
    ]
)


def test_pg_trace_counts_round_trips_and_write_commits() -> None:
    """A libpq trace yields its round trips, transactions and the write commits among them."""
    trace = PgTrace.parse(TRACE, {"_pg3_1": "SELECT * FROM t"})
    assert trace.round_trips == 5
    assert trace.transactions == 2  # the Parse-only exchange is no transaction
    # The CTE's UPDATE hides behind a SELECT tag; the read-only transaction is no write.
    assert trace.write_commits == 1


def test_sqlite_counts_write_transactions() -> None:
    """sqlite3 statement traces count one commit per written transaction or bare write."""
    counts = _sqlite_counts(
        [
            "BEGIN IMMEDIATE",
            "INSERT INTO t VALUES (1)",
            "COMMIT",
            "SELECT 1",
            "UPDATE t SET a=2",
            "BEGIN",
            "SELECT 2",
            "COMMIT",
        ]
    )
    assert (counts.write_commits, counts.transactions) == (2, 3)


def test_the_hot_path_steps_are_counted_from_the_node_to_the_receipt() -> None:
    """``hot_path.steps`` lists the package's frames from EffectToolNode's hook to the
    statement recording a receipt, the decision loop's suspended generators among them."""
    from benchmarks.hot_path import steps

    chains = steps()
    for ledger, last in (
        ("memory", "ledger/memory.py InMemoryLedger.confirm"),
        # The frame that hands the statement to sqlite3 (``executor``'s closures).
        ("sqlite", "ledger/engine/sqlite.py executor.<locals>."),
    ):
        chain = chains[ledger]
        assert chain[0] == "node.py EffectToolNode._wrap", chain
        assert chain[-1].startswith(last), chain
        assert "decide/loop.py Loop.decide (generator)" in chain, chain
        assert len(set(chain)) == len(chain), chain  # each generator counted once
    assert len(chains["sqlite"]) > len(chains["memory"])


def test_every_benchmark_writes_its_results(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tiny run of all nine benchmarks writes latest.json with positive ratios and each table."""
    pytest.importorskip("dbos", reason="dbos is an optional benchmark dependency")
    from benchmarks.__main__ import main

    monkeypatch.setenv("LGE_BENCH_RESULTS_DIR", str(tmp_path))
    main(["--smoke"])

    latest = json.loads((tmp_path / "latest.json").read_text())
    for name in REQUIRED_RATIOS:
        value = latest["ratios"][name]
        assert isinstance(value, float), name
        assert math.isfinite(value), name
        assert value > 0, name
    assert set(latest["reports"]) == {
        "tool_call",
        "faces",
        "lifecycle",
        "dbos_peer",
        "concurrency",
        "recovery",
        "memory",
        "hot_path",
        "cli",
    }
    for name, report in latest["reports"].items():
        assert report["rows"], f"{name} produced no table rows"
        assert json.loads((tmp_path / f"{name}.json").read_text())["name"] == report["name"]

    counts = latest["reports"]["lifecycle"]["data"]["postgres"]["counts"]
    assert counts["replay/floor"]["round_trips"] == 1
    assert counts["three_step/floor"]["write_commits"] == 3
    races = latest["reports"]["concurrency"]["data"]["2"]["contention"]
    assert all(race["max_winners"] == 1 for race in races.values())
    assert latest["targets"]["postgres_n1"]["value"] == latest["ratios"]["postgres_n1"]
    # Per router: what EffectToolNode adds per effect, and the hot path's profile.
    rows = latest["reports"]["tool_call"]["data"]["results"]
    assert {(r["backend"], r["router"]) for r in rows} == {
        (b, r) for b in ("sqlite", "postgres") for r in ("tools_condition", "route_tool_calls")
    }
    for r in rows:
        added = r["added_per_effect"]
        assert added["durable_commits"] <= added["write_commits"], r
        # The CPU an invoke costs is measured; what the effect adds to it is a difference
        # of two noisy measures at smoke size, so only its presence is checked.
        assert r["counts_per_invoke"]["EffectToolNode"]["client_cpu_ms"] > 0, r
        assert math.isfinite(added["client_cpu_ms"]), r
    # Every face's ratio at both sizes, on both backends: the targets of issue 13.
    for face in ("middleware", "async"):
        for backend in ("sqlite", "postgres"):
            for n in (1, 10):
                assert latest["targets"][f"{backend}_n{n}_{face}"]["value"] > 0
    hot = latest["reports"]["hot_path"]["data"]
    assert 0 < hot["package_own_ms"] < hot["invoke_ms"]
    assert len(hot["top"]) == 15
    # The steps from the node to the receipt's statement, counted on both ledgers.
    for ledger, last in (
        ("memory", "ledger/memory.py InMemoryLedger.confirm"),
        ("sqlite", "execute"),
    ):
        chain = hot["steps"][ledger]
        assert chain[0] == "node.py EffectToolNode._wrap", chain
        assert chain[-1].endswith(last), chain
        assert "decide/loop.py Loop.decide (generator)" in chain, chain


def test_a_run_never_overwrites_the_committed_results_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --save a run writes into a fresh temporary directory and says the committed
    results are unchanged; with --save it writes into benchmarks/results (here a stand-in).
    Nothing printed names an internal issue number."""
    import benchmarks.__main__ as runner
    from benchmarks import _common

    committed = tmp_path / "committed"
    committed.mkdir()
    (committed / "latest.json").write_text("{}")
    monkeypatch.setattr(runner, "COMMITTED_RESULTS", committed)
    monkeypatch.setattr(_common, "_chosen", [])
    monkeypatch.delenv("LGE_BENCH_RESULTS_DIR", raising=False)

    runner.main(["--smoke", "--only", "cli"])
    out = capsys.readouterr().out
    assert (committed / "latest.json").read_text() == "{}"
    wrote = re.search(r"^wrote (\S+latest\.json)", out, flags=re.M)
    assert wrote is not None, out
    written = Path(wrote.group(1))
    assert written.parent != committed
    assert json.loads(written.read_text())["reports"].keys() == {"cli"}
    assert "are unchanged: --save replaces them" in out
    assert not re.search(r"\bissues? \d", out)

    runner.main(["--smoke", "--only", "cli", "--save"])
    out = capsys.readouterr().out
    assert json.loads((committed / "latest.json").read_text())["reports"].keys() == {"cli"}
    assert not re.search(r"\bissues? \d", out)
