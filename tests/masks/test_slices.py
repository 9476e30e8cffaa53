"""Token slices: the vocabulary split into groups a state may allow whole, and the proof that it
does. Masks with slices must equal masks without them, on real tokenizers."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from structgen import Compiler, SchemaOptions, automata, clear_caches, compiler
from structgen.engines import grammar as engine
from structgen.errors import StructgenError
from structgen.grammar import terminals
from structgen.masks import _kernel, _walker
from structgen.masks._kernel import NativeWalk, native_available
from structgen.masks._slices import DEFAULT_SLICES, forest_order, plan_slices
from tests.automata.test_properties import PATTERNS as RANDOM_PATTERNS
from tests.automata.test_walk_binding import brute_mask
from tests.conftest import load_tokenizer, load_vocab
from tests.grammar.test_kernels_agree import masks_along

pytestmark = pytest.mark.skipif(not native_available(), reason="the C trie walk is not built")

_PYTHON_CLASS = {
    r"[a-z]": re.compile(r"[a-z]+"),
    r"[A-Za-z0-9_]": re.compile(r"[A-Za-z0-9_]+"),
    r'[^"\\\x00-\x1f\x7f]': re.compile(r'[^"\\\x00-\x1f\x7f]+'),
}


@pytest.fixture(scope="module", params=["llama3_1", "gpt2", "mistral"])
def walks(request: pytest.FixtureRequest) -> tuple[object, NativeWalk, NativeWalk]:
    vocab = load_vocab(request.param)
    return vocab, NativeWalk(vocab.trie, vocab.size), NativeWalk(vocab.trie, vocab.size, None)


def test_groups_follow_python_re(walks: tuple[object, NativeWalk, NativeWalk]) -> None:
    """Each token joins the first slice whose lead it starts with and whose class `re` says the
    rest is made of (within the byte cap), tokens that are not whole UTF-8 text join the
    rest."""
    vocab, _, _ = walks
    lex = vocab.trie.lexicographic_arrays()  # type: ignore[attr-defined]
    plan = plan_slices(lex, DEFAULT_SLICES)
    used = sorted(set(plan.group.tolist()) - {plan.n_groups - 1})
    assert len(used) == plan.n_groups - 1  # groups are numbered densely, the rest last
    blob, offsets, lengths = lex["blob"], lex["offsets"], lex["lengths"]
    expected_index = []
    for i in range(len(lengths)):
        data = bytes(blob[offsets[i] : offsets[i] + lengths[i]])
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        slot = len(DEFAULT_SLICES)
        if text:
            for k, sl in enumerate(DEFAULT_SLICES):
                body = text[len(sl.lead) :] if text.startswith(sl.lead) else None
                fits = bool(body) and _PYTHON_CLASS[sl.char_class].fullmatch(body) is not None
                if fits and (sl.max_bytes is None or len(data) <= sl.max_bytes):
                    slot = k
                    break
        expected_index.append(slot)
    # map slice indices to the plan's dense group numbers (empty slices dropped)
    present = sorted(set(expected_index) - {len(DEFAULT_SLICES)})
    dense = {k: g for g, k in enumerate(present)}
    dense[len(DEFAULT_SLICES)] = len(present)
    assert plan.group.tolist() == [dense[k] for k in expected_index]


def test_forest_keeps_every_token_once(walks: tuple[object, NativeWalk, NativeWalk]) -> None:
    vocab, sliced, plain = walks
    assert sliced.n_groups > 1
    # every text token sits in exactly one group
    total = np.zeros_like(sliced.group_words[0])
    for words in sliced.group_words:
        assert not (total & words).any()
        total |= words
    every, _ = plain.walk(Compiler(vocab).regex(r"(?s:.)*|[\x00-\xff]*")._engine._dfa, 0)  # type: ignore[arg-type,attr-defined]
    assert np.array_equal(total & every, every)
    # the regrouped order is lexicographic within each group, with exact shared prefixes
    lex = vocab.trie.lexicographic_arrays()  # type: ignore[attr-defined]
    plan = plan_slices(lex, DEFAULT_SLICES)
    forest, bounds = forest_order(lex, plan.group)
    tokens = [
        bytes(forest["blob"][o : o + n])
        for o, n in zip(forest["offsets"].tolist(), forest["lengths"].tolist())
    ]
    for g in range(len(bounds) - 1):
        lo, hi = int(bounds[g]), int(bounds[g + 1])
        assert forest["lcp"][lo] == 0
        for i in range(lo + 1, hi):
            a, b = tokens[i - 1], tokens[i]
            assert a <= b
            shared = 0
            while shared < min(len(a), len(b)) and a[shared] == b[shared]:
                shared += 1
            assert forest["lcp"][i] == shared


def test_a_check_implies_only_groups_inside_its_language(
    walks: tuple[object, NativeWalk, NativeWalk],
) -> None:
    """A check that holds proves the groups it implies: every token of each is a string of the
    check's language (its lead, then characters of its class) no longer than the check goes.
    The floor is implied by the checks that are skipped when it fails, and the automata that
    could pass no check are those missing a byte of every root check's first two places."""
    vocab, sliced, _ = walks
    plan = sliced.plan
    assert plan is not None and plan.floor
    lex = vocab.trie.lexicographic_arrays()  # type: ignore[attr-defined]
    blob, offsets, lengths = lex["blob"], lex["offsets"], lex["lengths"]
    texts: dict[int, list[str]] = {}
    for i in range(len(lengths)):
        data = bytes(blob[offsets[i] : offsets[i] + lengths[i]])
        if int(plan.group[i]) < plan.n_groups - 1:
            texts.setdefault(int(plan.group[i]), []).append(data.decode())
    slice_of = {}  # group -> the slice its tokens joined (the first one that fits)
    for g, members in texts.items():
        sample = members[0]
        slice_of[g] = next(
            sl
            for sl in DEFAULT_SLICES
            if sample.startswith(sl.lead)
            and len(sample) > len(sl.lead)
            and _PYTHON_CLASS[sl.char_class].fullmatch(sample[len(sl.lead) :])
            and (sl.max_bytes is None or len(sample.encode()) <= sl.max_bytes)
        )
    for i, own in enumerate(plan.check_group.tolist()):
        language = re.compile(slice_of[own].language)
        for g, members in texts.items():
            if plan.check_implies[i] >> g & 1:
                for text in members:
                    assert len(text.encode()) <= plan.check_len[i]
                    assert language.fullmatch(text), (own, g, text)
    floor = int(plan.check_group[0])
    assert slice_of[floor].char_class == r"[a-z]" and not slice_of[floor].lead
    roots = [
        slice_of[g]
        for i, g in enumerate(plan.check_group.tolist())
        if i == 0 or not plan.check_implies[i] >> floor & 1
    ]
    assert {sl.lead for sl in roots} == {"", " "}
    lower = sum(1 << b for b in range(ord("a"), ord("z") + 1))
    assert set(sliced._needed) == {lower, lower | 1 << ord(" ")}


