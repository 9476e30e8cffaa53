"""The sampling rules on fixed logits against plain-Python reference computations (no model)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from structgen import GenerationError, SamplingParams
from structgen.generate.params import BeamParams
from structgen.generate.sampling import (
    PenaltyState,
    SamplingTensors,
    apply_min_p,
    apply_penalties,
    apply_temperature,
    apply_top_k,
    apply_top_p,
    choose_tokens,
)

VOCAB = 40


def fixed_logits(rows: int = 3, seed: int = 0) -> torch.Tensor:
    rng = random.Random(seed)
    return torch.tensor([[rng.gauss(0, 2) for _ in range(VOCAB)] for _ in range(rows)])


def kept(logits: torch.Tensor) -> list[set[int]]:
    return [{i for i, x in enumerate(row.tolist()) if x != -math.inf} for row in logits]


def softmax(row: list[float]) -> list[float]:
    top = max(row)
    exps = [math.exp(x - top) for x in row]
    total = sum(exps)
    return [e / total for e in exps]


class TestFilters:
    @pytest.mark.parametrize("k", [1, 3, 10, 0])
    def test_top_k_keeps_the_k_largest(self, k: int) -> None:
        logits = fixed_logits()
        out = apply_top_k(logits.clone(), torch.full((3,), k))
        for row, got in zip(logits.tolist(), kept(out)):
            order = sorted(range(VOCAB), key=lambda i: -row[i])
            assert got == set(order[: k or VOCAB])

    def test_top_k_per_row(self) -> None:
        logits = fixed_logits()
        out = apply_top_k(logits.clone(), torch.tensor([1, 0, 5]))
        assert [len(s) for s in kept(out)] == [1, VOCAB, 5]

    @pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.9, 0.999, 1.0])
    def test_top_p_keeps_the_smallest_set_reaching_p(self, p: float) -> None:
        logits = fixed_logits()
        out = apply_top_p(logits.clone(), torch.full((3,), p))
        for row, got in zip(logits.tolist(), kept(out)):
            probs = softmax(row)
            order = sorted(range(VOCAB), key=lambda i: -probs[i])
            expected, mass = set(), 0.0
            for i in order:
                if mass >= p and p < 1:
                    break
                expected.add(i)
                mass += probs[i]
            assert got == expected

    @pytest.mark.parametrize("min_p", [0.0, 0.05, 0.2, 0.9])
    def test_min_p_drops_tokens_below_a_fraction_of_the_top(self, min_p: float) -> None:
        logits = fixed_logits()
        out = apply_min_p(logits.clone(), torch.full((3,), min_p))
        for row, got in zip(logits.tolist(), kept(out)):
            probs = softmax(row)
            expected = {i for i, q in enumerate(probs) if q >= min_p * max(probs) - 1e-9}
            assert got == expected

    def test_temperature_divides_and_zero_is_left_alone(self) -> None:
        logits = fixed_logits()
        out = apply_temperature(logits.clone(), torch.tensor([0.5, 0.0, 2.0]))
        assert torch.allclose(out[0], logits[0] / 0.5)
        assert torch.equal(out[1], logits[1])
        assert torch.allclose(out[2], logits[2] / 2.0)


class TestPenalties:
    def test_arithmetic(self) -> None:
        logits = torch.tensor([[2.0, -2.0, 1.0, -1.0, 0.5]])
        prompts = [[0, 1]]  # seen in the prompt
        state = PenaltyState(prompts, 5, "cpu")
        state.add(torch.tensor([0, 0, 0]), torch.tensor([2, 2, 3]))  # generated: 2 twice, 3 once
        out = apply_penalties(
            logits.clone(),
            state.counts,
            state.seen,
            repetition=torch.tensor([2.0]),
            frequency=torch.tensor([0.25]),
            presence=torch.tensor([0.5]),
        )
        expected = [
            2.0 / 2,  # prompt token, positive: divided
            -2.0 * 2,  # prompt token, negative: multiplied
            1.0 / 2 - 0.25 * 2 - 0.5,  # generated twice
            -1.0 * 2 - 0.25 * 1 - 0.5,  # generated once
            0.5,  # never seen
        ]
        assert out[0].tolist() == pytest.approx(expected)


class TestChoose:
    def params(self, *items: SamplingParams) -> SamplingTensors:
        return SamplingTensors.build(items, "cpu")

    def test_greedy_is_argmax(self) -> None:
        logits = fixed_logits()
        ids = choose_tokens(logits.clone(), self.params(*[SamplingParams()] * 3), [None] * 3)
        assert ids.tolist() == logits.argmax(-1).tolist()

    def test_seeded_draws_are_reproducible_and_inside_the_kept_set(self) -> None:
        logits = fixed_logits()
        params = [
            SamplingParams(temperature=1.0, top_k=3, seed=1),
            SamplingParams(),
            SamplingParams(temperature=0.7, top_p=0.5, seed=2),
        ]
        draws = []
        for _ in range(2):
            gens: list[torch.Generator | None] = [
                torch.Generator().manual_seed(1),
                None,
                torch.Generator().manual_seed(2),
            ]
            seq = [
                choose_tokens(logits.clone(), self.params(*params), gens).tolist()
                for _ in range(20)
            ]
            draws.append(seq)
        assert draws[0] == draws[1]
        top3 = set(logits[0].argsort(descending=True)[:3].tolist())
        assert {s[0] for s in draws[0]} <= top3
        assert {s[1] for s in draws[0]} == {int(logits[1].argmax())}
        assert len({s[0] for s in draws[0]}) > 1  # it does sample

    def test_a_masked_row_never_draws_a_masked_token(self) -> None:
        logits = fixed_logits(1)
        logits[0, 5:] = -math.inf
        gens: list[torch.Generator | None] = [torch.Generator().manual_seed(3)]
        params = self.params(SamplingParams(temperature=2.0))
        seen = {choose_tokens(logits.clone(), params, gens).item() for _ in range(50)}
        assert seen <= set(range(5))


class TestValidation:
    @pytest.mark.parametrize(
        ("kwargs", "name"),
        [
            ({"top_p": 1.5}, "top_p"),
            ({"top_p": 0.0}, "top_p"),
            ({"temperature": -0.1}, "temperature"),
            ({"top_k": -1}, "top_k"),
            ({"min_p": 2.0}, "min_p"),
            ({"repetition_penalty": 0.0}, "repetition_penalty"),
            ({"max_new_tokens": 0}, "max_new_tokens"),
            ({"temperature": float("nan")}, "temperature"),
            ({"stop": ("",)}, "stop"),
            ({"seed": -1}, "seed"),
        ],
    )
    def test_bad_values_name_the_field(self, kwargs: dict[str, object], name: str) -> None:
        with pytest.raises(GenerationError, match=name):
            SamplingParams(**kwargs)  # type: ignore[arg-type]

    def test_beam_params(self) -> None:
        with pytest.raises(GenerationError, match="num_beams"):
            BeamParams(num_beams=0)
        with pytest.raises(GenerationError, match="num_return"):
            BeamParams(num_beams=2, num_return=3)

    def test_a_single_stop_string_is_accepted(self) -> None:
        assert SamplingParams(stop="END").stop == ("END",)  # type: ignore[arg-type]
