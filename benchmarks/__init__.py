"""Benchmarks: the cost of safety next to a plain ToolNode, the database floor and a peer.

``python -m benchmarks`` runs them all (``--quick`` for the per-tool-call
comparison, the lifecycle and the DBOS peer); each module also runs alone
(``python -m benchmarks.tool_call``). Results go to a temporary directory
(``$LGE_BENCH_RESULTS_DIR`` overrides); ``python -m benchmarks --save`` writes them
into ``benchmarks/results/``, replacing the committed ``latest.json`` (every ratio).
"""