PATTERNS = [
    # (pattern, text to walk along, groups a state along it must prove, at least)
    (r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"', '"héllo wörld, ça va? 日本語"', 2),
    (r"[A-Za-z_][A-Za-z0-9_]*", "snake_case_Identifier42", 1),
    (r".{0,300}", "The quick brown fox — jumps over the lazy dog. " * 3, 2),
    (r'"[^"\\]{0,6}"', '"abcdef"', 1),
    (r"[a-z]{1,40}", "abcdefghijklmnopqrstuvwxyz", 1),
    (r"\d+(\.\d+)?", "3.14159", 0),
    # a domain label (no `_`: the word slices fail, the lowercase ones hold)
    (r"[a-z0-9-]{1,63}(\.[a-z0-9-]{1,63})*", "example.com", 1),
    # a space then lowercase letters (after a keyword): the floor (lowercase letters) fails
    # there, the space-led slices are checked all the same
    (r"(SELECT|FROM) [a-z_]+", "SELECT snake_case_name", 1),
    (r" [a-z_]{1,30}", " abcdef", 1),
    # one character short of a slice's class: the slice must not be proved (the character
    # must still occur in the pattern, or its alphabet rules the check out at once)
    (r' ?[^ "\\\x00-\x1f]*', "no_spaces-here!", 1),
    (r"0?[1-9A-Za-z_]*", "abc_XYZ", 1),
    (r"(name|namespace|[^\"\\]{3,})\"", 'namespaces"', 1),
]


@pytest.mark.parametrize(("pattern", "text", "proved"), PATTERNS)
def test_sliced_masks_equal_plain_masks(
    walks: tuple[object, NativeWalk, NativeWalk], pattern: str, text: str, proved: int
) -> None:
    """Along a match: the skipped groups' tokens are all allowed (the proof is sound), and the
    sliced walk, with or without skipping, gives the whole vocabulary walk's mask."""
    vocab, sliced, plain = walks
    compiled = Compiler(vocab).regex(pattern)
    dfa = compiled._engine._dfa  # type: ignore[attr-defined]
    state = dfa.start
    best = 0
    for byte in text.encode():
        skip = sliced.contained_groups(dfa, state)
        want, _ = plain.walk(dfa, state)
        got, _ = sliced.walk(dfa, state, skip=skip)
        assert np.array_equal(got, want), (pattern, state, bin(skip))
        unskipped, _ = sliced.walk(dfa, state)
        assert np.array_equal(unskipped, want)
        for g in range(sliced.n_groups):
            if skip >> g & 1:
                assert not (sliced.group_words[g] & ~want).any()  # sound: all allowed
        best = max(best, bin(skip).count("1"))
        state = dfa.next_state(state, byte)
        assert state >= 0
    assert best >= proved  # the optimisation is exercised where it should be


@pytest.mark.parametrize("budget", [("MAX_SLICE_BUILDS", 1), ("MAX_SLICE_BUILD_SECONDS", 1e-9)])
def test_a_proof_that_gives_up_is_still_exact(
    walks: tuple[object, NativeWalk, NativeWalk],
    monkeypatch: pytest.MonkeyPatch,
    budget: tuple[str, float],
) -> None:
    """With almost no row budget (rows or time) the proofs give up (fewer groups skipped),
    masks stay exact."""
    vocab, sliced, plain = walks
    monkeypatch.setattr(_kernel, *budget)
    compiled = Compiler(vocab).regex(r"[^\n]{0,200}")
    dfa = compiled._engine._dfa  # type: ignore[attr-defined]
    state = dfa.start
    for byte in b"a longer line of text":
        skip = sliced.contained_groups(dfa, state)
        got, _ = sliced.walk(dfa, state, skip=skip)
        want, _ = plain.walk(dfa, state)
        assert np.array_equal(got, want)
        state = dfa.next_state(state, byte)


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "namespace": {"type": "string", "maxLength": 12},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "count": {"type": "integer"},
    },
}
INSTANCE = (
    '{"name": "a name with spaces", "namespace": "kube-system",'
    ' "labels": {"app": "web", "tier": "frontend-ü"}, "count": 3, "other key": [1, "x"]}'
)


