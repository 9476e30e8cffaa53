"""`fill_bitmasks`: a batch's rows in one call give exactly the masks `Matcher.fill_bitmask`
gives row by row — numpy and torch, any row order, None rows, terminated matchers, cold
grammars computed on threads — and bad arguments get typed errors."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import structgen.matcher as matcher_module
from structgen import (
    ArgumentError,
    CompileLimits,
    Compiler,
    Matcher,
    allocate_bitmask,
    fill_bitmasks,
)
from tests.conftest import load_tokenizer, load_vocab

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"enum": ["a", "bb"]}},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
DOC = {"name": "Ada", "age": 36, "tags": ["a", "bb"]}


def _batch(limits: CompileLimits) -> list[Matcher | None]:
    """Matchers of three kinds of constraint at different points (and one finished)."""
    vocab = load_vocab("gpt2")
    tokenizer = load_tokenizer("gpt2")
    compiler = Compiler(vocab, limits=limits)
    schema = compiler.json_schema(SCHEMA)
    regex = compiler.regex(r"[a-z]{2,6}@[a-z]+\.(com|org)")
    grammar = compiler.grammar(
        'start: "(" expr ")"\nexpr: NUMBER ("+" NUMBER)*\n%import common.NUMBER'
    )
    doc = tokenizer.encode(json.dumps(DOC))
    out: list[Matcher | None] = []
    for n in (0, 3, 7, len(doc) - 1):
        m = Matcher(schema)
        assert m.accept_tokens(doc[:n]) == n
        out.append(m)
    out.append(None)
    for text in ("", "bob@", "bob@mail.c"):
        m = Matcher(regex)
        ids = tokenizer.encode(text)
        assert m.accept_tokens(ids) == len(ids)
        out.append(m)
    m = Matcher(grammar)
    assert m.accept_tokens(tokenizer.encode("(1+2")) == len(tokenizer.encode("(1+2"))
    out.append(m)
    done = Matcher(schema)
    assert done.accept_tokens(doc) == len(doc)
    assert done.accept_token(vocab.eos_token_ids[0])
    out.append(done)
    return out


def _one_by_one(matchers: list[Matcher | None], width: int) -> np.ndarray:
    out = np.zeros((len(matchers), width), dtype=np.int32)
    for row, m in enumerate(matchers):
        if m is None:
            out[row] = -1
        else:
            m.fill_bitmask(out, row)
    return out


def test_numpy_rows_equal_one_by_one_in_any_order() -> None:
    matchers = _batch(CompileLimits())
    width = allocate_bitmask(1, load_vocab("gpt2").size, backend="numpy").shape[1]
    want = _one_by_one(matchers, width)
    got = np.full((len(matchers), width), 7, dtype=np.int32)
    fill_bitmasks(matchers, got)
    assert np.array_equal(got, want)
    order = list(reversed(range(len(matchers))))
    shuffled = np.full((len(matchers) + 2, width), 7, dtype=np.int32)
    fill_bitmasks(matchers, shuffled, rows=[r + 2 for r in order])
    assert np.array_equal(shuffled[2:][order], want)
    assert (shuffled[:2] == 7).all()  # rows nobody names stay as they were


@pytest.fixture
def pool_under_gil(monkeypatch: pytest.MonkeyPatch) -> None:
    """The crew runs here even under the GIL (where `fill_bitmasks` leaves it out)."""
    monkeypatch.setattr(matcher_module, "POOL_UNDER_GIL", True)


def test_threads_under_the_gil_fill_on_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the GIL helpers only hand the GIL around: `threads` is not used there."""
    used: list[int] = []
    monkeypatch.setattr(matcher_module, "_fill_shared", lambda *args: used.append(args[3]))
    matchers = _batch(CompileLimits(max_cached_masks=4081))  # (cold: rows to compute)
    bitmask = allocate_bitmask(len(matchers), load_vocab("gpt2").size, backend="numpy")
    fill_bitmasks(matchers, bitmask, threads=4)
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    assert used == ([] if gil else [4])


