"""The persistent compile cache: grammars saved in a directory come back after a restart with
the same masks, and a file that is corrupt, truncated, foreign or tampered with is never
trusted (it is compiled again and overwritten)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import structgen
import structgen.compile_cache
from structgen import CompiledGrammar, Compiler, Matcher, SchemaOptions, allocate_bitmask
from structgen.automata import AutomataLimits, compile_regex
from structgen.automata.snapshot import (
    _CHECK_SNAPSHOTS,
    UNBUILT,
    DFASnapshot,
    SnapshotBatch,
    SnapshotError,
    SnapshotSource,
    restore_dfa,
    snapshot_dfa,
)
from structgen.compile_cache import MAGIC, CompileCache, key_text
from structgen.engines.grammar import PENDING_START
from structgen.grammar.earley import EarleyGrammar
from structgen.grammar.ir_codec import (
    IRDataError,
    grammar_from_data,
    grammar_to_data,
    terminal_from_data,
)
from structgen.grammar.lark_frontend import load_builtin
from structgen.schema import SchemaOptions as _Options
from structgen.schema import compile_schema
from structgen.vocab import Vocabulary
from tests.conftest import load_vocab

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "email": {"type": "string", "format": "email"},
        "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,5}$"},
        "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}},
    },
    "required": ["name", "code"],
}
PERSON_TEXT = (
    '{"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "code": "EN-18150",'
    ' "tags": ["bb", "a"]}'
)


def _walk(grammar: CompiledGrammar, tokens: list[int]) -> list[bytes]:
    """The mask before each token of `tokens` (and after the last), as bytes."""
    matcher = Matcher(grammar)
    bitmask = allocate_bitmask(1, grammar.vocab.size, backend="numpy")
    out = []
    for token in [*tokens, None]:
        matcher.fill_bitmask(bitmask)
        out.append(bitmask.tobytes() + bytes([matcher.can_terminate()]))
        if token is None:
            break
        assert matcher.accept_token(token), token
    return out


def _random_tokens(grammar: CompiledGrammar, seed: int, steps: int = 40) -> list[int]:
    rng = random.Random(seed)
    matcher = Matcher(grammar)
    bitmask = allocate_bitmask(1, grammar.vocab.size, backend="numpy")
    tokens: list[int] = []
    for _ in range(steps):
        matcher.fill_bitmask(bitmask)
        bits = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")
        allowed = np.flatnonzero(bits[: grammar.vocab.size])
        if not len(allowed):
            break
        token = int(rng.choice(allowed))
        tokens.append(token)
        matcher.accept_token(token)
        if matcher.is_terminated():
            break
    return tokens


def _loaded(compile_once: Any, cache: Path) -> CompiledGrammar:
    """Compile with the cache (saving), forget everything in memory, compile again (loading)."""
    compile_once(Compiler(_vocab_of(compile_once), cache_dir=cache))
    structgen.clear_caches()
    grammar: CompiledGrammar = compile_once(Compiler(_vocab_of(compile_once), cache_dir=cache))
    return grammar


def _person_loaded(tmp_path: Path) -> tuple[CompiledGrammar, list[int], list[bytes]]:
    """PERSON in accept mode over Llama-3.1: the grammar loaded from `tmp_path`, the sample
    text's tokens, and the masks a compiled grammar gives along them (`_walk`)."""
    vocab = load_vocab("llama3_1")
    case = _Case(vocab, lambda c: c.json_schema(PERSON, options=SchemaOptions(mode="accept")))
    tokens = load_vocab_tokens("llama3_1", PERSON_TEXT)
    expected = _walk(case(Compiler(vocab)), tokens)
    structgen.clear_caches()
    return _loaded(case, tmp_path), tokens, expected


def _vocab_of(compile_once: Any) -> Vocabulary:
    vocab: Vocabulary = compile_once.vocab
    return vocab


class _Case:
    """A compile call, with the vocabulary it runs against."""

    def __init__(self, vocab: Vocabulary, call: Any) -> None:
        self.vocab = vocab
        self.call = call

    def __call__(self, compiler: Compiler) -> CompiledGrammar:
        grammar: CompiledGrammar = self.call(compiler)
        return grammar


def _cases(vocab: Vocabulary) -> dict[str, _Case]:
    return {
        "schema-generate": _Case(vocab, lambda c: c.json_schema(PERSON)),
        "schema-accept": _Case(
            vocab, lambda c: c.json_schema(PERSON, options=SchemaOptions(mode="accept"))
        ),
        "json": _Case(vocab, lambda c: c.json()),
        "lark": _Case(vocab, lambda c: c.grammar(load_builtin("json"))),
        "ebnf": _Case(vocab, lambda c: c.ebnf('root ::= "[" num ("," num)* "]"\nnum ::= [0-9]+')),
        "structural-tag": _Case(
            vocab,
            lambda c: c.structural_tag(
                {
                    "type": "structural_tag",
                    "format": {
                        "type": "triggered_tags",
                        "triggers": ["<f"],
                        "tags": [
                            {
                                "begin": "<f>",
                                "content": {"type": "json_schema", "json_schema": PERSON},
                                "end": "</f>",
                            }
                        ],
                    },
                }
            ),
        ),
    }


@pytest.fixture(autouse=True)
def _fresh_caches() -> Any:
    structgen.clear_caches()
    yield
    structgen.clear_caches()


