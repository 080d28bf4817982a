"""``python -m langgraph_effects.cli``: the console script ``langgraph-effects``."""

from __future__ import annotations

from langgraph_effects.cli import main

main()