@pytest.mark.usefixtures("pool_under_gil")
def test_torch_bitmask_and_threads() -> None:
    torch = pytest.importorskip("torch")  # (the rest of this file runs without torch)
    matchers = _batch(CompileLimits())
    size = load_vocab("gpt2").size
    bitmask = allocate_bitmask(len(matchers), size)
    assert isinstance(bitmask, torch.Tensor)
    want = _one_by_one(matchers, bitmask.shape[1])
    fill_bitmasks(matchers, bitmask, threads=3)
    assert np.array_equal(bitmask.numpy(), want)


@pytest.mark.usefixtures("pool_under_gil")
def test_cold_grammars_on_threads_agree_with_one_thread() -> None:
    # Limits unique to this test: every mask is a first visit, computed on the crew.
    cold = _batch(CompileLimits(max_cached_masks=4079))
    reference = _batch(CompileLimits(max_cached_masks=4077))
    width = allocate_bitmask(1, load_vocab("gpt2").size, backend="numpy").shape[1]
    got = np.zeros((len(cold), width), dtype=np.int32)
    fill_bitmasks(cold, got, threads=4)
    assert np.array_equal(got, _one_by_one(reference, width))
    # the masks are cached now: a second fill gives the same
    again = np.zeros_like(got)
    fill_bitmasks(cold, again, threads=4)
    assert np.array_equal(again, got)


def test_bad_arguments() -> None:
    matchers = _batch(CompileLimits())[:2]
    good = allocate_bitmask(2, load_vocab("gpt2").size, backend="numpy")
    with pytest.raises(ArgumentError, match="2 matchers but 1 rows"):
        fill_bitmasks(matchers, good, rows=[0])
    with pytest.raises(ArgumentError, match="rows must be >= 0"):
        fill_bitmasks(matchers, good, rows=[0, -1])
    with pytest.raises(ArgumentError, match="with a row 2"):
        fill_bitmasks(matchers, good, rows=[0, 2])
    with pytest.raises(ArgumentError, match="2-D int32"):
        fill_bitmasks(matchers, good.astype(np.int64))
    with pytest.raises(ArgumentError, match="Matcher or None"):
        fill_bitmasks(["x"], good)  # type: ignore[list-item]
    with pytest.raises(ArgumentError, match="threads"):
        fill_bitmasks(matchers, good, threads=0.5)  # type: ignore[arg-type]
    fill_bitmasks([], good)  # nothing to do


@pytest.mark.usefixtures("pool_under_gil")
def test_rows_are_copies_of_the_cached_masks() -> None:
    # fill_bitmask and fill_bitmasks read the grammar's cached (read-only) masks without a
    # copy of their own: writing into the filled rows (as a sampler may) or into
    # allowed_mask()'s result must not change what the next fill gives.
    torch = pytest.importorskip("torch")
    matchers = [m for m in _batch(CompileLimits()) if m is not None]
    width = allocate_bitmask(1, load_vocab("gpt2").size, backend="numpy").shape[1]
    want = _one_by_one(matchers, width)
    for row, m in enumerate(matchers):
        mask = m.allowed_mask()
        assert mask.flags.writeable
        mask[:] = 0
        rows = np.zeros((1, width), dtype=np.int32)
        m.fill_bitmask(rows, 0)
        rows[0] = 0
        tensor = torch.zeros((1, width), dtype=torch.int32)
        m.fill_bitmask(tensor, 0)
        tensor.zero_()
        assert np.array_equal(m.allowed_mask(), want[row])
    batch = np.zeros((len(matchers), width), dtype=np.int32)
    fill_bitmasks(matchers, batch)
    batch[:] = 0
    fill_bitmasks(matchers, batch, threads=2)
    assert np.array_equal(batch, want)
    assert np.array_equal(_one_by_one(matchers, width), want)