class TestRoundTrip:
    @pytest.mark.parametrize(
        "kind", ["schema-generate", "schema-accept", "json", "lark", "ebnf", "structural-tag"]
    )
    def test_loaded_grammar_gives_the_compiled_masks(self, kind: str, tmp_path: Path) -> None:
        vocab = load_vocab("gpt2")
        case = _cases(vocab)[kind]
        fresh = case(Compiler(vocab))
        walks = [_random_tokens(fresh, seed) for seed in range(3)]
        expected = [_walk(fresh, tokens) for tokens in walks]
        structgen.clear_caches()
        loaded = _loaded(case, tmp_path)
        disk = Compiler(vocab, cache_dir=tmp_path).disk_cache
        assert disk is not None and disk.hits >= 1
        assert loaded.fingerprint == fresh.fingerprint
        assert loaded.to_text() == fresh.to_text()
        for tokens, masks in zip(walks, expected):
            assert _walk(loaded, tokens) == masks

    def test_a_sample_text_is_accepted_to_its_end(self, tmp_path: Path) -> None:
        loaded, tokens, expected = _person_loaded(tmp_path)
        assert _walk(loaded, tokens) == expected
        assert expected[-1][-1] == 1  # the engine may stop at the end

    def test_leaving_the_saved_rows_rebuilds_the_automaton(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(structgen.compile_cache, "BUILD_AHEAD_STATES", 1)
        vocab = load_vocab("gpt2")
        schema = {"type": "string", "pattern": "^([a-c]{2}[0-9]){2,6}x$"}
        case = _Case(vocab, lambda c: c.json_schema(schema))
        fresh = case(Compiler(vocab))
        text = '"ab1ca2bb3cc4aa5x"'
        tokens = [t for t in vocab_encode(vocab, text)]
        expected = _walk(fresh, tokens)
        structgen.clear_caches()
        loaded = _loaded(case, tmp_path)
        assert _walk(loaded, tokens) == expected
        sources = [dfa._source for dfa in loaded._engine.terminal_dfas]
        assert any(isinstance(s, SnapshotSource) and s.rebuilt for s in sources)

    def test_saved_rows_spare_the_next_steps_a_rebuild(self, tmp_path: Path) -> None:
        """Regex terminals are saved with their first states built: a loaded grammar walks a
        whole object (its keys and separators were not read by the first mask) with no
        terminal saved whole built again (the large ones, a format, "any other key", are saved
        in part)."""
        loaded, tokens, expected = _person_loaded(tmp_path)
        assert _walk(loaded, tokens) == expected
        sources = [dfa._source for dfa in loaded._engine.terminal_dfas]  # type: ignore[attr-defined]
        snapshots = [s for s in sources if isinstance(s, SnapshotSource)]
        whole = [s for s in snapshots if (s._snapshot.rows[:, 0] != UNBUILT).all()]
        assert len(whole) >= len(snapshots) // 2
        assert not any(s.rebuilt for s in whole)

    def test_key_chains_are_saved_whole(self, tmp_path: Path) -> None:
        """An object's key automata (literal chains) are saved with their rows built: walking
        the whole object rebuilds none of them from the schema."""
        from structgen.automata.chains import DeferredChainSource, LiteralSource

        loaded, tokens, expected = _person_loaded(tmp_path)
        assert _walk(loaded, tokens) == expected
        sources = [dfa._source for dfa in loaded._engine.terminal_dfas]  # type: ignore[attr-defined]
        rebuilt = [s for s in sources if isinstance(s, SnapshotSource) and s.rebuilt]
        chains = (LiteralSource, DeferredChainSource)
        assert not any(isinstance(s._fresh._source, chains) for s in rebuilt)

    def test_restored_automata_share_an_unbuilt_table_until_their_first_row(
        self, tmp_path: Path
    ) -> None:
        """A load restores every terminal's automaton; those no step has read yet share one
        read-only table of unbuilt rows (counted as nobody's memory), and the first row read
        gives an automaton a table of its own."""
        loaded, tokens, expected = _person_loaded(tmp_path)
        dfas = loaded._engine.terminal_dfas  # type: ignore[attr-defined]
        restored = [d for d in dfas if isinstance(d._source, SnapshotSource)]
        shared = [d for d in restored if not d._table.flags.writeable]
        assert len(shared) >= 2
        assert len({id(d._table) for d in shared if len(d._table) == len(shared[0]._table)}) == 1
        assert all(d.memory_bytes() < d._table.nbytes for d in shared)
        assert _walk(loaded, tokens) == expected
        read = [d for d in shared if d._table.flags.writeable]
        assert read and all((d._table != UNBUILT).any() for d in read)

    def test_the_first_row_read_copies_every_saved_row(self, tmp_path: Path) -> None:
        """A restored automaton's table of its own comes with all its saved rows, so C reads
        them without asking Python for each; its unsaved rows stay unbuilt."""
        loaded, tokens, expected = _person_loaded(tmp_path)
        dfas = loaded._engine.terminal_dfas  # type: ignore[attr-defined]
        restored = [d for d in dfas if isinstance(d._source, SnapshotSource)]
        shared = [d for d in restored if not d._table.flags.writeable]
        checked = 0
        for dfa in shared:
            rows = dfa._source.saved_rows()
            saved = rows[:, 0] != UNBUILT
            if not saved[dfa.start]:
                continue
            checked += 1
            dfa.row(dfa.start)  # (a saved row: the first read)
            count = len(rows)
            assert bytes(dfa._built[:count]) == saved.astype(np.uint8).tobytes()
            table = dfa._table[:count]
            assert np.array_equal(table[saved], rows[saved].take(dfa.byte_classes, axis=1))
            assert (table[~saved] == UNBUILT).all()
            assert not dfa._source.rebuilt
        assert checked >= 2
        assert _walk(loaded, tokens) == expected

    def test_composites_are_built_again_from_their_saved_parts(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An object's "any other key" (a difference) and a string with a pattern and a length
        (a product) are saved with their parts: a loaded grammar that leaves their saved rows
        builds them again over the restored parts, without reading their patterns."""
        from structgen.automata.dfa import DifferenceSource, ProductSource

        schema = {
            "type": "object",
            "properties": {
                "id": {"type": "string", "pattern": "^[a-f]+$", "minLength": 3, "maxLength": 9},
                "name": {"type": "string"},
            },
        }
        text = '{"id": "abcdef", "name": "y", "nickname": "x"}'
        vocab = load_vocab("llama3_1")
        case = _Case(vocab, lambda c: c.json_schema(schema, options=SchemaOptions(mode="accept")))
        tokens = load_vocab_tokens("llama3_1", text)
        expected = _walk(case(Compiler(vocab)), tokens)
        structgen.clear_caches()
        loaded = _loaded(case, tmp_path)
        read: list[int] = []
        decode = structgen.grammar.ir_codec.terminal_from_data

        def counted(data: Any, position: int, nodes: Any) -> Any:
            read.append(position)
            return decode(data, position, nodes)

        monkeypatch.setattr(structgen.grammar.ir_codec, "terminal_from_data", counted)
        assert _walk(loaded, tokens) == expected
        dfas = loaded._engine.terminal_dfas  # type: ignore[attr-defined]
        rebuilt = [d._source._fresh for d in dfas if getattr(d._source, "rebuilt", False)]
        kinds = {type(d._source) for d in rebuilt}
        assert {DifferenceSource, ProductSource} <= kinds
        for dfa in rebuilt:
            if isinstance(dfa._source, (DifferenceSource, ProductSource)):
                # (over the restored automata: the file's, or live ones shared by fingerprint)
                assert all(isinstance(p._source, SnapshotSource) for p in dfa._source.parts)
        assert read == []

    def test_a_rebuild_reads_only_its_own_terminal(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An automaton built again from its pattern decodes that terminal's nodes, not the
        whole grammar (which cost more than the build itself)."""
        monkeypatch.setattr(structgen.compile_cache, "BUILD_AHEAD_STATES", 1)
        loaded, tokens, expected = _person_loaded(tmp_path)

        def whole_grammar(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the whole grammar was decoded")

        monkeypatch.setattr(structgen.grammar.ir_codec, "grammar_from_data", whole_grammar)
        assert _walk(loaded, tokens) == expected
        sources = [dfa._source for dfa in loaded._engine.terminal_dfas]  # type: ignore[attr-defined]
        assert any(isinstance(s, SnapshotSource) and s.rebuilt for s in sources)

    def test_a_load_does_not_rebuild_deferred_terminals(self, tmp_path: Path) -> None:
        """Terminals whose NFAs wait for their first row are saved with that row: loading
        sets up every terminal from its file without going back to the schema."""
        vocab = load_vocab("gpt2")
        case = _Case(vocab, lambda c: c.json_schema(PERSON, options=SchemaOptions(mode="accept")))
        loaded = _loaded(case, tmp_path)
        sources = [dfa._source for dfa in loaded._engine.terminal_dfas]  # type: ignore[attr-defined]
        snapshots = [s for s in sources if isinstance(s, SnapshotSource)]
        assert snapshots and not any(s.rebuilt for s in snapshots)

    def test_the_first_mask_is_read_without_restoring_the_automata(self, tmp_path: Path) -> None:
        """A load gives the first mask from the file; the terminals' automata are restored on
        the first step, after which a reset or a rollback to the start still finds that mask."""
        loaded, tokens, expected = _person_loaded(tmp_path)
        engine = loaded._engine
        matcher = Matcher(loaded)
        bitmask = allocate_bitmask(1, loaded.vocab.size, backend="numpy")
        matcher.fill_bitmask(bitmask)
        assert bitmask.tobytes() + bytes([matcher.can_terminate()]) == expected[0]
        assert engine._terminal_dfas is None  # type: ignore[attr-defined]
        assert engine.memory_parts()  # (the cache budget's estimate restores nothing)
        assert engine._terminal_dfas is None  # type: ignore[attr-defined]
        assert matcher.accept_token(tokens[0])
        assert engine._terminal_dfas is not None  # type: ignore[attr-defined]
        matcher.rollback(1)  # back to the state made before the automata were restored
        matcher.fill_bitmask(bitmask)
        assert bitmask.tobytes() + bytes([matcher.can_terminate()]) == expected[0]
        assert matcher.accept_tokens(tokens) == len(tokens)
        matcher.reset()  # a real lexer state now: the saved mask is found under it too
        state = engine.initial_state
        assert state[1] != PENDING_START
        words = engine.cached_token_mask(state)
        assert words is not None and words.tobytes() == expected[0][:-1]
        assert _walk(loaded, tokens) == expected

    def test_threads_restoring_a_loaded_grammar_at_once_agree(self, tmp_path: Path) -> None:
        vocab = load_vocab("gpt2")
        case = _Case(vocab, lambda c: c.json_schema(PERSON))
        fresh = case(Compiler(vocab))
        walks = [_random_tokens(fresh, seed) for seed in range(4)]
        expected = [_walk(fresh, tokens) for tokens in walks]
        structgen.clear_caches()
        loaded = _loaded(case, tmp_path)
        results: list[Any] = [None] * len(walks)
        barrier = threading.Barrier(len(walks))

        def run(i: int) -> None:
            barrier.wait()
            results[i] = _walk(loaded, walks[i])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(walks))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == expected

    def test_a_restart_loads_the_file(self, tmp_path: Path) -> None:
        """In a fresh process: the file written here is found, trusted and gives the same
        first mask."""
        script = f"""
import json, sys
from structgen import Compiler, Matcher, allocate_bitmask
from structgen.vocab import Vocabulary
tokens = [bytes([b]) for b in range(32, 127)] + [b'{{"', b'":', b'", "', b'"}}', None]
vocab = Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1])
compiler = Compiler(vocab, cache_dir={str(tmp_path)!r})
grammar = compiler.json_schema({json.dumps(PERSON)!r})
mask = allocate_bitmask(1, vocab.size, backend="numpy")
Matcher(grammar).fill_bitmask(mask)
print(compiler.disk_cache.hits, mask.tobytes().hex())
"""
        env = {**os.environ, "PYTHONHASHSEED": "random"}
        first = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
        ).stdout.split()
        second = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
        ).stdout.split()
        assert first[0] == "0" and second[0] == "1"
        assert first[1] == second[1]


