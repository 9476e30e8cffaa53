"""`SpeculativeGenerator` on the real default model (SmolLM2-135M-Instruct), on the CPU.

The draft is a 4-layer truncation of the target (`truncated_draft`): a weak draft, so rounds
both keep and reject tokens. Greedy output must be token-identical to `Generator.generate`; the
sampling rule must reproduce the target's masked distribution (checked on the rule alone with
many draws, and end to end against the exact distribution of a tiny grammar).
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import jsonschema
import lark
import pytest
import torch

from structgen import Compiler, GenerationError, Generator, SamplingParams
from structgen.generate.speculative import (
    PromptLookupDraft,
    SpeculativeGenerator,
    truncated_draft,
    verify_token,
)
from structgen.masks import allocate_bitmask, apply_bitmask
from structgen.matcher import Matcher
from tests.generate.test_generator import NAME_JSON, PAIR_GRAMMAR, PERSON, PHONE, STORY
from tests.generate.test_generator import model_and_tokenizer as _model_and_tokenizer

pytestmark = pytest.mark.slow

# Chi-square critical values at significance 0.001, by degrees of freedom: a correct sampler
# fails a test with probability 1/1000 per seed set (the seeds are fixed, so it is reproducible).
CHI2_CRITICAL_0_001 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32}

CHOICES = ["sourdough", "baguette", "rye bread", "brioche"]
CASES: dict[str, tuple[str, int]] = {  # grammar name: (question, max_new_tokens)
    "regex": ("A phone number for a bakery?", 20),
    "choice": ("Which bread should I buy?", 12),
    "json": ("Describe a person as JSON with name and age.", 24),
    "lark": ("Write a key=value pair in parentheses.", 16),
    "free": ("Why is bread so good?", 16),
}


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """The machine is shared; one thread keeps this file's timing predictable."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def model_and_tokenizer() -> tuple[Any, Any]:
    model, tokenizer = _model_and_tokenizer()
    return model, tokenizer


@functools.cache
def generator() -> Generator:
    model, tokenizer = model_and_tokenizer()
    return Generator(model, tokenizer, prefix_cache=None)


@functools.cache
def draft() -> Any:
    return truncated_draft(model_and_tokenizer()[0], 4)


@functools.cache
def grammar(name: str) -> Any:
    compiler = Compiler(generator().vocab)
    if name == "regex":
        return compiler.regex(PHONE)
    if name == "choice":
        return compiler.choice(CHOICES)
    if name == "json":
        return compiler.json_schema(PERSON)
    if name == "lark":
        return compiler.grammar(PAIR_GRAMMAR)
    return None


def valid(name: str, text: str) -> bool:
    """Whether a complete output is in the grammar's language (oracles as in test_generator)."""
    if name == "regex":
        return re.fullmatch(PHONE, text) is not None
    if name == "choice":
        return text in CHOICES
    if name == "json":
        jsonschema.validate(json.loads(text), PERSON)
        return True
    if name == "lark":
        lark.Lark(PAIR_GRAMMAR).parse(text)
        return True
    return True


@functools.cache
def plain(name: str) -> Any:
    question, tokens = CASES[name]
    params = SamplingParams(max_new_tokens=tokens)
    return generator().generate(question, params, grammar=grammar(name), chat=True)


@functools.cache
def speculative(k: int) -> SpeculativeGenerator:
    return SpeculativeGenerator(generator(), draft(), k=k)


