"""The storage rules of ``core.storable`` and the pure decisions added with them (no I/O)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from langgraph_effects.core.model import Evidence, EvidenceKind, reconciled_evidence
from langgraph_effects.core.plan import RENEWAL_RETRY_INITIAL, renewal_delay
from langgraph_effects.core.storable import MAX_SOURCE, MAX_SUMMARY, clip, storable, storable_text

ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()))


@given(ANY_TEXT)
def test_storable_text_encodes_and_has_no_nul(text: str) -> None:
    """Any text, surrogates and NUL included, becomes UTF-8-encodable text without NUL."""
    out = storable_text(text)
    out.encode("utf-8")
    assert "\x00" not in out
    assert storable_text(out) == out


def test_storable_escapes_keys_and_nested_values_only_where_needed() -> None:
    """Keys and nested strings are escaped as their JSON escape; other values stay as they are."""
    value = {"a\x00": ["x\ud800", {"n": 1, "ok": "plain"}], "b": None}
    assert storable(value) == {"a\\u0000": ["x\\ud800", {"n": 1, "ok": "plain"}], "b": None}
    json.dumps(storable(value), ensure_ascii=False).encode("utf-8")


@given(st.text(), st.integers(min_value=40, max_value=5000))
def test_clip_bounds_and_marks(text: str, limit: int) -> None:
    """A clipped text never exceeds its bound, and says so when it was cut."""
    out = clip(text, limit)
    assert len(out) <= limit
    assert out == text or out.endswith(f"[cut: {len(text)} characters in all]")


def test_evidence_is_recordable_as_made() -> None:
    """Evidence escapes and bounds its texts to fit a Resolution; a non-JSON result is text."""
    e = Evidence.confirmed("s\x00" * 5000, result={"x": float("nan")}, source="q" * 999)
    assert len(e.summary) <= MAX_SUMMARY
    assert len(e.source) <= MAX_SOURCE
    assert isinstance(e.result, str)
    e.model_dump_json()


def test_reconciler_answers_other_than_evidence_are_inconclusive() -> None:
    """None or junk from a reconciler is inconclusive evidence naming what came back."""
    for junk in (None, "yes", {"found": True}):
        evidence = reconciled_evidence(junk)
        assert evidence.kind is EvidenceKind.INCONCLUSIVE
        assert type(junk).__name__ in evidence.summary
    real = Evidence.confirmed("found")
    assert reconciled_evidence(real) is real


def test_renewal_retries_soon_and_backs_off_within_the_interval() -> None:
    """After failed renewals the next try comes sooner than the interval, doubling, capped."""
    assert renewal_delay(0, 10.0) == 10.0
    delays = [renewal_delay(n, 10.0) for n in range(1, 12)]
    assert delays[0] == RENEWAL_RETRY_INITIAL
    assert delays == sorted(delays)
    assert max(delays) == 10.0
    assert sum(delays[:5]) < 10.0 / 3  # five tries fit before a third of the lease
