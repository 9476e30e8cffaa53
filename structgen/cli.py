"""`structgen ...` commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    from structgen._demo import run_demo

    run_demo(prompt=args.prompt, max_new_tokens=args.max_new_tokens)
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from structgen._assets import fetch_all

    fetch_all(model=not args.no_model)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `structgen` command."""
    parser = argparse.ArgumentParser(prog="structgen", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="constrained generation on the embedded default model")
    demo.add_argument("--prompt", default=None, help="replace the demo's questions with one")
    demo.add_argument("--max-new-tokens", type=int, default=48)
    demo.set_defaults(func=_demo)
    fetch = sub.add_parser("fetch", help="fetch the pinned tokenizers and the default model")
    fetch.add_argument("--no-model", action="store_true", help="tokenizers only")
    fetch.set_defaults(func=_fetch)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