class TestGreedy:
    @pytest.mark.parametrize("k", [1, 3, 5])
    @pytest.mark.parametrize("name", list(CASES))
    def test_token_identical_to_the_plain_loop(self, name: str, k: int) -> None:
        question, tokens = CASES[name]
        expected = plain(name)
        result = speculative(k).generate(
            question, SamplingParams(max_new_tokens=tokens), grammar=grammar(name), chat=True
        )
        assert result.token_ids == expected.token_ids
        assert result.text == expected.text
        assert result.finish_reason == expected.finish_reason
        if result.finish_reason == "eos":
            assert valid(name, result.text), result.text
        m = result.metrics
        assert m.output_tokens == len(result.token_ids)
        assert m.forced_tokens == expected.metrics.forced_tokens
        assert 0 <= m.accepted_tokens <= m.drafted_tokens
        assert m.draft_forward_passes >= 1
        assert m.forward_passes <= expected.metrics.forward_passes

    def test_the_target_as_its_own_draft_keeps_every_token(self) -> None:
        gen = generator()
        spec = SpeculativeGenerator(gen, model_and_tokenizer()[0], k=4)
        question, tokens = CASES["json"]
        result = spec.generate(
            question, SamplingParams(max_new_tokens=tokens), grammar=grammar("json"), chat=True
        )
        assert result.token_ids == plain("json").token_ids
        m = result.metrics
        assert m.drafted_tokens > 0
        assert m.acceptance_rate == 1.0
        assert m.tokens_per_target_forward > 2.0  # k + 1 tokens per verification, plus forced

    def test_stop_strings_and_the_length_limit(self) -> None:
        gen = generator()
        spec = SpeculativeGenerator(gen, draft(), k=3)
        for params in (
            SamplingParams(max_new_tokens=20, stop=("bread",)),
            SamplingParams(max_new_tokens=5),
            SamplingParams(max_new_tokens=1),
        ):
            expected = gen.generate("Why is bread so good?", params, chat=True)
            result = spec.generate("Why is bread so good?", params, chat=True)
            assert result.token_ids == expected.token_ids
            assert (result.text, result.finish_reason) == (expected.text, expected.finish_reason)
        assert spec.generate("Hi", SamplingParams(max_new_tokens=5)).metrics.output_tokens == 5

    def test_jump_forward_is_off_when_the_generator_has_it_off(self) -> None:
        model, tokenizer = model_and_tokenizer()
        gen = Generator(model, tokenizer, prefix_cache=None, jump_forward=False)
        g = Compiler(gen.vocab).regex(NAME_JSON)
        params = SamplingParams(max_new_tokens=12)
        expected = gen.generate("A name as JSON.", params, grammar=g, chat=True)
        result = SpeculativeGenerator(gen, draft(), k=3).generate(
            "A name as JSON.", params, grammar=g, chat=True
        )
        assert result.token_ids == expected.token_ids
        assert result.metrics.forced_tokens == 0


CONTACT = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "email": {"type": "string", "maxLength": 60},
        "city": {"type": "string", "maxLength": 20},
    },
    "required": ["name", "email", "city"],
    "additionalProperties": False,
}
EXTRACT = (
    "Extract the contact as JSON.\nText: Ada Lovelace lives in London; write to "
    "ada.lovelace@example.com."
)


class TestPromptLookup:
    """`PromptLookupDraft`: no draft model; the text's last n-gram looked up earlier on."""

    def test_proposes_what_followed_the_latest_earlier_occurrence(self) -> None:
        lookup = PromptLookupDraft(max_ngram=3, min_ngram=1)
        assert lookup.propose([1, 2, 3, 9, 1, 2, 4, 7, 1, 2]) == 4  # latest [1, 2] wins
        assert lookup.propose([5, 6, 7, 5, 6]) == 7  # longest suffix [5, 6]
        assert lookup.propose([1, 2, 3]) is None  # no earlier occurrence
        assert lookup.propose([8]) is None
        with pytest.raises(GenerationError, match="min_ngram"):
            PromptLookupDraft(max_ngram=1, min_ngram=2)

    @pytest.mark.parametrize("k", [2, 6])
    def test_greedy_extraction_is_token_identical_with_fewer_target_forwards(self, k: int) -> None:
        gen = generator()
        g = Compiler(gen.vocab).json_schema(CONTACT)
        params = SamplingParams(max_new_tokens=60)
        expected = gen.generate(EXTRACT, params, grammar=g, chat=True)
        result = SpeculativeGenerator(
            gen, "ngram" if k == 2 else PromptLookupDraft(), k=k
        ).generate(EXTRACT, params, grammar=g, chat=True)
        assert result.token_ids == expected.token_ids
        assert result.finish_reason == expected.finish_reason == "eos"
        jsonschema.validate(json.loads(result.text), CONTACT)
        m = result.metrics
        assert m.draft_forward_passes == 0  # no draft model ran
        assert m.accepted_tokens >= 3  # copied spans were kept
        assert m.forward_passes < expected.metrics.forward_passes

    def test_sampling_follows_plain_constrained_sampling(self) -> None:
        gen = generator()
        g = Compiler(gen.vocab).regex("[ab]{2}")
        prompt = gen.encode("x:ab x:ba x:aa x:bb x:ab x:")  # after "x:", lookup proposes "ab"
        expected = exact_distribution(model_and_tokenizer()[0], prompt, g, temperature=1.0)
        spec = SpeculativeGenerator(gen, PromptLookupDraft(max_ngram=2, min_ngram=1), k=2)
        assert_two_letters_follow(spec, prompt, g, expected)