def test_grammar_masks_with_and_without_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """A JSON Schema's lexer states (unions of terminals, proved per terminal): every mask along
    an instance is the same with the sliced vocabulary as with the plain one."""
    # (accept mode: the instance has an unlisted key)
    _assert_sliced_masks_equal_plain(SCHEMA, INSTANCE, monkeypatch)


def _assert_sliced_masks_equal_plain(
    schema: dict[str, object], text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every mask along `text` (Llama-3.1, accept mode) is the same with the sliced vocabulary
    as with the plain one, each run from fresh lexers and terminal automata."""
    vocab = load_vocab("llama3_1")
    walks = iter((NativeWalk(vocab.trie, vocab.size), NativeWalk(vocab.trie, vocab.size, None)))

    def use_next_walk() -> None:
        monkeypatch.setitem(_walker._NATIVE, vocab.fingerprint, next(walks))

    _assert_fresh_runs_agree(schema, text, use_next_walk, use_next_walk)


def _assert_fresh_runs_agree(
    schema: dict[str, object], text: str, *set_ups: Callable[[], None]
) -> None:
    """The masks along `text` (Llama-3.1, accept mode) are the same after each set-up, each run
    from fresh compiled grammars, lexers and terminal automata."""
    vocab = load_vocab("llama3_1")
    ids = load_tokenizer("llama3_1").encode(text, add_special_tokens=False)
    runs = []
    for set_up in set_ups:
        set_up()
        compiler._CACHE.clear()
        engine._UNIONS.clear()  # the shared lexers keep their walk results: start afresh
        terminals.clear_terminal_automata()
        compiled = Compiler(vocab).json_schema(schema, options=SchemaOptions(mode="accept"))
        runs.append(masks_along(compiled, ids, vocab.size))
    compiler._CACHE.clear()
    engine._UNIONS.clear()
    first = runs[0]
    assert len(first) == len(ids)
    for other in runs[1:]:
        assert len(other) == len(first)
        for k, (a, b) in enumerate(zip(first, other, strict=True)):
            assert np.array_equal(a, b), k


def test_small_vocabulary_against_brute_force() -> None:
    """A synthetic vocabulary with tokens of every kind (an empty one too): at every state along
    several patterns, the sliced mask equals reading each token's bytes by hand."""
    from structgen.vocab import Vocabulary

    words = [b"a", b"ab", b"abc", b"name", b"names", b"x_1", b"0", b"42", b"_", b"Zz"]
    json_like = [b" a", b"a b", b"\xc3\xa9", b"caf\xc3\xa9", b"a.b-c", b"12345678901234567890x"]
    rest = [b'"', b'a"', b"\\", b"\n", b"a\nb", b"\xc3", b"\xa9x", b""]
    tokens: list[bytes | None] = [*words, *json_like, *rest, None]
    vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1])
    sliced = NativeWalk(vocab.trie, vocab.size)
    assert sliced.n_groups > 1
    for pattern in [r"[^\n]*", r'"[^"\\]*"', r"\w+", r"[a-z]{0,3}", r"(name|[a-z_0-9 ]*)x?"]:
        dfa = Compiler(vocab).regex(pattern)._engine._dfa  # type: ignore[attr-defined]
        state = dfa.start
        for byte in b"name x":
            if state < 0:
                break
            skip = sliced.contained_groups(dfa, state)
            got, _ = sliced.walk(dfa, state, skip=skip)
            assert np.array_equal(got, brute_mask(vocab, dfa, state)), (pattern, state, bin(skip))
            state = dfa.next_state(state, byte)


