"""Time of building a vocabulary from a loaded Hugging Face tokenizer, structgen vs peers.

Targets (issue 2): Llama-3.1 (128k) within 1.5x of the faster peer and under 1 s; Gemma-3 (262k)
under 2 s. Run: `python benchmarks/vocab.py [--repeat N]`.
"""

from __future__ import annotations

import argparse

from _common import load_tokenizer, median, peer, print_table, time_call

from structgen import Vocabulary
from structgen._assets import TOKENIZERS
from structgen.masks import _walker
from structgen.masks._walker import native_walk


def ready_to_mask(vocab: Vocabulary) -> object:
    """Everything a first mask needs: the token trie and the C walk's byte-ordered table."""
    _walker._NATIVE.clear()  # measure the build, not the per-vocabulary cache
    return vocab.trie, native_walk(vocab)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    llguidance_hf = peer("llguidance.hf")
    xgrammar = peer("xgrammar")
    rows = []
    for name in TOKENIZERS:
        tokenizer = load_tokenizer(name)
        ours, vocab = time_call(lambda t=tokenizer: Vocabulary.from_hf(t), repeat=args.repeat)
        with_trie, _ = time_call(
            lambda t=tokenizer: ready_to_mask(Vocabulary.from_hf(t)), repeat=args.repeat
        )
        llg = xgr = float("nan")
        if llguidance_hf is not None:
            llg_times, _ = time_call(
                lambda t=tokenizer: llguidance_hf.from_tokenizer(t), repeat=args.repeat
            )
            llg = median(llg_times)
        if xgrammar is not None:
            xgr = median(
                time_call(
                    lambda t=tokenizer, n=vocab.size: xgrammar.TokenizerInfo.from_huggingface(
                        t, vocab_size=n
                    ),
                    repeat=args.repeat,
                )[0]
            )
        best_peer = min(llg, xgr)
        rows.append(
            [
                name,
                vocab.size,
                f"{median(ours) * 1e3:.0f}",
                f"{median(with_trie) * 1e3:.0f}",
                f"{llg * 1e3:.0f}",
                f"{xgr * 1e3:.0f}",
                f"{median(with_trie) / best_peer:.2f}",
            ]
        )
    print(f"median of {args.repeat} runs, milliseconds (lower is better)")
    print_table(
        [
            "tokenizer",
            "ids",
            "structgen",
            "structgen ready to mask",
            "llguidance",
            "xgrammar",
            "ratio vs best peer",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
