"""`difference`: a minuend's texts less finitely many subtrahends', run side by side (an
object's "any other key"). Checked by brute force over small alphabets (every text up to a
length, against Python sets and `re`), in C and in Python, and for the guarantee every lazy
DFA gives the mask layer: each state it hands out reaches acceptance."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from structgen.automata import (
    Difference,
    _native_subset,
    compile_ast,
    compile_regex,
    difference,
    literal_node,
    parse_regex,
)
from structgen.automata import dfa as dfa_module


def _texts(alphabet: bytes, length: int) -> list[bytes]:
    out = [b""]
    for n in range(1, length + 1):
        out += [bytes(p) for p in itertools.product(alphabet, repeat=n)]
    return out


def _every_state_lives(dfa: dfa_module.ByteDFA) -> bool:
    """Each built state reaches an accepting one (breadth first over the whole automaton)."""
    count = dfa.build_all()
    succ = [set(dfa.row(s).tolist()) - {-1} for s in range(count)]
    good = {s for s in range(count) if dfa.is_accepting(s)}
    grew = True
    while grew:
        grew = False
        for s in range(count):
            if s not in good and succ[s] & good:
                good.add(s)
                grew = True
    return len(good) == count


@pytest.fixture(params=[True, False], ids=["c", "python"])
def native(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(dfa_module, "NATIVE_UNION", request.param)
    return bool(request.param)


@pytest.mark.parametrize(
    ("minuend", "words"),
    [
        (r'"[a-c]*"', [b'"ab"', b'"a"', b'""', b'"abc"']),
        (r'"[a-c]*"', [b'"b"']),
        (r'"(?:[ab]|\\[nb])*"', [b'"a\\n"', b'"\\b"', b'"ba"']),  # (escapes: several bytes)
        (r"x(?:[ab]c)*y?", [b"x", b"xacy", b"xbcbc"]),  # (a minuend with an optional end)
        (r'"[a-c]*"', []),
    ],
)
def test_the_language_is_the_minuend_less_the_words(
    native: bool, minuend: str, words: list[bytes]
) -> None:
    subtrahends = [compile_ast(literal_node(w.decode())) for w in words]
    dfa = difference(compile_regex(minuend), subtrahends)
    pattern = re.compile(minuend.encode())
    for text in _texts(b'abcxy"\\nb', 6):
        expected = pattern.fullmatch(text) is not None and text not in words
        assert dfa.accepts(text) == expected, text
    assert (dfa._native is not None) == (native and _native_subset.native_subset_available())
    assert _every_state_lives(dfa)


def test_random_words_against_python_sets(native: bool) -> None:
    rng = random.Random(3)
    minuend = compile_regex(r'"[a-d]*"')
    for _ in range(20):
        words = {'"' + "".join(rng.choice("abcd") for _ in range(rng.randrange(5))) + '"'}
        words |= {'"' + "".join(rng.choice("abcd") for _ in range(rng.randrange(5))) + '"'}
        dfa = difference(minuend, [compile_ast(literal_node(w)) for w in sorted(words)])
        for text in _texts(b'abcd"', 6):
            inside = re.fullmatch(rb'"[a-d]*"', text) is not None
            assert dfa.accepts(text) == (inside and text.decode() not in words)
        assert _every_state_lives(dfa)


def test_c_and_python_build_the_same_automaton(monkeypatch: pytest.MonkeyPatch) -> None:
    minuend = r'"(?:[a-c]|\\u[0-9a-f]{4})*"'
    words = ['"a"', '"\\u0061b"', '"cab"']
    built = []
    for flag in (True, False):
        monkeypatch.setattr(dfa_module, "NATIVE_UNION", flag)
        dfa = difference(compile_regex(minuend), [compile_ast(literal_node(w)) for w in words])
        dfa.build_all()
        built.append(dfa)
    rng = random.Random(9)
    for _ in range(3000):
        text = '"' + "".join(
            rng.choice(["a", "b", "c", "\\u0061", "\\u0062"]) for _ in range(rng.randrange(4))
        )
        text += rng.choice(['"', ""])
        data = text.encode()
        assert built[0].accepts(data) == built[1].accepts(data)
    assert built[0].num_states == built[1].num_states


def test_what_it_cannot_do_exactly_is_refused() -> None:
    words = [compile_ast(literal_node('"a"'))]
    # a minuend with a finite future before its end: "ab" could leave nothing alive
    with pytest.raises(ValueError, match="minuend"):
        difference(compile_regex(r'"a"|"ab"x'), words)
    with pytest.raises(ValueError, match="finite"):
        difference(compile_regex(r'"a*"'), [compile_regex(r'"a+"')])


def test_a_difference_node_compiles_and_prints() -> None:
    node = Difference(parse_regex(r'"[a-z]*"'), (literal_node('"id"'), literal_node('"name"')))
    dfa = compile_ast(node)
    assert dfa.accepts(b'"ids"') and dfa.accepts(b'""')
    assert not dfa.accepts(b'"id"') and not dfa.accepts(b'"name"')
    from structgen.automata.regex_text import regex_text

    text = regex_text(node)
    for sample in ['"id"', '"ids"', '"name"', '"nam"', '"x"']:
        assert (re.fullmatch(text, sample) is not None) == dfa.accepts(sample.encode())