class TestSampling:
    def test_the_rule_reproduces_the_target_distribution(self) -> None:
        """One real position: p and q are the target's and draft's masked, tempered, top-p
        distributions over the choice grammar's first tokens; draft, verify, count."""
        gen = generator()
        ids = gen.encode("Which bread should I buy?", chat=True)
        mask = allocate_bitmask(1, gen.vocab.size)
        Matcher(grammar("choice")).fill_bitmask(mask, 0)

        def dist(model: Any) -> torch.Tensor:
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0, -1:].float()
            apply_bitmask(logits, mask)
            logits /= 1.5
            probs = logits.softmax(-1)[0]
            ordered, order = probs.sort(descending=True)  # top_p = 0.97, as in sampling.py
            drop = (ordered.cumsum(0) - ordered) >= 0.97
            probs[order[drop]] = 0
            return probs / probs.sum()

        p, q = dist(model_and_tokenizer()[0]), dist(draft())
        assert float((p - q).abs().sum()) > 0.2  # the draft really differs
        support = torch.nonzero((p > 0) | (q > 0)).flatten()  # the rest is 0 in both: drop it
        p, q = p[support], q[support]
        assert len(support) >= 3
        rng = torch.Generator().manual_seed(0)
        draws = 20_000
        counts: Counter[int] = Counter()
        for _ in range(draws):
            x = int(torch.multinomial(q, 1, generator=rng)[0])
            replacement = verify_token(p, q, x, rng)
            counts[x if replacement is None else replacement] += 1
        assert all(p[i] > 0 for i in counts)
        assert_fits(counts, {i: float(p[i]) for i in range(len(p)) if p[i] > 0}, draws)

    def test_outputs_follow_plain_constrained_sampling(self) -> None:
        """End to end, against the exact output distribution of plain constrained sampling."""
        gen = generator()
        g = Compiler(gen.vocab).regex("[ab]{2}")
        prompt = gen.encode("Two letters:")
        expected = exact_distribution(model_and_tokenizer()[0], prompt, g, temperature=1.0)
        assert len(expected) == 4 and abs(sum(expected.values()) - 1) < 1e-4
        spec = SpeculativeGenerator(gen, truncated_draft(model_and_tokenizer()[0], 2), k=2)
        assert_two_letters_follow(spec, prompt, g, expected)

    @pytest.mark.parametrize("name", ["regex", "json", "lark"])
    def test_sampled_outputs_are_valid(self, name: str) -> None:
        question, _ = CASES[name]
        spec = speculative(3)
        for seed in range(2):
            params = SamplingParams(max_new_tokens=30, temperature=1.0, top_p=0.95, seed=seed)
            result = spec.generate(question, params, grammar=grammar(name), chat=True)
            assert result.finish_reason in ("eos", "length")
            if result.finish_reason == "eos":
                assert valid(name, result.text), result.text

    def test_a_seed_reproduces_a_run(self) -> None:
        spec = speculative(3)
        params = SamplingParams(max_new_tokens=10, temperature=0.8, seed=7)
        first = spec.generate("Hi", params)
        assert spec.generate("Hi", params).token_ids == first.token_ids


