"""Random and malformed inputs for the reliability tests and `benchmarks/fuzz.py`.

Plain `random.Random` generators (a seed gives a case, so every failure is reproducible by its
seed), a byte-level synthetic vocabulary in which every byte string can be spelled, a random
walker that samples allowed tokens until the constraint terminates, and a wall-clock bound
that turns a hang into a test failure.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import string
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from structgen import CompiledGrammar, Matcher, Vocabulary
from structgen.masks import unpack_bitmask

# ---------------------------------------------------------------------- the vocabulary

_MULTI = [
    b'{"',
    b'":',
    b'": ',
    b'",',
    b'", "',
    b"true",
    b"false",
    b"null",
    b"12",
    b"0.5",
    b"-1",
    b"e+",
    b"ab",
    b"abc",
    b"\xc3\xa9",  # é
    b"\xe2\x82\xac",  # €
    b"\xf0\x9f\x98\x80",  # 😀
    b"\\n",
    b'\\"',
    b"\\u00",
    b"},",
    b"],",
    b"[]",
    b"{}",
    b"  ",
    b"\n",
]


def byte_vocab() -> Vocabulary:
    """Every single byte plus some multi-byte pieces and an EOS: any text can be spelled."""
    tokens: list[bytes | None] = [bytes([b]) for b in range(256)] + list(_MULTI) + [None]
    return Vocabulary.from_tokens(tokens, eos_token_ids=[len(tokens) - 1])


# ---------------------------------------------------------------------- the random walker

_CLOSERS = frozenset((b"}", b"]", b'"'))


def random_walk(
    grammar: CompiledGrammar, rng: random.Random, *, max_tokens: int = 200
) -> bytes | None:
    """Sample allowed tokens (leaning towards closing and stopping) until EOS is accepted.

    Returns the bytes of the accepted output, or None when the walk did not terminate within
    `max_tokens` or the constraint allowed nothing (a dead end is reported by the caller).
    """
    vocab = grammar.vocab
    matcher = Matcher(grammar)
    eos = set(vocab.eos_token_ids)
    out = bytearray()
    for _ in range(max_tokens):
        allowed = np.flatnonzero(unpack_bitmask(matcher.allowed_mask(), vocab.size))
        if not len(allowed):
            raise AssertionError(f"dead end: no token allowed after {bytes(out)!r}")
        ending = [int(t) for t in allowed if int(t) in eos]
        if ending and (rng.random() < 0.35 or len(out) > max_tokens // 2):
            assert matcher.accept_token(ending[0])
            return bytes(out)
        text = [int(t) for t in allowed if int(t) not in eos]
        if not text:
            assert matcher.accept_token(ending[0])
            return bytes(out)
        closing = [
            t for t in text if vocab.token_bytes(t)[:1] and vocab.token_bytes(t)[0] in _CLOSERS
        ]
        pool = closing if closing and (rng.random() < 0.3 or len(out) > max_tokens // 3) else text
        token = rng.choice(pool)
        assert matcher.accept_token(token), f"a token from the mask was refused: {token}"
        out += vocab.token_bytes(token)
    return None


# ---------------------------------------------------------------------- bounds


class Hang(AssertionError):
    """A case ran past its time bound."""


@contextlib.contextmanager
def time_bound(seconds: float) -> Iterator[None]:
    """Raise `Hang` in this (main) thread after `seconds` of wall time."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"ran past its {seconds}s bound")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------------- valid schemas


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("abcxyz_") for _ in range(rng.randint(1, 6)))