def load_vocab_tokens(name: str, text: str) -> list[int]:
    from tests.conftest import load_tokenizer

    ids: list[int] = load_tokenizer(name).encode(text, add_special_tokens=False)
    return ids


def vocab_encode(vocab: Vocabulary, text: str) -> list[int]:
    """Greedy longest-match tokens of `text` in `vocab` (any split is fine for a walk)."""
    table = {vocab.token_bytes(i): i for i in range(vocab.size) if vocab.token_bytes(i)}
    data = text.encode()
    out = []
    at = 0
    while at < len(data):
        for end in range(len(data), at, -1):
            token = table.get(data[at:end])
            if token is not None:
                out.append(token)
                at = end
                break
        else:
            raise AssertionError(f"no token for {data[at:]!r}")
    return out


def _small_vocab() -> Vocabulary:
    tokens: list[bytes | None] = [bytes([b]) for b in range(32, 127)]
    tokens += [b'{"', b'":', b'", "', b'"}', None]
    return Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1])


def _only_file(cache: Path) -> Path:
    files = list(cache.glob("*.sgc"))
    assert len(files) == 1
    return files[0]


def _rewrite(path: Path, edit: Any) -> None:
    """Change the file through `edit(header, tables, head, rest)` — the header and the head's
    bytes a load reads, the tables and the rest's bytes the first step reads — and write it
    with valid checksums: a tampered file that only the checks on its content can catch."""
    data = path.read_bytes()
    start = len(MAGIC) + 32
    size = int.from_bytes(data[start : start + 8], "little")
    header = json.loads(data[start + 8 : start + 8 + size])
    payload = data[start + 8 + size :]
    head, rest = bytearray(payload[: header["head"]]), bytearray(payload[header["head"] :])
    offset, length = header["tables"]
    tables = json.loads(rest[offset : offset + length])
    before = json.loads(json.dumps(header))
    edit(header, tables, head, rest)
    text = json.dumps(tables).encode()  # (appended: the arrays keep their places)
    if header["tables"] == before["tables"]:
        header["tables"] = [len(rest), len(text)]
    rest += text
    for name, value in [
        ("head", len(head)),
        ("payload", len(head) + len(rest)),
        ("rest", hashlib.sha256(rest).hexdigest()),
    ]:
        if header[name] == before[name]:
            header[name] = value
    text = json.dumps(header).encode()
    first = len(text).to_bytes(8, "little") + text + bytes(head)
    path.write_bytes(MAGIC + hashlib.sha256(first).digest() + first + bytes(rest))


