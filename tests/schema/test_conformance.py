"""The official JSON Schema Test Suite (draft 2020-12), token by token with Llama-3.1.

Every valid instance (`json.dumps`) must be accepted and able to stop, every invalid one
rejected, and every accepted one must validate under ajv too (tests/oracles/: ECMA-262
patterns; disagreements only where `checks.KNOWN` explains them). Results per `file/group`
are compared with `conformance_baseline.json`: they may only improve, and an accepted invalid
instance fails the test outright. Regenerate the baseline with
`STRUCTGEN_UPDATE_BASELINE=1 pytest tests/schema/test_conformance.py`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from structgen.schema import SchemaOptions
from tests.conftest import load_tokenizer, load_vocab, shared_dir
from tests.schema._runner import Accepted, ajv_report, run_suite

BASELINE = Path(__file__).with_name("conformance_baseline.json")


def test_suite_never_accepts_invalid_and_does_not_regress() -> None:
    folder = shared_dir("json-schema-test-suite") / "tests" / "draft2020-12"
    accepted: list[Accepted] = []
    vocab, tokenizer = load_vocab("llama3_1"), load_tokenizer("llama3_1")
    results = run_suite(folder, vocab, tokenizer, accepted=accepted)
    invalidated = {k: v["invalidated"] for k, v in results.items() if v["invalidated"]}
    assert not invalidated, f"invalid instances accepted: {invalidated}"
    if os.environ.get("STRUCTGEN_UPDATE_BASELINE"):
        BASELINE.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    baseline = json.loads(BASELINE.read_text())
    regressions = [
        f"{key}: passed {got['passed']} < {want['passed']}"
        for key, want in baseline.items()
        if (got := results.get(key, {"passed": 0}))["passed"] < want["passed"]
    ]
    assert not regressions, "\n".join(regressions)
    total = sum(v["passed"] for v in results.values())
    assert total >= sum(v["passed"] for v in baseline.values())
    # ajv has no verdict on a few groups only (it overflows its stack on two relative-$ref ones)
    ajv_report(accepted).assert_clean(min_checked=int(0.95 * len(accepted)))


def test_generate_mode_never_accepts_invalid() -> None:
    """Generate mode offers a subset of the valid texts (one spelling, a writer's layout, no
    unlisted properties): whatever it accepts of the suite's instances must be valid, and the
    valid instances as json.dumps writes them mostly stay accepted."""
    folder = shared_dir("json-schema-test-suite") / "tests" / "draft2020-12"
    options = SchemaOptions(mode="generate", whitespace="spaced")
    results = run_suite(folder, load_vocab("llama3_1"), load_tokenizer("llama3_1"), options)
    invalidated = {k: v["invalidated"] for k, v in results.items() if v["invalidated"]}
    assert not invalidated, f"invalid instances accepted in generate mode: {invalidated}"
    accept = json.loads(BASELINE.read_text())
    passed = sum(v["passed"] for v in results.values())
    assert passed >= 0.9 * sum(v["passed"] for v in accept.values())
