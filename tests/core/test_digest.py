"""Canonical JSON: RFC 8785's bytes, and ``InvalidInput`` for whatever is not plain JSON."""

from __future__ import annotations

import collections
import enum
import hashlib
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from langgraph_effects.core.digest import canonical_json, payload_digest
from langgraph_effects.core.ids import candidate_operation_id, operation_id
from langgraph_effects.errors import InvalidInput


@pytest.mark.parametrize("value", [{"\ud800": 1}, {"a": {"x\udfff": "y"}}, ["\ud83d"]])
def test_a_lone_surrogate_is_refused_as_invalid_input(value: Any) -> None:
    """A lone surrogate, in a key as in a string value, is not JSON text: ``InvalidInput``."""
    with pytest.raises(InvalidInput):
        canonical_json(value)


# -- the fast path writes rfc8785's bytes, or leaves the value to it -------------------

_texts = st.text(
    st.one_of(
        st.characters(max_codepoint=0x7F),  # ASCII, controls included
        st.characters(codec=None, exclude_categories=()),  # any code point, surrogates too
        st.sampled_from(["\x00", "\x1f", "\x7f", '"', "\\", "\u2028", "\uffff", "\U0001f600"]),
    ),
    max_size=8,
)
_ints = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([2**53 - 1, 2**53, -(2**53) + 1, -(2**53), 0, -1]),
)
_sorting = st.text(st.sampled_from(["a", "\ue000", "\uff61", "\U0001f600"]), max_size=2)
"""Keys whose code-point order differs from their UTF-16 order (JCS sorts by UTF-16)."""
_keys = st.one_of(_texts, _sorting, st.integers(-3, 3), st.none(), st.booleans(), st.floats())
_values = st.recursive(
    st.one_of(st.none(), st.booleans(), _ints, st.floats(), _texts),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(_keys, inner, max_size=4),
    ),
    max_leaves=24,
)

_json_texts = st.text(
    st.one_of(
        st.characters(max_codepoint=0x7F), st.characters(codec="utf-8"), st.just("\U0001f600")
    ),
    max_size=8,
)
_json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**53) + 1, 2**53 - 1), _json_texts),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(_json_texts, _sorting), inner, max_size=5),
    ),
    max_leaves=24,
)
"""JSON without floats: what the fast path writes itself, unless a key is not ASCII."""


def _rfc8785(value: Any) -> bytes | None:
    """``rfc8785.dumps(value)``, None where it refuses."""
    try:
        return rfc8785.dumps(value)
    except (ValueError, TypeError, RecursionError):
        return None


def _ours(value: Any) -> bytes | None:
    try:
        return canonical_json(value)
    except InvalidInput:
        return None


@given(_values)
@settings(max_examples=1000)
def test_canonical_json_writes_rfc8785s_bytes(value: Any) -> None:
    """For any JSON-like value, ``canonical_json`` writes ``rfc8785.dumps``'s bytes, or
    both refuse it (``InvalidInput``, exactly when rfc8785 raises)."""
    assert _ours(value) == _rfc8785(value)


@given(_json_values)
@settings(max_examples=1000)
def test_canonical_json_writes_rfc8785s_bytes_for_json(value: Any) -> None:
    """For JSON text (no float), ``canonical_json`` writes ``rfc8785.dumps``'s bytes."""
    assert canonical_json(value) == rfc8785.dumps(value)


class _Level(enum.IntEnum):
    HIGH = 3


class _Color(enum.StrEnum):
    RED = "red"


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for n in range(depth):
        value = {"k": [value, n]}
    return value


_cycle: list[Any] = []
_cycle.append(_cycle)


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        2**53 - 1,
        -(2**53) + 1,
        "",
        '\x00\x08\t\n\x0b\x0c\r\x1f\x7f"\\/',
        "é ü 中 \u2028 \U0001f600",
        {"b": 1, "a": 2, "B": 3, "": 0, "aa": [], "a\x00": {}},
        {"\uff61": 1, "\U0001f600": 2},  # code-point order differs from UTF-16 order
        {"é": 1, "e": 2, "z": 3},
        ("tuple", [1, ("x", None)]),
        {"t": (), "d": {}, "l": []},
        1.0,
        [0.1, -0.0, 1e21, 1e-7, 2.5],
        _Level.HIGH,
        {"level": _Level.HIGH, "color": _Color.RED},
        collections.OrderedDict([("b", 1), ("a", 2)]),
        _nested(63),
        _nested(64),
        _nested(200),
    ],
)
def test_canonical_json_matches_rfc8785_on_chosen_values(value: Any) -> None:
    """Escapes, key order, integer bounds, floats, subclasses and nesting: rfc8785's bytes."""
    expected = rfc8785.dumps(value)
    assert canonical_json(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        2**53,
        -(2**53),
        {"n": [2**64]},
        float("nan"),
        {"f": float("inf")},
        {1: "x"},
        {None: "x"},
        {"a": {b"k": 1}},
        {"s": {1, 2}},
        b"bytes",
        object(),
        "\udc80",
        {"\udc80": 1},
        _cycle,
        _nested(5000),
    ],
)
def test_canonical_json_refuses_what_rfc8785_refuses(value: Any) -> None:
    """Integers beyond 2**53, NaN, non-string keys, other types, lone surrogates, cycles and
    nesting too deep are refused with ``InvalidInput``, as rfc8785 refuses them."""
    assert _rfc8785(value) is None
    with pytest.raises(InvalidInput):
        canonical_json(value)


# -- stored values: digests and ids are what they were ---------------------------------

_TICKET = {
    "title": 'Drucker "kaputt"\n',
    "priority": "high",
    "n": 3,
    "tags": ["a", "é"],
    "meta": None,
    "ok": True,
}


def test_digests_and_ids_are_the_ones_already_stored() -> None:
    """A digest and the ids derived from it, pinned as written before the fast path: the
    records in existing ledgers are met again."""
    digest = payload_digest("tickets.create", 1, "queue-7", _TICKET)
    assert digest == "b1d7ef27a8855406ee52aaaec36935e44dbe893f0d7eabb6eae522ac17706ad5"
    thread = {"tenant_id": "acme", "workflow_id": "thread-1", "action": "tickets.create"}
    assert (
        candidate_operation_id(**thread, payload_digest=digest, index=2)
        == "op-r2kfotvxszjmxtm2shhjwjniju6raizk"
    )
    assert (
        operation_id(**thread, tool_call_id="call_0", payload_digest=digest)
        == "op-fqvvxv3ofkdxmn5ebvo7hbjqqggbgeel"
    )
    assert (
        payload_digest("tickets.create", 1, None, {"amount": 12.5}, key=b"k" * 16)
        == "hmac:3e6df169268b0a0bded893e6aa15a6306693baea9d6959b8668aee6c1075bb1a"
    )


@given(_json_values, _json_texts, st.one_of(st.none(), _json_texts), st.integers(1, 9))
def test_a_digest_is_sha256_of_rfc8785s_envelope(
    payload: Any, action: str, target: str | None, version: int
) -> None:
    """``payload_digest`` is SHA-256 of rfc8785's text of the whole envelope."""
    envelope = {"action": action, "payload": payload, "target": target, "version": version}
    expected = hashlib.sha256(rfc8785.dumps(envelope)).hexdigest()
    assert payload_digest(action, version, target, payload) == expected
