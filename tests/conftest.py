"""Shared test helpers: real fixtures by name, with CI=true turning "missing" into a failure."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from structgen import _assets

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
SHARED = Path(__file__).resolve().parents[2] / "shared"
TOKENIZER_NAMES = tuple(_assets.TOKENIZERS)


def missing(what: str) -> None:
    """Skip for a missing fixture locally; fail under CI=true (fixtures must be fetched there)."""
    message = f"{what} is missing; run `make fixtures`"
    if IN_CI:
        pytest.fail(message + " (CI=true: missing fixtures are failures)")
    pytest.skip(message)


@functools.cache
def load_tokenizer(name: str) -> Any:
    """A real Hugging Face tokenizer from the pinned fixtures, loaded once per process."""
    from transformers import AutoTokenizer

    try:
        folder = _assets.tokenizer_dir(name, fetch=False)
    except FileNotFoundError:
        missing(f"tokenizer fixture {name!r}")
    return AutoTokenizer.from_pretrained(str(folder))


@functools.cache
def load_vocab(name: str) -> Any:
    """`Vocabulary.from_hf` of a fixture tokenizer, built once per process."""
    from structgen import Vocabulary

    return Vocabulary.from_hf(load_tokenizer(name))


def default_model_dir() -> Path:
    try:
        return _assets.default_model_dir(fetch=False)
    except FileNotFoundError:
        missing("the default model")
        raise  # unreachable: missing() raises


def shared_dir(name: str) -> Path:
    path = SHARED / name
    if not path.exists():
        missing(f"../shared/{name}")
    return path


@pytest.fixture(params=["native", "numpy"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run a test with the C trie walk and again with the numpy fallback (caches cleared)."""
    from structgen import compiler
    from structgen.masks import _walker
    from structgen.masks._kernel import native_available

    if request.param == "native" and not native_available():
        pytest.skip("the C trie walk is not built")
    if request.param == "numpy":
        monkeypatch.setattr(_walker, "native_walk", lambda vocab: None)
    compiler._CACHE.clear()
    yield request.param
    compiler._CACHE.clear()
