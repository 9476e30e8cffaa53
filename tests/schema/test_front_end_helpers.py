"""The schema front end's small helpers keep their meaning where they were made faster: JSON
pointers, subschemas compared by value, `$ref`s resolved once per (ref, base), and the
characters' spellings (a dict in front of `encode_class`, emptied by `clear_caches`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import structgen
from structgen._json_data import escape_pointer, pointer
from structgen.automata import concat
from structgen.errors import SchemaError
from structgen.schema import _strings
from structgen.schema._recent import Recent
from structgen.schema._refs import RefIndex, Sub
from structgen.schema._strings import encode_class, literal_body


@given(st.text(), st.lists(st.one_of(st.text(), st.integers(min_value=0))))
def test_pointer_escapes_each_token(base: str, tokens: list[str | int]) -> None:
    expected = base + "".join("/" + escape_pointer(str(t)) for t in tokens)
    assert pointer(base, *tokens) == expected


def test_pointer_rfc6901_examples() -> None:
    assert pointer("", "a/b") == "/a~1b"
    assert pointer("", "m~n") == "/m~0n"
    assert pointer("/x", 0, "~/") == "/x/0/~0~1"


def test_subschemas_compare_and_hash_by_value() -> None:
    a, b = Sub("s", "/p", "u"), Sub("s", "/p", "u")
    assert a == b and hash(a) == hash(b) and a is not b
    assert a != Sub("s", "/q", "u") and a != ("s", "/p", "u")
    assert {a: 1}[b] == 1
    assert repr(a) == "Sub(schema='s', ptr='/p', base='u')"


def test_refs_are_resolved_once_per_ref_and_base() -> None:
    root = {"$defs": {"a": {"type": "string"}, "b": {"$id": "http://x/b", "type": "integer"}}}
    index = RefIndex(root, legacy=False)
    top = index.root_sub()
    first = index.resolve("#/$defs/a", top)
    assert first.schema == {"type": "string"} and first.ptr == "/$defs/a"
    assert index.resolve("#/$defs/a", top) is first
    assert index.resolve("http://x/b", top).schema["type"] == "integer"
    # a failure is not remembered: it raises every time, at the place of each `$ref`
    for place in ("/p", "/q"):
        with pytest.raises(SchemaError) as info:
            index.resolve("#/$defs/missing", Sub(root, place, ""))
        assert info.value.pointer == f"{place}/$ref"


@given(st.text(max_size=12))
def test_literal_bodies_spell_each_character_as_encode_class(text: str) -> None:
    structgen.clear_caches()
    expected = concat([encode_class(((ord(c), ord(c)),)) for c in text]) if text else None
    body = literal_body(text)
    if expected is not None:
        assert body == expected


def test_clear_caches_forgets_character_spellings() -> None:
    literal_body("spelled")
    assert _strings._CHAR_SPELLINGS
    structgen.clear_caches()
    assert not _strings._CHAR_SPELLINGS


def test_recent_keeps_what_is_used_within_two_generations() -> None:
    recent: Recent[int, str] = Recent(4)  # (two generations of two)
    assert recent.put(1, "a") == "a" and recent.put(1, "other") == "a"
    recent.put(2, "b")
    recent.put(3, "c")  # (a new generation: 1 and 2 are the old one)
    assert recent.get(1) == "a"  # (read: moved to the new generation, beside 3)
    recent.put(4, "d")  # (another: 1 and 3 old, 2 dropped)
    assert recent.get(2) is None and recent.get(3) == "c" and len(recent) <= 4
    with pytest.raises(ValueError):
        Recent(1)


def test_clear_caches_empties_every_recent_map() -> None:
    recent: Recent[str, int] = Recent(8)
    recent.put("x", 1)
    structgen.clear_caches()
    assert recent.get("x") is None and len(recent) == 0