def test_slice_memos_stay_in_their_process() -> None:
    """Memos keyed by this process's vocabulary layouts must not travel with a pickled DFA
    (another process numbers its layouts afresh)."""
    import pickle

    from structgen.automata import compile_regex

    dfa = compile_regex("[a-z]+")
    dfa._slice_memos = {0: {0: 0b111}}  # type: ignore[attr-defined]
    dfa._slices_possible = {1: True}  # type: ignore[attr-defined]
    copy = pickle.loads(pickle.dumps(dfa))
    assert not hasattr(copy, "_slice_memos")
    assert not hasattr(copy, "_slices_possible")
    assert copy.accepts(b"abc")


@pytest.fixture(scope="module")
def llama_walks() -> tuple[object, NativeWalk, NativeWalk]:
    vocab = load_vocab("llama3_1")
    return vocab, NativeWalk(vocab.trie, vocab.size), NativeWalk(vocab.trie, vocab.size, None)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_property_sliced_masks_equal_plain_masks(
    llama_walks: tuple[object, NativeWalk, NativeWalk], data: st.DataObject
) -> None:
    """Random patterns of the supported syntax (the automata property tests' strategy, plus
    open-ended classes that make slices provable), at the states along a random matching
    string: the sliced walk gives the plain walk's mask."""
    vocab, sliced, plain = llama_walks
    base = data.draw(RANDOM_PATTERNS, label="pattern")
    pattern = data.draw(
        st.sampled_from(
            [
                base,
                f"(?:{base}|[^\\n])*",
                f"{base}\\w*",
                f"(?:{base}).{{0,40}}",
                # one character short of a slice class
                f"0?(?:{base}|[1-9A-Za-z_])*",
                f' ?(?:{base}|[^\\n "])*',
            ]
        ),
        label="wrapped",
    )
    try:
        compiled = re.compile(pattern)
        dfa = Compiler(vocab).regex(pattern)._engine._dfa  # type: ignore[attr-defined]
    except (re.error, StructgenError):
        assume(False)
        return
    text = data.draw(
        st.from_regex(compiled, fullmatch=True).filter(lambda s: s.isprintable()), label="text"
    )
    state = dfa.start
    for byte in text.encode()[:12]:
        skip = sliced.contained_groups(dfa, state)
        got, _ = sliced.walk(dfa, state, skip=skip)
        want, _ = plain.walk(dfa, state)
        assert np.array_equal(got, want), (pattern, state, bin(skip))
        state = dfa.next_state(state, byte)
        if state < 0:
            break


PROBED = [
    # (pattern, text, rows the first state's proofs build with the probe against the search
    # alone): counted strings shorter than the longest tokens (the long slice fails at the
    # bound, where the probe gets first: fewer), unbounded ones and long counts (nothing
    # fails: the same), and classes that fail a few bytes in, off the probe's path (the probe
    # goes its whole depth first: more, within the same row budget)
    (r'[^"\\\x00-\x1f]{0,40}', "Ada Lovelace wrote the first program", "fewer"),
    (r'[^"\\\x00-\x1f]{0,100}', "Ada Lovelace wrote the first program", "fewer"),
    (r".{0,300}", "The quick brown fox — jumps over the lazy dog. " * 2, "same"),
    (r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])*"', '"unbounded"', "same"),
    (r"[ -~]{0,60}", "printable ASCII only, no UTF-8 at all: ~!@#", "more"),
    (r"[^é]{0,90}", "everything but one letter, " * 2, "more"),
]


