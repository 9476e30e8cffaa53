"""Generation layouts: which JSON layout the default model writes best under generate mode.

For each of the first `--schemas` MaskBench-dev schemas (by name, small ones, that structgen
compiles), the default model (SmolLM2-135M-Instruct) is asked greedily for an instance, once per
layout of `SchemaOptions(mode="generate", whitespace=...)`: compact (`{"a":1}`), spaced
(json.dumps' default separators, `{"a": 1}`) and indented (json.dumps(indent=2)). Reported per
layout: outputs finished within the budget, finished outputs valid under jsonschema (they must
all be), mean output tokens, and the mean log-probability per token the model itself gave its
output (unconstrained, the same text): higher means the layout is closer to what it would write.
Also accept mode's flexible layout and every spelling, the behaviour before generate mode.
Budget-aware closing is off here, so "finished" is the model ending the output by itself.

Run: `python benchmarks/layouts.py [--schemas 24] [--tokens 160]`. Writes
`benchmarks/results/layouts.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import warnings
from pathlib import Path
from typing import Any

from _common import RESULTS, print_table

SCHEMAS = Path(__file__).resolve().parents[2] / "shared" / "maskbench-dev"
LAYOUTS = ("compact", "spaced", "indented")


def pick(count: int, vocab: Any) -> list[tuple[str, Any]]:
    import structgen as sg

    compiler = sg.Compiler(vocab)
    chosen: list[tuple[str, Any]] = []
    for path in sorted(SCHEMAS.glob("*.json")):
        data = json.loads(path.read_text())
        schema = data["schema"]
        text = json.dumps(schema)
        if len(text) > 1200 or not isinstance(schema, dict):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for layout in LAYOUTS:
                    compiler.json_schema(schema, options=sg.SchemaOptions(whitespace=layout))
        except sg.StructgenError:
            continue
        chosen.append((path.stem, schema))
        if len(chosen) == count:
            break
    return chosen


def mean_logprob(model: Any, prompt_ids: list[int], output_ids: list[int]) -> float:
    """The model's own mean log-probability of `output_ids` after `prompt_ids` (no mask)."""
    import torch

    if not output_ids:
        return float("nan")
    ids = torch.tensor([prompt_ids + output_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp[torch.arange(len(output_ids)), torch.tensor(output_ids)]
    return float(picked.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schemas", type=int, default=24)
    parser.add_argument("--tokens", type=int, default=160)
    args = parser.parse_args()

    import jsonschema

    import structgen as sg

    lm = sg.LM.default()
    vocab = lm.generator.vocab
    tokenizer = lm.tokenizer
    chosen = pick(args.schemas, vocab)
    variants: dict[str, Any] = {
        layout: sg.SchemaOptions(whitespace=layout)  # type: ignore[arg-type]
        for layout in LAYOUTS
    }
    variants["accept (flexible)"] = sg.SchemaOptions(mode="accept")
    stats: dict[str, dict[str, Any]] = {
        k: {"finished": 0, "valid": 0, "invalid": 0, "tokens": [], "logprob": []} for k in variants
    }
    samples: dict[str, list[str]] = {k: [] for k in variants}
    for name, schema in chosen:
        prompt = (
            "Write one JSON instance of this JSON Schema, with realistic values, and nothing "
            f"else.\nSchema: {json.dumps(schema)}"
        )
        model_input, chat = lm.model_input(prompt)
        text = tokenizer.apply_chat_template(
            model_input, add_generation_prompt=True, tokenize=False
        )
        prompt_ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        for key, options in variants.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                grammar = lm.compiler.json_schema(schema, options=options)
            result = lm.generator.generate(
                model_input,
                # closing off: how often the layout lets the model finish by itself
                sg.SamplingParams(max_new_tokens=args.tokens, close_within_budget=False),
                grammar=grammar,
                chat=chat,
            )
            row = stats[key]
            row["tokens"].append(len(result.token_ids))
            out = [t for t in result.token_ids if t not in vocab.eos_token_ids]
            row["logprob"].append(mean_logprob(lm.model, prompt_ids, out))
            if result.finish_reason in ("eos", "stop"):
                row["finished"] += 1
                value = json.loads(result.text)
                if jsonschema.Draft202012Validator(schema).is_valid(value):
                    row["valid"] += 1
                else:
                    row["invalid"] += 1
            if len(samples[key]) < 3:
                samples[key].append(result.text[:160])
        print(f"  {name}", flush=True)
    rows = []
    for key, row in stats.items():
        rows.append(
            [
                key,
                f"{row['finished']}/{len(chosen)}",
                f"{row['valid']}",
                f"{row['invalid']}",
                f"{statistics.mean(row['tokens']):.1f}",
                f"{statistics.mean(row['logprob']):.3f}",
            ]
        )
    print_table(
        ["layout", "finished", "valid", "finished, invalid", "tokens", "mean logprob"], rows
    )
    for key, texts in samples.items():
        print(f"{key}: {texts[0]!r}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "layouts.json").write_text(
        json.dumps(
            {"schemas": [n for n, _ in chosen], "stats": stats, "samples": samples}, indent=1
        )
    )


if __name__ == "__main__":
    main()