def valid_schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """A random schema using keywords structgen enforces (for the soundness fuzz)."""
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const"]
    if depth < 3:
        kinds += ["object", "object", "array", "anyOf", "allOf", "oneOf", "not", "types"]
    kind = rng.choice(kinds)
    if kind == "string":
        out: dict[str, Any] = {"type": "string"}
        if rng.random() < 0.5:
            out["maxLength"] = rng.randint(0, 8)
        if rng.random() < 0.3:
            out["minLength"] = rng.randint(0, 3)
        if rng.random() < 0.25:
            out["pattern"] = rng.choice(["^[a-c]+$", "^x", "[0-9]", "^(ab|c)*$", "é|z"])
        if rng.random() < 0.15:
            out["format"] = rng.choice(["date", "email", "ipv4", "uuid", "time"])
        return out
    if kind in ("integer", "number"):
        out = {"type": kind}
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if rng.random() < 0.3:
                out[key] = rng.choice([0, 1, -3, 10, 2.5, -0.5, 100])
        if kind == "integer" and rng.random() < 0.2:
            out["multipleOf"] = rng.choice([2, 3, 5])
        return out
    if kind == "boolean" or kind == "null":
        return {"type": kind}
    if kind == "enum":
        pool: list[Any] = [1, "a", None, True, 2.5, "é", [1], {"k": 1}, "", 0]
        return {"enum": rng.sample(pool, rng.randint(1, 4))}
    if kind == "const":
        return {"const": rng.choice([1, "x", None, False, [1, "a"], {"a": None}])}
    if kind == "types":
        return {"type": rng.sample(["string", "integer", "null", "boolean", "array"], 2)}
    if kind == "object":
        names = list(dict.fromkeys(_word(rng) for _ in range(rng.randint(0, 4))))
        out = {
            "type": "object",
            "properties": {n: valid_schema(rng, depth + 1) for n in names},
        }
        if names and rng.random() < 0.6:
            out["required"] = rng.sample(names, rng.randint(1, len(names)))
        roll = rng.random()
        if roll < 0.5:
            out["additionalProperties"] = False
        elif roll < 0.65:
            out["additionalProperties"] = valid_schema(rng, depth + 1)
        if rng.random() < 0.15:
            out["maxProperties"] = rng.randint(0, 3)
        if rng.random() < 0.1:
            out["minProperties"] = rng.randint(0, 2)
        return out
    if kind == "array":
        out = {"type": "array", "items": valid_schema(rng, depth + 1)}
        if rng.random() < 0.4:
            out["maxItems"] = rng.randint(0, 4)
        if rng.random() < 0.3:
            out["minItems"] = rng.randint(0, 2)
        if rng.random() < 0.2:
            out["prefixItems"] = [valid_schema(rng, depth + 1) for _ in range(rng.randint(1, 2))]
        return out
    if kind == "not":
        return {"not": {"type": rng.choice(["string", "integer", "object", "array"])}}
    branches = [valid_schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]
    return {kind: branches}


# ---------------------------------------------------------------------- malformed schemas

_KEYWORDS = [
    "type",
    "properties",
    "required",
    "items",
    "prefixItems",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "$ref",
    "$defs",
    "definitions",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "additionalProperties",
    "patternProperties",
    "propertyNames",
    "minItems",
    "maxItems",
    "contains",
    "minContains",
    "uniqueItems",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "minProperties",
    "unevaluatedProperties",
    "$dynamicRef",
]