def assert_two_letters_follow(
    spec: SpeculativeGenerator,
    prompt: list[int],
    g: Any,
    expected: dict[str, float],
    *,
    pattern: str = "[ab]{2}",
    budget: int | None = None,
) -> None:
    """60 seeded samples of the `[ab]{2}` grammar (or `pattern` in `budget` tokens) fit
    `expected`, and the rule both kept and rejected drafted tokens on the way."""
    runs = 60
    counts: Counter[str] = Counter()
    drafted = accepted = 0
    for seed in range(runs):
        params = SamplingParams(max_new_tokens=budget or 4, temperature=1.0, seed=seed)
        result = spec.generate(prompt, params, grammar=g)
        assert result.complete and re.fullmatch(pattern, result.text)
        assert result.finish_reason == ("eos" if budget is None else result.finish_reason)
        counts[result.text] += 1
        drafted += result.metrics.drafted_tokens
        accepted += result.metrics.accepted_tokens
    assert 0 < accepted < drafted  # both paths of the rule ran
    assert_fits(counts, expected, runs)


def exact_distribution(
    model: Any, prompt: list[int], compiled: Any, *, temperature: float, budget: int | None = None
) -> dict[str, float]:
    """P(output text) under plain constrained sampling, by walking every allowed token path
    (a finite grammar with no forced tokens; full forwards, no cache: a few calls). With a
    `budget` (max_new_tokens, budget-aware closing), only tokens that fit are allowed: the
    target's distribution restricted to them."""
    vocab = compiled.vocab
    out: Counter[str] = Counter()

    def walk(path: list[int], matcher: Matcher, prob: float) -> None:
        if matcher.is_terminated() or (budget is not None and len(path) == budget):
            assert matcher.can_terminate()
            kept = path[:-1] if matcher.is_terminated() else path
            out[b"".join(vocab.token_bytes(t) for t in kept).decode()] += prob
            return
        assert not matcher.forced_tokens()
        mask = allocate_bitmask(1, vocab.size)
        matcher.fill_bitmask(mask, 0)
        with torch.no_grad():
            logits = model(torch.tensor([prompt + path])).logits[0, -1:].float()
        apply_bitmask(logits, mask)
        if budget is not None:
            left = budget - len(path)
            for token in torch.nonzero(torch.isfinite(logits[0])).flatten().tolist():
                if not matcher.fits(token, left):
                    logits[0, token] = float("-inf")
        probs = (logits / temperature).softmax(-1)[0]
        for token in torch.nonzero(probs > 0).flatten().tolist():
            child = matcher.copy()
            assert child.accept_token(token)
            walk([*path, token], child, prob * float(probs[token]))

    walk([], Matcher(compiled), 1.0)
    return dict(out)


def assert_fits(counts: Counter[Any], probs: dict[Any, float], n: int) -> None:
    """Pearson's chi-square of `counts` against `n * probs`; categories expecting fewer than 5
    are pooled with the next smallest ones."""
    cells = sorted(probs, key=lambda c: probs[c])
    groups: list[tuple[float, int]] = []
    expected_sum, observed_sum = 0.0, 0
    for cell in cells:
        expected_sum += n * probs[cell]
        observed_sum += counts.get(cell, 0)
        if expected_sum >= 5:
            groups.append((expected_sum, observed_sum))
            expected_sum, observed_sum = 0.0, 0
    if expected_sum and groups:  # a small remainder joins the last group
        e, o = groups.pop()
        groups.append((e + expected_sum, o + observed_sum))
    assert len(groups) >= 2, groups
    stat = sum((o - e) ** 2 / e for e, o in groups)
    critical = CHI2_CRITICAL_0_001[len(groups) - 1]
    assert stat < critical, (stat, critical, groups)