def _set_int(rest: bytearray, where: list[int], index: int, value: int) -> None:
    """Item `index` of the int32 array at `where` in the rest of a file, set to `value`."""
    offset = where[0] + 4 * index
    rest[offset : offset + 4] = value.to_bytes(4, "little", signed=True)


def _bits_past_the_vocabulary(
    header: dict[str, Any], tables: Any, head: bytearray, rest: bytearray
) -> None:
    words = bytearray(16)  # (4 words: 100 tokens)
    words[-1] |= 0x80  # the last word's top bit: token 127 of 100
    header["first_mask"] = {"words": [len(head), 16]}
    head += words


class TestUntrustedFiles:
    def _compile(self, cache: Path) -> tuple[CompiledGrammar, CompileCache]:
        compiler = Compiler(_small_vocab(), cache_dir=cache)
        grammar = compiler.json_schema(PERSON)
        assert compiler.disk_cache is not None
        return grammar, compiler.disk_cache

    def _reload(self, cache: Path) -> tuple[CompiledGrammar, CompileCache]:
        structgen.clear_caches()
        return self._compile(cache)

    def _assert_rejected_then_rebuilt(self, cache: Path, expected: CompiledGrammar) -> None:
        grammar, disk = self._reload(cache)
        # (refused at the load, or on the first step: the tables are read then)
        tokens = _random_tokens(expected, seed=0)
        assert _walk(grammar, tokens) == _walk(expected, tokens)
        assert disk.rejected >= 1 and grammar == expected
        # ... and the file was written again: the next start trusts it
        rejected = disk.rejected
        self._reload(cache)
        assert disk.rejected == rejected and disk.hits >= 1

    @pytest.mark.parametrize(
        "damage",
        [
            pytest.param(lambda b: b[: len(b) // 2], id="truncated"),
            pytest.param(lambda b: b[:-1] + bytes([b[-1] ^ 1]), id="bit-flip"),
            pytest.param(lambda b: b"", id="empty"),
            pytest.param(lambda b: b"\x80\x04not a cache file", id="pickle-like"),
            pytest.param(lambda b: MAGIC + b"\0" * 40, id="zeros"),
        ],
    )
    def test_damaged_files_are_compiled_again(self, tmp_path: Path, damage: Any) -> None:
        grammar, _ = self._compile(tmp_path)
        path = _only_file(tmp_path)
        path.write_bytes(damage(path.read_bytes()))
        self._assert_rejected_then_rebuilt(tmp_path, grammar)

    def test_a_file_for_another_key_is_not_used(self, tmp_path: Path) -> None:
        compiler = Compiler(_small_vocab(), cache_dir=tmp_path)
        other = compiler.json_schema({"type": "integer"})
        other_file = _only_file(tmp_path)
        moved = tmp_path / "other.bin"
        other_file.rename(moved)
        grammar = compiler.json_schema(PERSON)
        moved.replace(_only_file(tmp_path))  # the integer grammar's file under PERSON's name
        self._assert_rejected_then_rebuilt(tmp_path, grammar)
        assert grammar != other

    @pytest.mark.parametrize(
        "edit",
        [
            pytest.param(lambda h, t, p, r: _set_int(r, t["dfas"]["sizes"], 0, 10**9), id="states"),
            pytest.param(lambda h, t, p, r: _set_int(r, t["dfas"]["sizes"], 2, 99), id="start"),
            pytest.param(lambda h, t, p, r: _set_int(r, t["dfas"]["sizes"], 1, 0), id="classes"),
            pytest.param(lambda h, t, p, r: _set_int(r, t["dfas"]["sizes"], 0, -1), id="negative"),
            pytest.param(
                lambda h, t, p, r: _set_int(r, t["parser"]["rules"]["symbols"], 3, 99999), id="rule"
            ),
            pytest.param(
                lambda h, t, p, r: _set_int(r, t["parser"]["rules"]["sizes"], 0, 0), id="rule-size"
            ),
            pytest.param(
                lambda h, t, p, r: _set_int(r, t["parser"]["rules"]["symbols"], 0, 0), id="lhs"
            ),
            pytest.param(
                lambda h, t, p, r: _set_int(r, t["terminal_dfa"], 0, 10**6), id="terminal-dfa"
            ),
            pytest.param(
                lambda h, t, p, r: t["parser"]["rules"]["sizes"].__setitem__(1, 3), id="sizes-len"
            ),
            pytest.param(lambda h, t, p, r: t["parser"].__setitem__("rules", 7), id="rules-type"),
            pytest.param(lambda h, t, p, r: t.__setitem__("terminal_dfa", [0]), id="terminals"),
            pytest.param(lambda h, t, p, r: t.pop("dfas"), id="no-automata"),
            pytest.param(lambda h, t, p, r: h.__setitem__("format", 0), id="format"),
            pytest.param(lambda h, t, p, r: t["dfas"].__setitem__("rows", [10**9, 4]), id="offset"),
            pytest.param(
                lambda h, t, p, r: h.__setitem__("first_mask", {"words": [0, 4]}),
                id="mask-length",
            ),
            pytest.param(lambda h, t, p, r: h.__setitem__("rest", "0" * 64), id="rest-digest"),
            pytest.param(
                lambda h, t, p, r: h.__setitem__("first_mask", {"at": [0, -4], "values": [0, -4]}),
                id="mask-negative",
            ),
            pytest.param(lambda h, t, p, r: h.__setitem__("head", 10**6), id="head-length"),
            pytest.param(lambda h, t, p, r: h.__setitem__("tables", [10**9, 4]), id="tables-place"),
            pytest.param(lambda h, t, p, r: h.__setitem__("automata_bytes", -1), id="bytes"),
            pytest.param(
                lambda h, t, p, r: t["dfas"].__setitem__("row_type", "<f8"), id="row-type"
            ),
            pytest.param(
                lambda h, t, p, r: t["dfas"].__setitem__("row_type", "<i4"), id="row-width"
            ),
            pytest.param(_bits_past_the_vocabulary, id="mask-bits"),
            pytest.param(
                lambda h, t, p, r: t["dfas"].__setitem__("composites", {}), id="composites"
            ),
            pytest.param(
                lambda h, t, p, r: t["dfas"].__setitem__("composites", [[0, "union", [1, 2]]]),
                id="composite-kind",
            ),
            pytest.param(
                lambda h, t, p, r: t["dfas"].__setitem__("composites", [[0, "product", [0, 1]]]),
                id="composite-of-itself",
            ),
            pytest.param(
                lambda h, t, p, r: t["dfas"].__setitem__(
                    "composites", [[0, "difference", [1, 10**6]]]
                ),
                id="composite-part",
            ),
            pytest.param(
                lambda h, t, p, r: t["dfas"].__setitem__("composites", [[0, "difference", [1]]]),
                id="composite-one-part",
            ),
        ],
    )
    def test_tampered_files_with_a_valid_checksum_are_refused(
        self, tmp_path: Path, edit: Any
    ) -> None:
        grammar, _ = self._compile(tmp_path)
        _rewrite(_only_file(tmp_path), edit)
        self._assert_rejected_then_rebuilt(tmp_path, grammar)

    def test_a_first_state_that_disagrees_with_the_parser_is_caught_on_the_first_step(
        self, tmp_path: Path
    ) -> None:
        """The first mask and whether an empty output is complete are answered from the header
        (as a file's first mask always was: no check can tell a wrong mask from a right one);
        the first step reads the parser and compiles again when the two disagree."""
        expected, _ = self._compile(tmp_path)
        _rewrite(_only_file(tmp_path), lambda h, t, p, r: h.__setitem__("initial_complete", True))
        grammar, disk = self._reload(tmp_path)
        tokens = _random_tokens(expected, seed=0)
        assert _walk(grammar, tokens)[1:] == _walk(expected, tokens)[1:]
        assert disk.rejected == 1
        self._reload(tmp_path)  # (the file was written again)
        assert disk.rejected == 1 and disk.hits >= 1

    def test_a_transition_out_of_range_is_refused(self, tmp_path: Path) -> None:
        """The C walk reads the tables through raw pointers: no state id out of range may
        reach it."""
        grammar, _ = self._compile(tmp_path)

        def edit(header: dict[str, Any], tables: Any, head: bytearray, rest: bytearray) -> None:
            offset, _ = tables["dfas"]["rows"]
            if tables["dfas"]["row_type"] == "<i2":  # (16 bits a transition: ids below 2**15)
                rest[offset : offset + 2] = (30_000).to_bytes(2, "little")
            else:
                rest[offset : offset + 4] = (10**6).to_bytes(4, "little")

        _rewrite(_only_file(tmp_path), edit)
        self._assert_rejected_then_rebuilt(tmp_path, grammar)


class TestFilesChangedAfterTheLoad:
    """A load reads a file's head; the first step reads the rest. A file changed in between
    (deleted, damaged, replaced by another grammar's) is caught there: the grammar is compiled
    again, and the walk goes on as the compiled one's."""

    @pytest.mark.parametrize(
        "change",
        [
            pytest.param(lambda path, other: path.unlink(), id="deleted"),
            pytest.param(
                lambda path, other: path.write_bytes(path.read_bytes()[:-1] + b"?"), id="damaged"
            ),
            pytest.param(lambda path, other: path.write_bytes(other), id="replaced"),
        ],
    )
    def test_the_first_step_compiles_again(self, tmp_path: Path, change: Any) -> None:
        vocab = _small_vocab()
        other_cache = tmp_path / "other"
        Compiler(vocab, cache_dir=other_cache).json_schema({"type": "integer"})
        other = _only_file(other_cache).read_bytes()
        cache = tmp_path / "cache"
        expected = Compiler(vocab, cache_dir=cache).json_schema(PERSON)
        tokens = _random_tokens(expected, seed=1)
        structgen.clear_caches()
        compiler = Compiler(vocab, cache_dir=cache)
        loaded = compiler.json_schema(PERSON)
        assert compiler.disk_cache is not None and compiler.disk_cache.hits == 1
        change(_only_file(cache), other)
        assert _walk(loaded, tokens) == _walk(expected, tokens)
        assert compiler.disk_cache.rejected == 1


class TestWhatIsSaved:
    def test_a_load_reads_only_the_head(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The header and the first mask, at the file's start, are all a load reads: the
        parser's tables and the automata are read and checked on the first step."""
        vocab = load_vocab("llama3_1")
        accept = SchemaOptions(mode="accept")
        Compiler(vocab, cache_dir=tmp_path).json_schema(PERSON, options=accept)
        structgen.clear_caches()
        reads: list[int | None] = []
        unpacked: list[int] = []
        read_file, unpack = structgen.compile_cache._read_file, structgen.compile_cache._unpack

        def reading(path: str, limit: int | None = None) -> bytes:
            reads.append(limit)
            return read_file(path, limit)

        def unpacking(*args: Any) -> Any:
            unpacked.append(1)
            return unpack(*args)

        monkeypatch.setattr(structgen.compile_cache, "_read_file", reading)
        monkeypatch.setattr(structgen.compile_cache, "_unpack", unpacking)
        loaded = Compiler(vocab, cache_dir=tmp_path).json_schema(PERSON, options=accept)
        matcher = Matcher(loaded)
        bitmask = allocate_bitmask(1, vocab.size, backend="numpy")
        matcher.fill_bitmask(bitmask)
        matcher.can_terminate()
        assert reads == [structgen.compile_cache._FIRST_READ] and not unpacked
        assert _only_file(tmp_path).stat().st_size > reads[0]  # (a part of the file)
        allowed = np.flatnonzero(np.unpackbits(bitmask[0].view(np.uint8), bitorder="little"))
        assert matcher.accept_token(int(allowed[0]))
        assert reads == [reads[0], None] and unpacked == [1]

    @pytest.mark.parametrize(
        ("call", "form"),
        [
            pytest.param(lambda c: c.json_schema(PERSON), "at", id="few-tokens"),
            pytest.param(lambda c: c.grammar('start: /[^"]+/'), "words", id="most-tokens"),
        ],
    )
    def test_the_first_mask_is_saved_as_its_nonzero_words_or_whole(
        self, tmp_path: Path, call: Any, form: str
    ) -> None:
        vocab = load_vocab("gpt2")
        case = _Case(vocab, call)
        expected = _walk(case(Compiler(vocab)), [])
        loaded = _loaded(case, tmp_path)
        data = _only_file(tmp_path).read_bytes()
        start = len(MAGIC) + 32
        size = int.from_bytes(data[start : start + 8], "little")
        assert form in json.loads(data[start + 8 : start + 8 + size])["first_mask"]
        assert _walk(loaded, []) == expected

    def test_the_first_mask_is_read_not_walked(self, tmp_path: Path) -> None:
        vocab = _small_vocab()
        compiled = Compiler(vocab, cache_dir=tmp_path).json_schema(PERSON)
        structgen.clear_caches()
        loaded = Compiler(vocab, cache_dir=tmp_path).json_schema(PERSON)
        engine = loaded._engine
        parse, lex_state, fresh = engine.initial_state
        saved = parse.memo.get(("mask", lex_state, fresh))  # there before any mask is asked
        assert saved is not None and not saved.flags.writeable
        assert np.array_equal(saved, compiled._engine.token_mask(compiled.initial_state))
        assert _walk(loaded, []) == _walk(compiled, [])

    def test_keys_differ_by_options_limits_and_vocabulary(self, tmp_path: Path) -> None:
        vocab = _small_vocab()
        Compiler(vocab, cache_dir=tmp_path).json_schema(PERSON)
        Compiler(vocab, cache_dir=tmp_path).json_schema(
            PERSON, options=SchemaOptions(mode="accept")
        )
        limits = structgen.CompileLimits(max_dfa_states=40_000)
        Compiler(vocab, cache_dir=tmp_path, limits=limits).json_schema(PERSON)
        other = Vocabulary.from_tokens([b"a", b"{", b"}", None], eos_token_ids=[3])
        Compiler(other, cache_dir=tmp_path).json_schema(PERSON)
        assert len(list(tmp_path.glob("*.sgc"))) == 4

    def test_the_key_holds_the_code_version(self) -> None:
        from structgen.compile_cache import code_fingerprint

        key = key_text(("json_schema", "x", frozenset({"b", "a"})))
        assert key is not None and code_fingerprint() in key
        assert key == key_text(("json_schema", "x", frozenset({"a", "b"})))

    def test_unique_items_and_regexes_are_compiled_every_time(self, tmp_path: Path) -> None:
        compiler = Compiler(_small_vocab(), cache_dir=tmp_path)
        compiler.json_schema({"type": "array", "items": {"type": "integer"}, "uniqueItems": True})
        compiler.regex(r"\d+")
        assert not list(tmp_path.glob("*.sgc"))

    def test_the_environment_variable_turns_it_on(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("STRUCTGEN_COMPILE_CACHE", str(tmp_path / "env"))
        Compiler(_small_vocab()).json_schema(PERSON)
        assert len(list((tmp_path / "env").glob("*.sgc"))) == 1
        monkeypatch.delenv("STRUCTGEN_COMPILE_CACHE")
        assert Compiler(_small_vocab()).disk_cache is None

    def test_an_unwritable_directory_warns_once(self, tmp_path: Path) -> None:
        blocker = tmp_path / "file"
        blocker.write_text("not a directory")
        compiler = Compiler(_small_vocab(), cache_dir=blocker / "cache")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiler.json_schema(PERSON)
            compiler.json_schema({"type": "integer"})
        assert len([w for w in caught if "compile cache" in str(w.message)]) == 1

    def test_threads_compiling_at_once_agree(self, tmp_path: Path) -> None:
        vocab = _small_vocab()
        schemas = [{**PERSON, "title": f"t{i}"} for i in range(4)]
        results: list[Any] = []

        def work() -> None:
            compiler = Compiler(vocab, cache_dir=tmp_path)
            results.append([_walk(compiler.json_schema(s), []) for s in schemas])

        for _ in range(2):  # the second round loads what the first saved
            structgen.clear_caches()
            threads = [threading.Thread(target=work) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert all(r == results[0] for r in results)
        assert not list(tmp_path.glob(".tmp-*"))

    def test_clear_deletes_the_files(self, tmp_path: Path) -> None:
        compiler = Compiler(_small_vocab(), cache_dir=tmp_path)
        compiler.json_schema(PERSON)
        assert compiler.disk_cache is not None and compiler.disk_cache.clear() == 1
        assert not list(tmp_path.glob("*.sgc"))


class TestPieces:
    def test_the_ir_round_trips(self) -> None:
        for schema in (PERSON, {"type": "array", "items": {"type": "number"}}, True):
            for mode in ("generate", "accept"):
                grammar = compile_schema(schema, options=_Options(mode=mode))
                data = json.loads(json.dumps(grammar_to_data(grammar)))
                assert grammar_from_data(data).fingerprint() == grammar.fingerprint()

    @pytest.mark.parametrize(
        "bad",
        [
            {"nodes": [["cat", [0]]], "terminals": [], "rules": [], "ignore": [], "start": "s"},
            {"nodes": [["cls", [5, 3]]], "terminals": [], "rules": [], "ignore": [], "start": "s"},
            {"nodes": [["str", ""]], "terminals": [], "rules": [], "ignore": [], "start": "s"},
            {"nodes": [["nil"]], "terminals": [["t", 3, []]], "rules": [], "ignore": []},
            {"nodes": [["zzz"]], "terminals": [], "rules": [], "ignore": [], "start": "s"},
            [1, 2],
        ],
    )
    def test_bad_ir_data_is_refused(self, bad: Any) -> None:
        with pytest.raises(IRDataError):
            grammar_from_data(bad)

    def test_each_terminal_decodes_alone_as_in_the_whole_grammar(self) -> None:
        for schema in (PERSON, {"type": "array", "items": {"type": "number"}}):
            grammar = compile_schema(schema, options=_Options(mode="accept"))
            data = json.loads(json.dumps(grammar_to_data(grammar)))
            whole = grammar_from_data(data).terminals
            shared: dict[int, Any] = {}
            for position in reversed(range(len(whole))):  # (nodes decoded before, reused)
                assert terminal_from_data(data, position, shared) == whole[position]
                assert terminal_from_data(data, position, {}) == whole[position]

    @pytest.mark.parametrize(
        "bad",
        [
            pytest.param(({"nodes": [["nil"]], "terminals": [["t", 0, []]]}, 1), id="position"),
            pytest.param(({"nodes": [["nil"]], "terminals": [["t", 1, []]]}, 0), id="pattern"),
            pytest.param(({"nodes": [["cat", [0]]], "terminals": [["t", 0, []]]}, 0), id="cycle"),
            pytest.param(
                ({"nodes": [["nil"], ["rep", 1, 0, 1]], "terminals": [["t", 1, []]]}, 0),
                id="forward-child",
            ),
            pytest.param(({"nodes": [["zzz"]], "terminals": [["t", 0, []]]}, 0), id="kind"),
            pytest.param(({"nodes": [["nil"]], "terminals": [["t", 0]]}, 0), id="entry"),
            pytest.param(({"nodes": [["nil"]], "terminals": [[1, 0, []]]}, 0), id="name"),
            pytest.param(({"nodes": [], "terminals": []}, "0"), id="position-type"),
        ],
    )
    def test_bad_data_for_one_terminal_is_refused(self, bad: Any) -> None:
        data, position = bad
        with pytest.raises(IRDataError):
            terminal_from_data(data, position, {})

    @pytest.mark.parametrize(
        "change",
        [
            pytest.param(lambda t: t["rules"].append([]), id="empty-rule"),
            pytest.param(lambda t: t["rules"].append([0, 1]), id="terminal-lhs"),
            pytest.param(lambda t: t["rules"].append([len(t["terminals"]), True]), id="bool"),
            pytest.param(lambda t: t["rules"].append("r"), id="rule-type"),
            pytest.param(lambda t: t.__setitem__("unproductive", [0]), id="start-dropped"),
            pytest.param(lambda t: t.__setitem__("unproductive", [10**6]), id="dropped-range"),
            pytest.param(lambda t: t.__setitem__("nullable", [0]), id="nullable-terminal"),
            pytest.param(lambda t: t.__setitem__("nullable", [10**6]), id="nullable-range"),
            pytest.param(lambda t: t.__setitem__("nullable", "ab"), id="nullable-type"),
            pytest.param(lambda t: t["terminals"].append(3), id="name-type"),
            pytest.param(lambda t: t.__setitem__("nonterminals", []), id="no-nonterminals"),
        ],
    )
    def test_bad_parser_tables_are_refused(self, change: Any) -> None:
        grammar = compile_schema(PERSON, options=_Options())
        tables = json.loads(json.dumps(EarleyGrammar(grammar).tables()))
        change(tables)
        with pytest.raises((ValueError, TypeError)):
            EarleyGrammar.from_tables(tables)

    def test_key_texts_follow_the_values_of_mutable_dataclasses(self) -> None:
        """Frozen options' and limits' texts are kept by value; a dataclass that can change
        is written out again each time."""
        import dataclasses

        from structgen.compile_cache import _stable

        @dataclasses.dataclass
        class Knobs:
            size: int

        knobs = Knobs(1)
        before = _stable(knobs)
        knobs.size = 2
        assert _stable(knobs) != before
        assert _stable(_Options(mode="accept")) == _stable(_Options(mode="accept"))
        assert _stable(_Options(mode="accept")) != _stable(_Options(mode="generate"))

    @pytest.mark.parametrize("as_arrays", [False, True], ids=["lists", "arrays"])
    def test_parser_tables_round_trip(self, as_arrays: bool) -> None:
        grammar = compile_schema(PERSON, options=_Options())
        parser = EarleyGrammar(grammar)
        tables = json.loads(json.dumps(parser.tables()))
        if as_arrays:
            tables["rules"] = None  # (the arrays stand for them)
        again = EarleyGrammar.from_tables(tables, parser.rule_arrays() if as_arrays else None)
        assert again.all_rules == parser.all_rules and again.rules == parser.rules
        assert again.nullable == parser.nullable
        assert again.start_nullable == parser.start_nullable
        for nt in range(parser.num_terminals, parser.num_terminals + 5):
            assert again.predicts_of(nt) == parser.predicts_of(nt)

    @pytest.mark.parametrize(
        "change",
        [
            pytest.param(lambda f, s: (f, s[:0]), id="no-rules"),
            pytest.param(lambda f, s: (f, s + 1), id="sizes-past-the-end"),
            pytest.param(lambda f, s: (f[:-1], s), id="symbols-short"),
            pytest.param(lambda f, s: (f - 1, s), id="negative-symbol"),
            pytest.param(lambda f, s: (f + 10**6, s), id="symbol-range"),
            pytest.param(lambda f, s: (f, s.reshape(1, -1)), id="2-d"),
        ],
    )
    def test_bad_rule_arrays_are_refused(self, change: Any) -> None:
        grammar = compile_schema(PERSON, options=_Options())
        parser = EarleyGrammar(grammar)
        with pytest.raises(ValueError):
            EarleyGrammar.from_tables(parser.tables(), change(*parser.rule_arrays()))

    @pytest.mark.parametrize(
        "change",
        [
            pytest.param(lambda f, s: (f, s), id="as-saved"),
            pytest.param(lambda f, s: (f, s[:0]), id="no-rules"),
            pytest.param(lambda f, s: (f, s + 1), id="sizes-past-the-end"),
            pytest.param(lambda f, s: (f, np.where(s == s.max(), 0, s)), id="empty-rule"),
            pytest.param(lambda f, s: (f[:-1], s), id="symbols-short"),
            pytest.param(lambda f, s: (np.append(f, 0).astype(f.dtype), s), id="symbols-long"),
            pytest.param(lambda f, s: (f - 1, s), id="negative-symbol"),
            pytest.param(lambda f, s: (f + 10**6, s), id="symbol-range"),
            pytest.param(lambda f, s: (np.where(f == f.max(), 0, f), s), id="terminal-lhs"),
            pytest.param(lambda f, s: (f[::-1], s), id="reversed"),
        ],
    )
    def test_native_rule_arrays_read_as_numpy_does(self, change: Any, monkeypatch: Any) -> None:
        """The C reading of a file's rules (`rules_of_arrays`) builds the same rules as the
        numpy passes, and refuses what they refuse with the same message."""
        import structgen.grammar.earley as earley

        if earley._RULES_OF_ARRAYS is None:
            pytest.skip("the C extension is not built")
        parser = EarleyGrammar(compile_schema(PERSON, options=_Options()))
        flat, sizes = change(*parser.rule_arrays())
        terminals = parser.num_terminals
        symbols = terminals + len(parser.nonterminal_names)

        def read() -> Any:
            try:
                return earley._rules_of_arrays(flat, sizes, terminals, symbols)
            except ValueError as error:
                return str(error)

        native = read()
        monkeypatch.setattr(earley, "_RULES_OF_ARRAYS", None)
        assert native == read()

    def test_a_restored_dfa_matches_as_the_original(self) -> None:
        import re

        limits = AutomataLimits()
        pattern = r"(ab|c[0-9]{2,4})+z?"
        original = compile_regex(pattern)
        original.accepts(b"ab")  # a few rows built, most not
        restored = restore_dfa(snapshot_dfa(original), lambda: compile_regex(pattern), limits)
        rng = random.Random(3)
        for _ in range(400):
            text = "".join(rng.choice("abc0123z") for _ in range(rng.randrange(9)))
            expected = re.fullmatch(pattern, text) is not None
            assert restored.accepts(text.encode()) == expected, text
        assert isinstance(restored._source, SnapshotSource) and restored._source.rebuilt

    @pytest.mark.parametrize(
        "change",
        [
            lambda s: {"rows": s.rows + 100},
            lambda s: {"start": 7},
            lambda s: {"accepting": s.accepting[:-1]},
            lambda s: {"byte_classes": np.zeros(256, dtype=np.uint8)},
            lambda s: {"rows": s.rows.astype(np.int64)},
        ],
    )
    def test_inconsistent_snapshots_are_refused(self, change: Any) -> None:
        snap = snapshot_dfa(compile_regex("[a-c]+x"))
        fields = {f: getattr(snap, f) for f in DFASnapshot.__slots__}
        bad = DFASnapshot(**{**fields, **change(snap)})
        with pytest.raises(SnapshotError):
            restore_dfa(bad, lambda: compile_regex("[a-c]+x"), AutomataLimits())


def _batch_of(patterns: list[str]) -> SnapshotBatch:
    snaps = []
    for pattern in patterns:
        dfa = compile_regex(pattern)
        dfa.accepts(pattern.encode()[:3])  # a few rows built, the rest not
        snaps.append(snapshot_dfa(dfa))
    return SnapshotBatch(
        rows=np.concatenate([s.rows.ravel() for s in snaps]),
        accepting=np.concatenate([s.accepting for s in snaps]),
        byte_classes=np.stack([s.byte_classes for s in snaps]),
        states=[int(s.rows.shape[0]) for s in snaps],
        classes=[int(s.rows.shape[1]) for s in snaps],
        starts=[s.start for s in snaps],
        empty=[s.empty for s in snaps],
        alphabets=[s.alphabet for s in snaps],
        fingerprints=[s.fingerprint for s in snaps],
    )


@pytest.mark.skipif(_CHECK_SNAPSHOTS is None, reason="the C extension is not built")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    patterns=st.lists(
        st.sampled_from(["[a-c]+x", "ab|cd", "[0-9]{2,5}", "(a|b)*c", "x"]), min_size=1, max_size=4
    ),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["row", "class", "states", "classes"]),
            st.integers(0, 10_000),
            st.integers(-4, 300),
        ),
        max_size=3,
    ),
)
def test_the_c_batch_check_agrees_with_numpy(
    patterns: list[str], edits: list[tuple[str, int, int]]
) -> None:
    """A cache file's automata are checked in C; the numpy check is the oracle, on batches
    with transitions, byte classes and sizes tampered with."""
    batch = _batch_of(patterns)
    rows, classes = batch.rows.copy(), batch.byte_classes.copy()
    states, counts = list(batch.states), list(batch.classes)
    for what, where, value in edits:
        if what == "row":
            rows[where % len(rows)] = value
        elif what == "class":
            classes.reshape(-1)[where % classes.size] = value % 256
        elif what == "states":
            states[where % len(states)] = value
        else:
            counts[where % len(counts)] = value
    native = _CHECK_SNAPSHOTS(rows, classes, states, counts)
    tampered = SnapshotBatch(
        rows=rows,
        accepting=np.zeros(sum(states) if min(states) > 0 else 0, dtype=np.bool_),
        byte_classes=classes,
        states=states,
        classes=counts,
        starts=[0] * len(states),
        empty=batch.empty,
        alphabets=batch.alphabets,
        fingerprints=batch.fingerprints,
    )
    try:
        tampered.check_arrays()
        oracle = None
    except (SnapshotError, ValueError) as exc:
        oracle = str(exc)
    assert (native is None) == (oracle is None), (native, oracle)
    if not edits:
        assert native is None


def test_limits_hash_once_and_key_files_by_their_values_only() -> None:
    """`AutomataLimits` keeps its hash (it is part of every shared automaton's keys); copies,
    pickles and equal limits hash alike, and a cache file's key text names the two limits
    only, as before the hash was kept."""
    import dataclasses
    import pickle

    limits = AutomataLimits(max_nfa_states=900, max_dfa_states=70)
    same = AutomataLimits(max_nfa_states=900, max_dfa_states=70)
    assert limits == same and hash(limits) == hash(same) == hash((900, 70))
    assert {limits: 1}[same] == 1 and limits != AutomataLimits(900, 71)
    changed = dataclasses.replace(limits, max_dfa_states=71)
    assert changed == AutomataLimits(900, 71) and hash(changed) == hash(AutomataLimits(900, 71))
    assert hash(pickle.loads(pickle.dumps(limits))) == hash(limits)
    assert repr(limits) == "AutomataLimits(max_nfa_states=900, max_dfa_states=70)"
    text = structgen.compile_cache._stable(limits)
    assert text == "AutomataLimits(max_nfa_states=900,max_dfa_states=70)"
