"""An object's other keys (`additionalProperties`): any quoted string whose decoded text is
not a declared name — in every spelling JSON allows (raw, short escapes, `\\uXXXX` in either
case, surrogate pairs), with `json.loads` as the oracle; in generate mode json.dumps' spelling
only."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen import SchemaOptions
from structgen.automata import AutomataLimits, Difference
from structgen.grammar.terminals import terminal_dfa
from structgen.schema import compile_schema

NAMES = ["a", "ab", "j\u00e9/", 'q"\\', "\U0001f600x", "tab\t", ""]


def _spellings(ch: str) -> list[str]:
    """Every way a JSON string may spell `ch`."""
    cp = ord(ch)
    out = []
    if cp >= 0x20 and ch not in '"\\':
        out.append(ch)
    short = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n",
             "\r": "\\r", "\t": "\\t"}  # fmt: skip
    if ch in short:
        out.append(short[ch])
    units = [cp] if cp < 0x10000 else [0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + (cp & 0x3FF)]
    escaped = ["".join(f"\\u{u:04x}" for u in units), "".join(f"\\u{u:04X}" for u in units)]
    out += sorted(set(escaped))
    return out


def _other_keys(mode: str) -> tuple[object, Difference]:
    schema = {
        "type": "object",
        "properties": {name: {"type": "integer"} for name in NAMES},
        "additionalProperties": {"type": "string"},
    }
    grammar = compile_schema(schema, options=SchemaOptions(mode=mode))
    found = [t for t in grammar.terminals if isinstance(t.pattern, Difference)]
    assert len(found) == 1
    return terminal_dfa(found[0], AutomataLimits()), found[0].pattern


def test_no_spelling_of_a_declared_name_is_another_key() -> None:
    dfa, _ = _other_keys("accept")
    for name in NAMES:
        options = [_spellings(ch) for ch in name]
        for parts in itertools.islice(itertools.product(*options), 400):
            text = '"' + "".join(parts) + '"'
            assert json.loads(text) == name
            assert not dfa.accepts(text.encode()), text  # type: ignore[attr-defined]


def test_every_other_key_is_one_in_any_spelling() -> None:
    dfa, _ = _other_keys("accept")
    rng = random.Random(4)
    pieces = ["a", "b", "j", "\u00e9", "/", "\\/", "\\u0061", "\\u00E9", "\\n", "\\t",
              "\\ud83d\\ude00", "x", '\\"', "\\\\", "q", "\t"]  # fmt: skip
    for _ in range(3000):
        body = "".join(rng.choice(pieces) for _ in range(rng.randrange(4)))
        text = f'"{body}"'
        try:
            decoded = json.loads(text)
        except json.JSONDecodeError:  # (a raw tab: not JSON)
            assert not dfa.accepts(text.encode())  # type: ignore[attr-defined]
            continue
        assert dfa.accepts(text.encode()) == (decoded not in NAMES), text  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", NAMES)
def test_generate_mode_offers_json_dumps_spelling_only(name: str) -> None:
    dfa, _ = _other_keys("generate")
    written = json.dumps(name, ensure_ascii=False).encode()  # (structgen writes UTF-8 raw)
    assert not dfa.accepts(written)  # type: ignore[attr-defined]
    assert dfa.accepts(json.dumps(name + "z", ensure_ascii=False).encode())  # type: ignore[attr-defined]
    if name and name.isascii() and name.isalpha():  # (other spellings are not offered)
        assert not dfa.accepts(f'"\\u{ord(name[0]):04x}z"'.encode())  # type: ignore[attr-defined]


def _spell(text: str, rng: random.Random) -> str:
    """`text` as a JSON string, each character in a random one of its spellings."""
    return '"' + "".join(rng.choice(_spellings(ch)) for ch in text) + '"'


_CHARS = st.sampled_from(["a", "b", "é", "/", '"', "\\", "\n", "\U0001f600", "Z", "0"])


@settings(max_examples=60, deadline=None)
@given(
    names=st.lists(st.text(_CHARS, max_size=4), min_size=1, max_size=5, unique=True),
    keys=st.lists(st.text(_CHARS, max_size=4), max_size=6),
    seed=st.integers(0, 2**31),
)
def test_other_keys_are_the_undeclared_names_in_any_spelling(
    names: list[str], keys: list[str], seed: int
) -> None:
    # Random names and keys, each key in a random mix of its spellings: the other-keys
    # automaton accepts it exactly when its decoded text (json.loads) is not a name.
    schema = {
        "type": "object",
        "properties": {name: {"type": "integer"} for name in names},
        "additionalProperties": {"type": "string"},
    }
    grammar = compile_schema(schema, options=SchemaOptions(mode="accept"))
    (other,) = [t for t in grammar.terminals if isinstance(t.pattern, Difference)]
    dfa = terminal_dfa(other, AutomataLimits())
    rng = random.Random(seed)
    for key in [*keys, *names]:
        text = _spell(key, rng)
        assert json.loads(text) == key
        assert dfa.accepts(text.encode()) == (key not in names), text  # type: ignore[attr-defined]
