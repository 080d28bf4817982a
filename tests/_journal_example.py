"""The run journal's example (examples/email_verification.py), loaded as a module, and its
state machine: shared by the journal's room and the kill room."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from langgraph_effects.journal import RunMachine

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "email_verification.py"


def _load_example() -> ModuleType:
    if str(EXAMPLE.parent) not in sys.path:
        sys.path.insert(0, str(EXAMPLE.parent))  # its sibling _common, as when run as a script
    spec = importlib.util.spec_from_file_location("email_verification_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ex = _load_example()
MACHINE: RunMachine = ex.EMAIL_VERIFICATION
