"""Outputs within the budget: valid and finished JSON from HF `generate` under each engine.

For each of the first `--schemas` MaskBench-dev schemas (by name) that every engine compiles, the
default model (SmolLM2-135M-Instruct) is asked greedily, through `model.generate` with the same
chat prompt and `--tokens` new tokens, for an instance of the schema, once per engine:

- `structgen`: `sg.LogitsProcessor(grammar)` (generate mode, the default);
- `structgen+budget`: `sg.LogitsProcessor(grammar, max_new_tokens=N)` (budget-aware closing);
- `xgrammar`: `xgrammar.contrib.hf.LogitsProcessor`;
- `llguidance`: its matcher as a logits processor (as in benchmarks/generate.py).

Reported per engine: outputs finished (EOS before the budget, or complete at it), valid
(jsonschema with format checks, and ajv when `make fixtures` installed it), finished but invalid
(must be 0), and cut off by the budget. Targets (issue 18): no finished-but-invalid output;
structgen valid at least as often as every peer; with the budget, every output complete.

Run: `python benchmarks/budgets.py [--schemas 32] [--tokens 128]`. Writes
`benchmarks/results/budgets.json`.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from typing import Any

from _common import RESULTS, print_table
from generate import SCHEMAS, pick_schemas
from peers import LLGuidanceProcessors, XGrammarProcessors

import structgen as sg
from structgen import _assets


def prompt_ids(tokenizer: Any, schema: Any) -> list[int]:
    text = (
        "Reply with a JSON instance of this JSON Schema, nothing else.\n"
        f"{json.dumps(schema)[:1500]}"
    )
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )
    return list(tokenizer(chat, add_special_tokens=False)["input_ids"])


def judge(text: str, schema: Any, eos_seen: bool, ajv: Any) -> dict[str, bool]:
    import jsonschema

    try:
        value = json.loads(text)
    except ValueError:
        return {"parsed": False, "valid": False, "finished": eos_seen}
    checker = jsonschema.FormatChecker()
    try:
        cls = jsonschema.validators.validator_for(schema)
        cls(schema, format_checker=checker).validate(value)
        valid = True
    except jsonschema.ValidationError:
        valid = False
    except jsonschema.SchemaError:
        valid = False
    if valid and ajv is not None:
        valid = bool(ajv(schema, [text])[0])
    return {"parsed": True, "valid": valid, "finished": True}


def ajv_checker() -> Any:
    """ajv's verdicts on texts (None when the oracle is not installed); no verdict = valid."""
    try:
        from tests.oracles.ajv import oracle

        check = oracle()
    except Exception:  # the oracle is optional here
        return None

    def verdicts(schema: Any, texts: list[str]) -> list[bool]:
        try:
            return [bool(v) for v in check.validate_texts(schema, texts)]
        except Exception:  # ajv cannot compile the schema: jsonschema's verdict stands
            return [True] * len(texts)

    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schemas", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    folder = _assets.default_model_dir()
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    size = model.config.vocab_size
    vocab = sg.Vocabulary.from_hf(tok, size=size, generation_config=model.generation_config)
    compiler = sg.Compiler(vocab)
    peers: dict[str, Any] = {}
    for name, cls in (("xgrammar", XGrammarProcessors), ("llguidance", LLGuidanceProcessors)):
        try:
            peers[name] = cls(tok, size)
        except ImportError:
            print(f"({name} is not installed: skipped)")
    schemas = pick_schemas(vocab, args.schemas, peers, folder=SCHEMAS)
    ajv = ajv_checker()
    eos = set(vocab.eos_token_ids)
    engines = ["structgen", "structgen+budget", *peers]
    counts = {e: {"finished": 0, "valid": 0, "finished_invalid": 0, "cut": 0} for e in engines}
    seconds = dict.fromkeys(engines, 0.0)
    rows: list[dict[str, Any]] = []
    for name, schema in schemas:
        ids = torch.tensor([prompt_ids(tok, schema)])
        grammar = compiler.json_schema(schema)
        for engine in engines:
            if engine == "structgen":
                processor: Any = sg.LogitsProcessor(grammar)
            elif engine == "structgen+budget":
                processor = sg.LogitsProcessor(grammar, max_new_tokens=args.tokens)
            else:
                processor = peers[engine].processor([schema])
            start = time.perf_counter()
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=args.tokens,
                    do_sample=False,
                    logits_processor=[processor],
                    pad_token_id=tok.pad_token_id or tok.eos_token_id,
                )
            seconds[engine] += time.perf_counter() - start
            new = out[0, ids.shape[1] :].tolist()
            eos_seen = any(t in eos for t in new)
            text = tok.decode([t for t in new if t not in eos], skip_special_tokens=True)
            verdict = judge(text, schema, eos_seen, ajv)
            c = counts[engine]
            c["finished"] += verdict["finished"]
            c["valid"] += verdict["valid"]
            c["finished_invalid"] += verdict["finished"] and not verdict["valid"]
            c["cut"] += not verdict["finished"]
            rows.append({"schema": name, "engine": engine, "text": text[:300], **verdict})
        marks = [
            f"{r['engine']}={'valid' if r['valid'] else 'invalid' if r['finished'] else 'cut'}"
            for r in rows[-len(engines) :]
        ]
        print(f"{name}: {', '.join(marks)}", flush=True)
    n = len(schemas)
    table = [
        [
            e,
            f"{counts[e]['valid']}/{n}",
            f"{counts[e]['finished']}/{n}",
            counts[e]["finished_invalid"],
            counts[e]["cut"],
            f"{seconds[e]:.0f}",
        ]
        for e in engines
    ]
    print(f"\n{n} schemas, {args.tokens} new tokens, greedy, SmolLM2-135M-Instruct, HF generate")
    print_table(["engine", "valid", "finished", "finished, invalid", "cut off", "s"], table)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "budgets.json"
    path.write_text(json.dumps({"tokens": args.tokens, "counts": counts, "rows": rows}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
