"""A deterministic MaskBench-dev sample: never accept an invalid instance (under jsonschema's
verdicts in the data, and under ajv); report the pass rate."""

from __future__ import annotations

import json
import random

import pytest

from structgen.schema import SchemaOptions
from tests.conftest import load_tokenizer, load_vocab, shared_dir
from tests.schema._runner import ACCEPT, Accepted, accepts, ajv_report, compile_or_reason

SAMPLE = 100
MIN_PASS_RATE = 0.85  # measured 0.9+ on this sample; a drop below is a regression
MIN_GENERATE_RATE = (
    0.8  # measured 0.89; valid instances with unlisted keys or in schema-foreign order fail
)


@pytest.mark.parametrize("mode", ["accept", "generate"])
def test_maskbench_sample(mode: str) -> None:
    """Accept mode is MaskBench's protocol (every valid instance accepted); generate mode must
    never accept an invalid one either, and keeps most valid ones (json.dumps' spelling)."""
    options = ACCEPT if mode == "accept" else SchemaOptions(mode="generate", whitespace="spaced")
    folder = shared_dir("maskbench-dev")
    files = sorted(random.Random(1).sample(sorted(folder.glob("*.json")), SAMPLE))
    vocab, tokenizer = load_vocab("llama3_1"), load_tokenizer("llama3_1")
    passed = 0
    invalidated: list[str] = []
    accepted: list[Accepted] = []
    for path in files:
        data = json.loads(path.read_text())
        compiled, _ = compile_or_reason(vocab, data["schema"], options)
        if compiled is None:
            continue
        ok = True
        for test in data["tests"]:
            text = json.dumps(test["data"], ensure_ascii=False)
            verdict = accepts(compiled, tokenizer, text)
            if verdict and not test["valid"]:
                invalidated.append(f"{path.stem}: {text[:80]}")
            if verdict:
                accepted.append((path.stem, data["schema"], text))
            ok &= verdict == test["valid"]
        passed += ok
    assert not invalidated, invalidated
    ajv_report(accepted).assert_clean(min_checked=int(0.9 * len(accepted)))
    print(f"maskbench sample ({mode}): {passed}/{SAMPLE} schemas pass")
    assert passed >= (MIN_PASS_RATE if mode == "accept" else MIN_GENERATE_RATE) * SAMPLE
