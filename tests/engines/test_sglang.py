"""structgen inside SGLang's real grammar-backend machinery, on the CPU, with a real tokenizer.

The backend is created the way SGLang's scheduler creates it (plugins loaded, then
``create_grammar_backend`` reading ``--grammar-backend`` from the published server args);
grammars come from the backend's compile-and-cache path; masks are filled by SGLang's batched
fill and applied by its ``GrammarMask``; a speculative draft tree goes through SGLang's own
``generate_token_bitmask`` traversal. Everything is compared with structgen's own `Matcher`.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from structgen import Compiler, Matcher
from structgen.vocab import Vocabulary
from tests.conftest import load_tokenizer
from tests.engines._cases import TAG
from tests.engines._placeholders import install_torchvision_placeholder

pytest.importorskip("sglang")
install_torchvision_placeholder()  # SGLang's config package imports it (see _placeholders.py)

from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES  # noqa: E402
from sglang.srt.constrained.base_grammar_backend import (  # noqa: E402
    GRAMMAR_BACKEND_REGISTRY,
    BaseGrammarObject,
    GrammarMask,
    GrammarRow,
    InvalidGrammarObject,
    create_grammar_backend,
)
from sglang.srt.plugins import load_plugins  # noqa: E402
from sglang.srt.runtime_context import get_context  # noqa: E402

from structgen.integrations import sglang as plugin  # noqa: E402

load_plugins()  # what every SGLang process does: runs structgen's entry point

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
EBNF = 'root ::= "(" expr ")"\nexpr ::= term ("+" term)*\nterm ::= [0-9]+ | root\n'
LARK = 'start: "(" expr ")"\nexpr: term ("+" term)*\nterm: /[0-9]+/ | start\n'

CASES: list[tuple[tuple[str, str], str]] = [
    (("json", json.dumps(SCHEMA)), json.dumps({"city": "Oslo", "days": 3})),
    (("json", "$$ANY$$"), '[1, {"a": null}]'),
    (("regex", r"[A-Z][a-z]+ \d{1,2}"), "May 17"),
    (("ebnf", EBNF), "((1+2)+34)"),
    (("ebnf", LARK), "(7+(8))"),
    (("structural_tag", TAG), 'Checking. <function=get_weather>{"city": "Oslo"}</function> ok'),
]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer("llama3_1")


@pytest.fixture(scope="module")
def backend(tokenizer: Any) -> Any:
    with get_context().override_server_args(grammar_backend="structgen") as server_args:
        created = create_grammar_backend(server_args, tokenizer, 128256, {tokenizer.eos_token_id})
    assert isinstance(created, plugin.StructgenGrammarBackend)
    return created


@pytest.fixture(scope="module")
def compiler(backend: Any) -> Compiler:
    return Compiler(backend.vocab)


def _grammar(backend: Any, key: tuple[str, str]) -> Any:
    value, cache_hit = backend.get_cached_or_future_value(key, False)
    if not cache_hit:
        value = value.result(timeout=60)
        if not isinstance(value, InvalidGrammarObject):
            backend.set_cache(key, value.copy())  # what SGLang's grammar manager does
    return value


def _own(compiler: Compiler, key: tuple[str, str]) -> Matcher:
    kind, text = key
    if kind == "json":
        if text == "$$ANY$$":  # SGLang's JSON mode: any value
            return Matcher(compiler.json(any_value=True))
        return Matcher(compiler.json_schema(text))
    if kind == "regex":
        return Matcher(compiler.regex(text))
    if kind == "structural_tag":
        return Matcher(compiler.structural_tag(text))
    return Matcher(compiler.ebnf(text) if "::=" in text else compiler.grammar(text))


def _own_row(matcher: Matcher, width: int) -> np.ndarray:
    row = np.zeros((1, width), dtype=np.int32)
    matcher.fill_bitmask(row, 0)
    return row[0]


# ----------------------------------------------------------------------------- the plugin


def test_the_entry_point_registers_the_backend_and_its_cli_choice() -> None:
    assert "structgen" in GRAMMAR_BACKEND_CHOICES
    assert "structgen" in GRAMMAR_BACKEND_REGISTRY
    plugin.register()  # idempotent
    assert GRAMMAR_BACKEND_CHOICES.count("structgen") == 1


def test_the_cli_accepts_the_flag() -> None:
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(["--model-path", "m", "--grammar-backend", "structgen"])
    assert args.grammar_backend == "structgen"


def test_the_vocabulary_matches_the_tokenizer(backend: Any, tokenizer: Any) -> None:
    expected = Vocabulary.from_hf(tokenizer, 128256)
    assert backend.vocab.fingerprint == expected.fingerprint


# ----------------------------------------------------------------------------- compiling


@pytest.mark.parametrize(("key", "text"), CASES, ids=lambda c: str(c)[:20])
def test_masks_equal_structgens_own_matcher_token_by_token(
    backend: Any, compiler: Compiler, tokenizer: Any, key: tuple[str, str], text: str
) -> None:
    grammar = _grammar(backend, key)
    assert isinstance(grammar, plugin.StructgenGrammar)
    own = _own(compiler, key)
    ids = tokenizer.encode(text, add_special_tokens=False)
    mask = grammar.allocate_vocab_mask(128256, 1, "cpu")
    for token in [*ids, tokenizer.eos_token_id]:
        grammar.fill_vocab_mask(mask, 0)
        np.testing.assert_array_equal(mask[0].numpy(), _own_row(own, mask.shape[1]))
        grammar.accept_token(token)
        assert own.accept_token(token)
    assert grammar.is_terminated()


def test_a_compiled_grammar_has_its_first_mask_cached(backend: Any) -> None:
    # computed on SGLang's grammar thread, not in the first batch step (a new regex: no cache)
    grammar = _grammar(backend, ("regex", r"first-mask-probe [0-9]{3}"))
    assert isinstance(grammar, plugin.StructgenGrammar)
    assert grammar.matcher._allowed(cached_only=True) is not None


def test_cached_grammars_are_independent_copies(backend: Any, tokenizer: Any) -> None:
    key = ("regex", r"(ab|cd)+")
    first = _grammar(backend, key)
    first.accept_token(tokenizer.encode("ab", add_special_tokens=False)[0])
    second = _grammar(backend, key)  # a cache hit: SGLang copies the pristine template
    assert second is not first
    assert second.matcher.forced_bytes() == b"" and len(second.matcher._history) == 1


def test_a_refused_token_raises_value_error_as_sglang_expects(backend: Any, tokenizer: Any) -> None:
    grammar = _grammar(backend, ("regex", r"\d+"))
    with pytest.raises(ValueError, match="not allowed"):
        grammar.accept_token(tokenizer.encode("x", add_special_tokens=False)[0])
    grammar.accept_token(tokenizer.encode("7", add_special_tokens=False)[0])  # still usable


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (("regex", "(ab"), "offset 0"),
        (("ebnf", 'root ::= "a" missing'), "line 1, column 14"),
        (("json", '{"type": "array", "uniqueItems": true}'), "uniqueItems"),
        (("json", '{"type": '), "Expecting value"),
        (("structural_tag", '{"format": {"type": "nope"}}'), "unknown format type"),
    ],
)
def test_compile_failures_come_back_as_sglangs_invalid_grammar(
    backend: Any, key: tuple[str, str], message: str
) -> None:
    value = _grammar(backend, key)
    assert isinstance(value, InvalidGrammarObject)
    assert message in value.error_message


# ----------------------------------------------------------------------------- batches


def test_a_batch_is_filled_by_sglangs_batched_fill_and_applied_by_its_grammar_mask(
    backend: Any, compiler: Compiler, tokenizer: Any
) -> None:
    grammars, own = [], []
    for i, (key, text) in enumerate(CASES[:4]):
        grammar, matcher = _grammar(backend, key), _own(compiler, key)
        prefix = tokenizer.encode(text, add_special_tokens=False)[:i]
        for token in prefix:
            grammar.accept_token(token)
            assert matcher.accept_token(token)
        grammars.append(grammar)
        own.append(matcher)
    vocab_mask = grammars[0].allocate_vocab_mask(128256, 5, "cpu")  # row 4: no grammar
    entries = [GrammarRow(row=i, grammar=g) for i, g in enumerate(grammars)]
    grammars[0].fill_vocab_mask_batched(entries, vocab_mask)
    vocab_mask = grammars[0].move_vocab_mask(vocab_mask, "cpu")
    logits = torch.randn(5, 128256)
    GrammarMask(grammars[0], vocab_mask).apply(logits)
    for i, matcher in enumerate(own):
        allowed = np.unpackbits(
            _own_row(matcher, vocab_mask.shape[1]).view(np.uint8), bitorder="little"
        )[:128256].astype(bool)
        assert torch.equal(torch.isfinite(logits[i]), torch.from_numpy(allowed))
    assert torch.isfinite(logits[4]).all()  # an unconstrained row stays unconstrained
    grammars[0].reset_vocab_mask(vocab_mask)
    assert bool((vocab_mask == -1).all())


# ----------------------------------------------------------------------------- speculation


def test_a_draft_tree_is_masked_by_sglangs_traversal_and_rolled_back(
    backend: Any, compiler: Compiler, tokenizer: Any
) -> None:
    from sglang.srt.speculative.spec_utils import generate_token_bitmask

    key = ("json", json.dumps(SCHEMA))
    grammar = _grammar(backend, key)
    ids = tokenizer.encode(json.dumps({"city": "Rome", "days": 12}), add_special_tokens=False)
    for token in ids[:2]:
        grammar.accept_token(token)
    history = len(grammar.matcher._history)
    bad = tokenizer.encode("@", add_special_tokens=False)[0]  # refused after `{"city":`
    # node 0 is the committed token; 1 -> 2 is the true continuation, 3 a refused sibling of 2
    draft = torch.tensor([[ids[1], ids[2], ids[3], bad]])
    next_token = torch.tensor([[1, 2, -1, -1]])
    next_sibling = torch.tensor([[-1, -1, 3, -1]])
    masks, used = generate_token_bitmask(
        [SimpleNamespace(grammar=grammar)], next_token, next_sibling, draft, 128256
    )
    assert used is grammar and masks is not None
    own = _own(compiler, key)
    own.accept_tokens(ids[:2])
    expected = [_own_row(own, masks.shape[1])]
    own.accept_token(ids[2])
    expected.append(_own_row(own, masks.shape[1]))
    own.accept_token(ids[3])
    expected.append(_own_row(own, masks.shape[1]))
    for row in range(3):
        np.testing.assert_array_equal(masks[row].numpy(), expected[row])
    assert bool((masks[3] == -1).all())  # the refused node keeps the all-allowed fill
    assert len(grammar.matcher._history) == history  # every accepted draft was rolled back


def test_jump_forward_offers_the_forced_tokens(backend: Any, tokenizer: Any) -> None:
    grammar = _grammar(backend, ("regex", r"Answer: (yes|no)"))
    assert isinstance(grammar, BaseGrammarObject)
    helper = grammar.try_jump_forward(tokenizer)
    assert helper is not None
    assert tokenizer.decode(helper[0]).startswith("Answer")
    for token in helper[0]:
        grammar.accept_token(token)


# ----------------------------------------------------------------------------- reasoning


def test_with_a_reasoning_parser_the_think_block_stays_free_as_for_sglangs_backends() -> None:
    """SGLang returns a registered backend before wrapping it for reasoning; structgen's
    wraps itself in SGLang's `ReasonerGrammarBackend`, so the grammar starts after `</think>`."""
    from sglang.srt.constrained.reasoner_grammar_backend import ReasonerGrammarBackend

    tok = load_tokenizer("qwen3")
    end = tok.convert_tokens_to_ids("</think>")
    with get_context().override_server_args(
        grammar_backend="structgen", reasoning_parser="qwen3"
    ) as server_args:
        created = create_grammar_backend(
            server_args, tok, 151936, {tok.eos_token_id}, think_end_ids=[end]
        )
        assert isinstance(created, ReasonerGrammarBackend)
        assert isinstance(created.grammar_backend, plugin.StructgenGrammarBackend)
        schema = '{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}'
        value, hit = created.get_cached_or_future_value(("json", schema), True)
        grammar = value if hit else value.result(timeout=60)
    own = Matcher(Compiler(created.grammar_backend.vocab).json_schema(schema))
    mask = grammar.allocate_vocab_mask(151936, 1, "cpu")
    think = tok.encode("<think>\nfirst, { not json\n</think>", add_special_tokens=False)
    assert think[-1] == end
    for token in think:
        grammar.fill_vocab_mask(mask, 0)
        bits = np.unpackbits(mask[0].numpy().view(np.uint8), bitorder="little")
        assert bits[token]  # (the block is free)
        grammar.accept_token(token)
    for token in [*tok.encode('{"n": 42}', add_special_tokens=False), tok.eos_token_id]:
        grammar.fill_vocab_mask(mask, 0)
        np.testing.assert_array_equal(mask[0].numpy(), _own_row(own, mask.shape[1]))
        grammar.accept_token(token)
        assert own.accept_token(token)
    assert grammar.is_terminated()
