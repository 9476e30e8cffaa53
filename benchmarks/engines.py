"""structgen inside vLLM's structured-output manager, beside vLLM's own backends, on the CPU.

Runs in the engines environment (`make test-engines` builds `.venv-engines`):
`.venv-engines/bin/python benchmarks/engines.py`. For each backend (structgen, xgrammar,
guidance) one `StructuredOutputManager` is built from vLLM's own config, as the engine core
builds it; a batch of requests (JSON schemas, a regex, a choice and an EBNF grammar) is
validated by `SamplingParams.verify`, compiled through `grammar_init`, and then decoded in
lockstep: every step calls the manager's `grammar_bitmask` for the whole batch (what vLLM's
scheduler does once per step) and `accept_tokens` for each request, feeding the tokens of a
fixed valid answer. Reported: time from `grammar_init` to every grammar being ready (compile),
and per-step `grammar_bitmask` time for the batch, median and p99. Every backend must accept
every answer to its end. The model is the default one's tokenizer (SmolLM2, 49,152 ids).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from typing import Any

from _common import RESULTS, percentile, print_table

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # no GPU: vLLM's CPU platform

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    },
    "required": ["name", "age", "email", "tags"],
    "additionalProperties": False,
}
ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["sku", "qty"],
                "additionalProperties": False,
            },
        },
        "paid": {"type": "boolean"},
    },
    "required": ["id", "items", "paid"],
    "additionalProperties": False,
}
EBNF = (
    'root ::= "SELECT " cols " FROM " name (" WHERE " cond)?\n'
    'cols ::= name (", " name)*\nname ::= [a-z_]+\ncond ::= name " = " [0-9]+\n'
)
REQUESTS: list[tuple[str, dict[str, Any], str]] = [
    (
        "json person",
        {"json": PERSON},
        json.dumps(
            {"name": "Ada Lovelace", "age": 36, "email": "ada@example.com", "tags": ["math"]}
        ),
    ),
    (
        "json order",
        {"json": ORDER},
        json.dumps(
            {
                "id": "ABC-1234",
                "items": [{"sku": "x-1", "qty": 2}, {"sku": "y-2", "qty": 1}],
                "paid": True,
            },
        ),  # (json.dumps' layout: what structgen generates; the others allow any whitespace)
    ),
    ("regex", {"regex": r"\(\d{3}\) \d{3}-\d{4}"}, "(555) 123-4567"),
    ("choice", {"choice": ["positive", "negative", "neutral"]}, "negative"),
    ("ebnf", {"grammar": EBNF}, "SELECT name, age FROM users WHERE age = 42"),
]
BACKENDS = ("structgen", "xgrammar", "guidance")


def run_backend(backend: str, model_dir: str, repeat: int) -> dict[str, Any]:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.tokenizers import cached_tokenizer_from_config
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    config = EngineArgs(
        model=model_dir,
        structured_outputs_config={"backend": backend},
        max_model_len=1024,
        max_num_seqs=16,
        enforce_eager=True,
    ).create_engine_config()
    tokenizer = cached_tokenizer_from_config(config.model_config)
    compile_times: list[float] = []
    step_times: list[float] = []
    ok = True
    for run in range(repeat):
        manager = StructuredOutputManager(config)
        requests: dict[str, Any] = {}
        answers: dict[str, list[int]] = {}
        started = time.perf_counter()
        for i, (_name, structured, text) in enumerate(REQUESTS):
            rid = f"{run}-{i}"
            params = SamplingParams(
                max_tokens=256, structured_outputs=StructuredOutputsParams(**structured)
            )
            params.verify(config.model_config, None, config.structured_outputs_config, tokenizer)
            request = Request(rid, [1, 2, 3], params, None)
            manager.grammar_init(request)
            requests[rid] = request
            answers[rid] = [*tokenizer.encode(text, add_special_tokens=False)]
        for request in requests.values():
            while not request.structured_output_request.is_grammar_ready:
                time.sleep(0.0005)
        compile_times.append(time.perf_counter() - started)
        step = 0
        live = list(requests)
        while live:
            t = time.perf_counter()
            manager.grammar_bitmask(requests, live, {})
            step_times.append(time.perf_counter() - t)
            for rid in list(live):
                if step < len(answers[rid]):
                    if not manager.accept_tokens(requests[rid], [answers[rid][step]]):
                        ok = False
                        live.remove(rid)
                else:
                    live.remove(rid)
            step += 1
        manager.clear_backend()
    return {
        "backend": backend,
        "ok": ok,
        "compile_ms_median": 1000 * sorted(compile_times)[len(compile_times) // 2],
        "step_us_p50": 1e6 * percentile(step_times, 50),
        "step_us_p90": 1e6 * percentile(step_times, 90),
        "step_us_p99": 1e6 * percentile(step_times, 99),
        "steps": len(step_times),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import vllm
    from vllm.plugins import load_general_plugins

    from structgen._assets import default_model_dir

    load_general_plugins()
    model_dir = str(default_model_dir())
    results = []
    for backend in args.backends.split(","):
        result = run_backend(backend, model_dir, args.repeat)
        results.append(result)
        print(f"{backend}: {result}", flush=True)
    print()
    print(f"vLLM {vllm.__version__}, batch of {len(REQUESTS)} requests, CPU")
    print_table(
        ["backend", "all accepted", "compile ms", "mask step p50 µs", "p90", "p99"],
        [
            [
                r["backend"],
                "yes" if r["ok"] else "NO",
                f"{r['compile_ms_median']:.1f}",
                f"{r['step_us_p50']:.0f}",
                f"{r['step_us_p90']:.0f}",
                f"{r['step_us_p99']:.0f}",
            ]
            for r in results
        ],
    )
    RESULTS.mkdir(exist_ok=True)
    out = {
        "machine": {"platform": platform.platform(), "processor": platform.processor()},
        "vllm": vllm.__version__,
        "results": results,
    }
    (RESULTS / "engines.json").write_text(json.dumps(out, indent=2))
    print(f"wrote {RESULTS / 'engines.json'}")


if __name__ == "__main__":
    main()
