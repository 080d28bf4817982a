"""The ledger's settings a reader needs without loading a ledger (the CLI's ``--help``).

Defined here, with no imports, so the operator CLI declares its options without
importing pydantic or a backend; ``ledger.connect`` and ``ledger.sweep`` export them.
"""

from __future__ import annotations

__all__ = ["DEFAULT_SCAN", "LEDGER_URL_ENV"]

LEDGER_URL_ENV = ("LGE_LEDGER_URL", "LGE_DB")
"""The environment variables naming the ledger, first set wins (``LGE_DB`` is the old name)."""

DEFAULT_SCAN = 1000
"""How many ``dispatching`` operations one sweep examines, oldest first."""