class TestBudgetAwareClosing:
    """As in the plain loop: outputs end complete within max_new_tokens, and the output is the
    target's distribution restricted to the tokens that fit."""

    def test_greedy_is_token_identical_to_the_plain_loop_under_tight_budgets(self) -> None:
        gen = generator()
        g = Compiler(gen.vocab).json_schema(STORY)
        need = Matcher(g).tokens_to_finish()
        assert need is not None and need > 4
        question = "Tell a very long story about a dragon, as JSON."
        redraws = 0
        for budget in (need, need + 3, 24):
            params = SamplingParams(max_new_tokens=budget)
            plain_run = gen.generate(question, params, grammar=g, chat=True)
            spec_run = speculative(3).generate(question, params, grammar=g, chat=True)
            assert spec_run.token_ids == plain_run.token_ids
            assert spec_run.complete and len(spec_run.token_ids) <= budget
            jsonschema.validate(json.loads(spec_run.text), STORY)
            redraws += spec_run.metrics.closing_redraws
        assert redraws  # closing did narrow choices

    def test_sampled_outputs_end_complete_and_valid(self) -> None:
        gen = generator()
        g = Compiler(gen.vocab).json_schema(STORY)
        spec = SpeculativeGenerator(gen, "ngram", k=3)
        for seed in range(3):
            params = SamplingParams(max_new_tokens=20, temperature=1.2, seed=seed)
            result = spec.generate("A dragon story, as JSON.", params, grammar=g, chat=True)
            assert result.complete and len(result.token_ids) <= 20
            jsonschema.validate(json.loads(result.text), STORY)

    def test_outputs_follow_plain_sampling_restricted_to_what_fits(self) -> None:
        """`[ab]{4}` in 2 tokens: after `a` only `aba` fits, so closing binds on most paths."""
        gen = generator()
        g = Compiler(gen.vocab).regex("[ab]{4}")
        prompt = gen.encode("Two letters:")
        model = model_and_tokenizer()[0]
        expected = exact_distribution(model, prompt, g, temperature=1.0, budget=2)
        free = exact_distribution(model, prompt, g, temperature=1.0)
        assert abs(sum(expected.values()) - 1) < 1e-4
        assert sum(abs(expected.get(t, 0) - free.get(t, 0)) for t in free) > 0.2  # it binds
        spec = SpeculativeGenerator(gen, truncated_draft(model, 2), k=2)
        assert_two_letters_follow(spec, prompt, g, expected, pattern="[ab]{4}", budget=2)


class TestErrors:
    @pytest.mark.parametrize("k", [0, -1, True, 2.5, "3"])
    def test_bad_k(self, k: Any) -> None:
        with pytest.raises(GenerationError, match="k"):
            SpeculativeGenerator(generator(), draft(), k=k)

    def test_a_draft_with_another_vocabulary(self) -> None:
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            vocab_size=1000,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
        )
        with pytest.raises(GenerationError, match="vocabulary"):
            SpeculativeGenerator(generator(), LlamaForCausalLM(config), k=2)

    def test_a_draft_that_is_not_a_model(self) -> None:
        with pytest.raises(GenerationError, match="causal LM"):
            SpeculativeGenerator(generator(), object(), k=2)

    def test_a_target_model_without_its_tokenizer(self) -> None:
        with pytest.raises(GenerationError, match="tokenizer"):
            SpeculativeGenerator(model_and_tokenizer()[0], draft())

    def test_a_target_model_with_its_tokenizer(self) -> None:
        model, tokenizer = model_and_tokenizer()
        spec = SpeculativeGenerator(model, draft(), tokenizer, k=2, draft_tokenizer=tokenizer)
        assert spec.vocab.fingerprint == generator().vocab.fingerprint

    def test_penalties_and_bad_params(self) -> None:
        spec = speculative(3)
        with pytest.raises(GenerationError, match="penalt"):
            spec.generate("Hi", SamplingParams(repetition_penalty=1.2))
        with pytest.raises(GenerationError, match="SamplingParams"):
            spec.generate("Hi", {"temperature": 1.0})  # type: ignore[arg-type]

    def test_a_grammar_for_another_vocabulary(self) -> None:
        from structgen import Vocabulary

        tokenizer = model_and_tokenizer()[1]
        other = Compiler(Vocabulary.from_hf(tokenizer, size=generator().vocab.size + 64))
        with pytest.raises(GenerationError, match="vocabulary"):
            speculative(3).generate("Hi", grammar=other.regex("[ab]"))

    def test_truncated_draft_checks_its_layers(self) -> None:
        model = model_and_tokenizer()[0]
        for bad in (0, 10_000, True):
            with pytest.raises(GenerationError, match="num_layers"):
                truncated_draft(model, bad)
        with pytest.raises(GenerationError, match="decoder"):
            truncated_draft(object())
        small = truncated_draft(model, 2)
        assert small.config.num_hidden_layers == 2 and len(small.model.layers) == 2
        assert model.config.num_hidden_layers == 30 and len(model.model.layers) == 30
        assert small.lm_head.weight is model.lm_head.weight  # shared, not copied