def _junk(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if roll < 0.15:
        return rng.choice([None, True, False, -1, 0, 3, 1e308, -1e-9, 2**70, float("nan")])
    if roll < 0.3:
        return rng.choice(["", "string", "#/$defs/a", "#/nope", "(", "[a-", "\\", "é", "a{99999}"])
    if roll < 0.45 and depth < 4:
        return [_junk(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if roll < 0.55:
        return "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 8)))
    return malformed_schema(rng, depth + 1)


def malformed_schema(rng: random.Random, depth: int = 0) -> Any:
    """Schema-shaped junk: wrong types for keywords, dangling and cyclic `$ref`s, deep nesting,
    huge enums, contradictions — anything a server might be sent."""
    if depth > 5 or rng.random() < 0.1:
        return rng.choice([True, False, {}, {"type": "string"}, {"$ref": "#"}])
    out: dict[str, Any] = {}
    for key in rng.sample(_KEYWORDS, rng.randint(1, 5)):
        roll = rng.random()
        if key == "$ref" and roll < 0.7:
            out[key] = rng.choice(["#", "#/$defs/a", "#/$defs/b", "#/definitions/x", "#/nope"])
        elif key in ("$defs", "definitions") and roll < 0.7:
            out[key] = {
                n: malformed_schema(rng, depth + 1) for n in ("a", "b", "x")[: rng.randint(1, 3)]
            }
        elif key == "enum" and roll < 0.2:
            out[key] = list(range(rng.randint(500, 3000)))
        elif key == "properties" and roll < 0.7:
            out[key] = {
                _word(rng): malformed_schema(rng, depth + 1) for _ in range(rng.randint(0, 3))
            }
        else:
            out[key] = _junk(rng, depth)
    return out


def deep_schema(depth: int) -> dict[str, Any]:
    """Arrays nested `depth` deep."""
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


# ---------------------------------------------------------------------- regexes

_REGEX_ATOMS = ["a", "b", "c", "é", ".", "\\d", "\\w", "\\s", "[a-c]", "[^a]", "(", ")", "|", "*",
                "+", "?", "{2}", "{1,3}", "{0,}", "^", "$", "\\", "[", "]", "{", "}", "(?:", "*?",
                "\\.", "-", "x{1000}", "{99999}"]  # fmt: skip


def random_regex(rng: random.Random) -> str:
    """Regex-looking text: often valid, often unbalanced or malformed."""
    return "".join(rng.choice(_REGEX_ATOMS) for _ in range(rng.randint(1, 12)))


PATHOLOGICAL_REGEXES = [
    "(a*)*b",
    "(a|a)*",
    "(a|aa)*c",
    "((a+)+)+$",
    "(x+x+)+y",
    "(.*a){20}",
    "a{1000}{1000}",
    "(x{1,1000}){1,1000}",
    ".{0,100000}",
    "[\\s\\S]{5000}",
    "(a?){30}a{30}",
    "(\\w+\\s?)*$",
    "((((((((((a))))))))))*",
    "(" * 300 + "a" + ")" * 300,
    "(?:a|b|c|d|e|f|g|h|i|j|k|l|m|n|o|p){1,64}",
    "\\p{L}",
    "(a)\\1",
    "(?=a)a",
]

# ---------------------------------------------------------------------- grammars

BAD_GRAMMARS = [
    "start: missing_rule",
    "start: a\na: a",
    'start: a\na: a "x"',
    'start: "unterminated',
    "start: /[unclosed/",
    "%import common.NOPE\nstart: NOPE",
    "start: x\nx: y\ny: x",
    "start: (",
    'start: "a"{3,2}',
    "",
    "start:",
    'start: A\nA: A "b"',
    'start: "a" | "b"\n%ignore UNDEFINED',
    'start: a+\na: ""',
    "start: " + " | ".join(f'"k{i}"' for i in range(3000)),
    "start: " + "(" * 200 + '"a"' + ")" * 200,
]


def mutate_text(text: str, rng: random.Random) -> str:
    """Delete, duplicate or insert a few characters (grammar syntax fuzz)."""
    chars = list(text)
    for _ in range(rng.randint(1, 4)):
        if not chars:
            break
        i = rng.randrange(len(chars))
        roll = rng.random()
        if roll < 0.4:
            del chars[i]
        elif roll < 0.7:
            chars.insert(i, rng.choice('()[]{}|*+?:"/%\n ~.'))
        else:
            chars.insert(i, chars[i])
    return "".join(chars)


def dumps_ok(value: Any) -> bool:
    """Whether `value` survives JSON (NaN and infinities do not)."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


def bounded_fullmatch(python: Any, text: str, seconds: float = 5.0) -> bool | None:
    """Python's `re.fullmatch` as the oracle, or None when its backtracking ran past `seconds`
    (patterns like `(a?){30}a{30}` are exponential for it — not for structgen's automata)."""
    try:
        with time_bound(seconds):
            return python.fullmatch(text) is not None
    except Hang:
        return None