def test_rows_of_other_widths() -> None:
    """A bitmask wider than the vocabulary's words (padded logits) gets zeros past them; a
    narrower one the words that fit — by both fills; a row past the end is an ArgumentError."""
    matchers = [m for m in _batch(CompileLimits()) if m is not None][:2]
    width = allocate_bitmask(1, load_vocab("gpt2").size, backend="numpy").shape[1]
    want = _one_by_one(matchers, width)
    for extra in (3, -2):
        one = np.full((2, width + extra), 7, dtype=np.int32)
        batch = np.full((2, width + extra), 7, dtype=np.int32)
        for row, m in enumerate(matchers):
            m.fill_bitmask(one, row)
        fill_bitmasks(matchers, batch)
        for got in (one, batch):
            assert np.array_equal(got[:, : min(width, width + extra)], want[:, : width + extra])
            assert (got[:, width:] == 0).all()
    with pytest.raises(ArgumentError, match="with a row 5"):
        matchers[0].fill_bitmask(np.zeros((2, width), dtype=np.int32), 5)


def test_a_finished_row_filled_again_and_again() -> None:
    """A row whose output is complete (its mask with the stop ids joined, made once and reused
    while its state stays) gives the same row at every fill, whatever was written into the
    rows between; a step on gives the new state's row, and `allowed_mask` stays a fresh copy."""
    vocab = load_vocab("gpt2")
    tokenizer = load_tokenizer("gpt2")
    compiled = Compiler(vocab).grammar('start: "a" | "ab"')
    done = Matcher(compiled)
    assert done.accept_tokens(tokenizer.encode("a")) == 1
    assert done.can_terminate()
    width = allocate_bitmask(1, vocab.size, backend="numpy").shape[1]
    want = _one_by_one([done], width)
    eos = next(iter(vocab.eos_token_ids))
    assert want[0, eos >> 5] >> (eos & 31) & 1
    batch = np.zeros((2, width), dtype=np.int32)
    for _ in range(3):
        fill_bitmasks([done, None], batch)
        assert np.array_equal(batch[:1], want)
        batch[:] = 0
    mask = done.allowed_mask()
    mask[:] = 0
    fill_bitmasks([done], batch)
    assert np.array_equal(batch[:1], want)
    assert done.accept_tokens(tokenizer.encode("b")) == 1
    fill_bitmasks([done], batch)
    assert np.array_equal(batch[:1], _one_by_one([done], width))
    assert not np.array_equal(batch[:1], want)


def test_a_finished_row_whose_stop_id_is_a_text_token() -> None:
    """Where a stop id is also a text token, a finished row still gives `allowed_mask`'s row
    at every fill (the text stop taken out of the grammar's words, then the stops joined), and
    the joined row is made once while the state stays."""
    from structgen.vocab import Vocabulary

    vocab = Vocabulary.from_tokens([b"a", b"b", b"!", b"ab", b"a!"], eos_token_ids=[2])
    assert not vocab.is_special(2)
    matchers = [Matcher(Compiler(vocab).regex(r"a+(!b)?")) for _ in range(2)]
    for matcher in matchers:
        assert matcher.accept_token(0) and matcher.can_terminate()
    batch = allocate_bitmask(2, vocab.size, backend="numpy")
    joined = []
    for _ in range(3):
        fill_bitmasks(matchers, batch)
        for row, matcher in enumerate(matchers):
            assert np.array_equal(batch[row], matcher.allowed_mask())
        joined.append(matchers[0]._joined)
    assert joined[0] is not None and all(j is joined[0] for j in joined)


def test_numpy_bitmasks_of_another_type_or_shape_are_refused() -> None:
    matchers = [m for m in _batch(CompileLimits()) if m is not None][:2]
    width = allocate_bitmask(1, load_vocab("gpt2").size, backend="numpy").shape[1]
    for bad in (
        np.zeros((2, width), dtype=np.int64),
        np.zeros((2 * width,), dtype=np.int32),
        np.zeros((1, width), dtype=np.int32),
    ):
        with pytest.raises(ArgumentError, match="bitmask must be"):
            fill_bitmasks(matchers, bad)