@pytest.mark.parametrize(("pattern", "text", "rows"), PROBED)
def test_the_probe_answers_as_the_search(
    pattern: str, text: str, rows: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long slice's check first follows one path (`SLICE_PROBE_ABOVE`): along a match, every
    state's proved groups are those of the breadth-first search alone (each on its own fresh,
    lazily built automaton); the rows the first state's proofs build are as documented."""
    vocab = load_vocab("llama3_1")
    walk = NativeWalk(vocab.trie, vocab.size)
    answers = []
    for probe_above in (_kernel.SLICE_PROBE_ABOVE, 1 << 30):
        monkeypatch.setattr(_kernel, "SLICE_PROBE_ABOVE", probe_above)
        clear_caches()
        dfa = automata.compile_regex(pattern)
        state, found, built = dfa.start, [], 0
        for byte in text.encode():
            found.append(walk._contained(dfa, state))
            if not built:
                built = int((dfa.table[: dfa.num_states] != -2).any(axis=1).sum())
            state = dfa.next_state(state, byte)
            assert state >= 0
        answers.append((found, built))
    (probed, probed_rows), (searched, searched_rows) = answers
    assert not any((a | b) & _kernel._GAVE_UP for a, b in zip(probed, searched))
    assert probed == searched
    relation = {-1: "fewer", 0: "same", 1: "more"}[
        (probed_rows > searched_rows) - (probed_rows < searched_rows)
    ]
    assert relation == rows, (probed_rows, searched_rows)


def test_counted_strings_share_proofs_far_from_their_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long string (`minLength`/`maxLength` counted, not expanded): the slice proofs of states
    far from both bounds are shared (one class), and every mask along a string that crosses
    both bounds' neighbourhoods equals the mask without slices."""
    from structgen.automata.counted import CountedSource

    schema = {"type": "string", "minLength": 250, "maxLength": 1400}
    text = ("lorem ipsum dolor sit amet, " * 60)[:1390]
    _assert_sliced_masks_equal_plain(schema, f'"{text}"', monkeypatch)
    vocab = load_vocab("llama3_1")
    source = CountedSource(Compiler(vocab).regex("[a-z]")._engine._dfa, 250, 1400)  # type: ignore[attr-defined]
    depth = 128
    far = {source.bounded_key((k, -1), depth) for k in range(400, 1200)}
    assert len(far) == 1
    near = {source.bounded_key((k, -1), depth) for k in range(1200, 1401)}
    assert len(near) == depth + 2  # hi - k from 0 to depth + 1 (capped)
    low = {source.bounded_key((k, -1), depth) for k in range(0, 250)}
    assert len(low) == depth + 1  # lo - k from 1 to depth + 1 (capped)


def test_one_call_continued_walks_and_accepting_components(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`continue_spans` (a continued walk and its packed events in one C call),
    `union_accepted` (a lexer state's accepting terminals in one call), `union_needs` and
    `union_set_part` (every missing component row at once, a component's fields in one call),
    `union_intern` and `or_words` give the same masks along an instance as the calls they replace
    (`walk_spans` + `pack_events`, the ctypes queries, numpy's scatter-OR of the words set)."""
    from structgen.automata import _native_subset
    from structgen.engines import grammar as grammar_engine

    if _kernel._CONTINUE_SPANS is None or _native_subset._UNION_ACCEPTED is None:
        pytest.skip("the extensions are built without the one-call functions")

    def two_calls() -> None:
        monkeypatch.setattr(_kernel, "_CONTINUE_SPANS", None)
        monkeypatch.setattr(_native_subset, "_UNION_ACCEPTED", None)
        monkeypatch.setattr(_native_subset, "_UNION_NEEDS", None)
        monkeypatch.setattr(_native_subset, "_UNION_SET_PART", None)
        monkeypatch.setattr(_native_subset, "_UNION_INTERN", None)
        monkeypatch.setattr(grammar_engine, "_OR_WORDS", None)

    _assert_fresh_runs_agree(SCHEMA, INSTANCE, lambda: None, two_calls)
