"""Context-free grammars: compile time, first mask and per-token mask time, structgen vs peers.

The shipped `grammars/json.lark` and `grammars/sql_select.lark` over the Llama-3.1 tokenizer
(128,256 ids), each fed five realistic sentences (JSON documents of different shapes; SELECT
statements the grammar accepts). Every engine compiles the grammar from scratch (caches cleared),
fills the first mask, then is fed the sentences one after another (the matcher reset between
them, so what the compiled grammar cached stays) token by token: fill the mask, check the token
is in it, accept it. Only the fills are timed; the fill right after the compile is reported as
the first mask and left out of the per-token figures. At the end of each sentence the matcher
must be able to terminate. The engines take turns run by run (run i of each before run i + 1
of any, the order turned every run), eleven runs by default: this shared host's slow spells then
fall on every engine alike, where three runs of one engine after the other had put the JSON
grammar's compile + first mask anywhere between 0.87x and 1.01x of llguidance's.

Engines: structgen and llguidance take the shipped Lark text unchanged (llguidance reads Lark);
xgrammar takes an equivalent EBNF written here (`xgrammar`), and, as extra columns, the shipped
Lark text through its own converter `Grammar.from_lark` (`xgrammar-lark`) and, for JSON, its
built-in JSON grammar (`xgrammar-json`, which only allows an object or array at the top and no
whitespace before it). `structgen-ebnf` is structgen reading that same EBNF text
(`Compiler.ebnf`), as it does when SGLang or vLLM hand it a grammar: one input, two engines.

Python's collector: the setup objects are moved out of its reach with `gc.freeze()` before
anything is timed (`--no-gc-freeze` keeps them in; full collections then scan ~230k objects that
belong to no engine and add 100+ ms pauses on random tokens).

Targets (issue): per-token mask p50 no slower than llguidance's; p99 under 2 ms; compile under
50 ms. Run: `python benchmarks/grammar.py [--grammars json,sql] [--engines ...] [--runs N]`.
Writes `benchmarks/results/grammar.{json,png}`.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from dataclasses import dataclass, field
from typing import Any

from _common import (
    RESULTS,
    fmt,
    load_tokenizer,
    mask_allows,
    median,
    peer,
    percentile,
    pick_named,
    print_table,
    save_figure,
)
from peers import (
    EngineError,
    LLGuidancePeer,
    StructgenPeer,
    XGrammarPeer,
    cold_compile,
)

import structgen
from structgen import Compiler, StructgenError
from structgen.grammar.lark_frontend import load_builtin

ENGINES = (
    "structgen",
    "structgen-ebnf",
    "llguidance",
    "xgrammar",
    "xgrammar-lark",
    "xgrammar-json",
)
XGRAMMAR_THREADS = 1  # one core per engine: the others compile on one thread too
RUN_BUDGET_S = 15.0  # stop repeating a (grammar, engine) pair once its runs took this long
P99_TARGET_US = 2000.0
COMPILE_TARGET_MS = 50.0
# compiled once per engine, untimed: imports, per-vocabulary tables, one-time setup
WARM_UP_LARK = 'start: "[" NUMBER ("," WORD)* "]"\nNUMBER: /[0-9]+/\nWORD: /[a-z]+/\n'
WARM_UP_EBNF = 'root ::= "[" [0-9]+ ("," [a-z]+)* "]"\n'
# structgen's caches are all cleared before each cold compile (`structgen.clear_caches()`), then
# what is per process or per vocabulary (Unicode tables, the C walk's token table, the tokens by
# first byte) is built again, untimed, by the warm-up grammar — as `regexes.py` does. A
# hand-picked list of memos had left later per-pattern ones warm between runs.

# ---------------------------------------------------------------------------------- grammars

# Equivalent of grammars/json.lark for xgrammar: `%ignore WS` becomes `ws` around every token.
# Strings are right-recursive like xgrammar's built-in JSON grammar: written `"\"" char* "\""`
# with `char` a rule of its own, xgrammar took ~40 ms per mask inside strings.
JSON_EBNF = r"""
root ::= ws value ws
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member ::= string ws ":" ws value
array ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string ::= "\"" chars
chars ::= "\"" | [^"\\\x00-\x1f] chars | "\\" escape chars
escape ::= ["\\/bfnrt] | "u" [0-9a-fA-F]{4}
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [+-]? [0-9]+ )?
ws ::= [ \t\r\n]*
"""

SQL_KEYWORDS = (
    *("SELECT", "DISTINCT", "FROM", "AS", "JOIN", "INNER", "LEFT", "RIGHT", "FULL", "OUTER"),
    *("ON", "WHERE", "GROUP", "HAVING", "BY", "ORDER", "ASC", "DESC", "LIMIT", "OFFSET"),
    *("AND", "OR", "NOT", "LIKE", "IN", "IS", "NULL", "TRUE", "FALSE"),
)

# Equivalent of grammars/sql_select.lark for xgrammar (keywords case-insensitive, added below).
# Whitespace is a rule of its own here as in the Lark text (`_S`, `_o`); xgrammar then checks most
# of the vocabulary at run time wherever a name or keyword can follow whitespace (tens of ms).
SQL_EBNF = r"""
root ::= o select ( o ";" )? o
select ::= SELECT S ( DISTINCT S )? select_list S FROM S table_ref
    join* where? group_by? order_by? limit?
select_list ::= "*" | column ( o "," o column )*
column ::= expr ( S AS S name )? | name "." "*"
table_ref ::= qualified ( S AS S name )?
join ::= S ( join_kind S )? JOIN S table_ref S ON S condition
join_kind ::= INNER | LEFT ( S OUTER )? | RIGHT ( S OUTER )? | FULL ( S OUTER )?
where ::= S WHERE S condition
group_by ::= S GROUP S BY S expr ( o "," o expr )* ( S HAVING S condition )?
order_by ::= S ORDER S BY S order_item ( o "," o order_item )*
order_item ::= expr ( S ( ASC | DESC ) )?
limit ::= S LIMIT S int ( S OFFSET S int )?
condition ::= and_cond ( S OR S and_cond )*
and_cond ::= not_cond ( S AND S not_cond )*
not_cond ::= NOT S not_cond | predicate
predicate ::= expr o compare o expr
    | expr ( S NOT )? S LIKE S expr
    | expr ( S NOT )? S IN o "(" o expr ( o "," o expr )* o ")"
    | expr S IS ( S NOT )? S NULL
    | "(" o condition o ")"
expr ::= qualified | number | string | NULL | TRUE | FALSE | call
call ::= name o "(" o ( call_args o )? ")"
call_args ::= "*" | ( DISTINCT S )? expr ( o "," o expr )*
qualified ::= name ( "." name )?
name ::= identifier | quoted_identifier
compare ::= "<>" | "!=" | "<=" | ">=" | "=" | "<" | ">"
identifier ::= [A-Za-z_] [A-Za-z0-9_]*
quoted_identifier ::= "\"" ( [^"] | "\"\"" )+ "\""
number ::= "-"? [0-9]+ ( "." [0-9]+ )?
int ::= [0-9]+
string ::= "'" ( [^'] | "''" )* "'"
S ::= [ \t\r\n]+
o ::= [ \t\r\n]*
""" + "".join(
    f"{word} ::= {' '.join(f'[{c.lower()}{c.upper()}]' for c in word)}\n" for word in SQL_KEYWORDS
)

# ---------------------------------------------------------------------------------- sentences


def _large_json() -> str:
    """About 2 KB of compact JSON: an order export with nested records (deterministic)."""
    names = ["Ada Lovelace", "Grace Hopper", "Alan Turing", "Katherine Johnson", "Edsger Dijkstra"]
    items = ["keyboard", 'monitor 27"', "USB-C cable", "desk lamp", "notebook (A5)", "mug"]
    orders = []
    for i in range(8):
        lines = [
            {
                "sku": f"SKU-{1000 + 37 * (i + k)}",
                "item": items[(i + k) % len(items)],
                "qty": 1 + (i * k) % 4,
                "unit_price": round(4.99 + 13.25 * ((i + 2 * k) % 5), 2),
            }
            for k in range(1 + i % 3)
        ]
        orders.append(
            {
                "id": 20240300 + i,
                "customer": {"name": names[i % len(names)], "vip": i % 3 == 0},
                "lines": lines,
                "discount": None if i % 2 else 0.1,
                "shipped": i % 4 != 3,
            }
        )
    return json.dumps({"export": "orders", "version": 2, "orders": orders}, ensure_ascii=False)


JSON_PRETTY = {
    "name": "structgen-bench",
    "version": "0.3.1",
    "private": True,
    "settings": {
        "threads": 1,
        "timeout_s": 2.5,
        "paths": ["/var/lib/bench", "C:\\Temp\\bench"],
        "retry": {"max": 3, "backoff": [0.1, 0.5, 2], "jitter": None},
    },
    "features": [],
    "owners": [{"name": "Zoë Müller", "email": "zoe@example.org"}],
}

JSON_SENTENCES = [
    (
        "nested",
        '{"user": {"id": 1, "name": "Ada", "roles": ["admin", "dev"], "address": {"city": '
        '"London", "zip": null, "geo": [51.5072, -0.1276]}}, "active": true, "meta": {"tags": '
        '[[], [{}], [[1, 2], [3]]], "note": ""}}',
    ),
    (
        "escapes_unicode",
        r'{"quote": "She said \"hi\"\n", "path": "C:\\Users\\ada\\file.txt", "url": '
        r'"https:\/\/example.com\/a?b=1&c=2", "control": "tab\there\r\nend\b\f", "bmp": '
        r'"caf\u00e9 \u6771\u4eac", "pair": "\ud83d\ude80", "raw": "naïve café — 東京 🚀 Ωmega"}',
    ),
    (
        "numbers",
        "[0, -0, 7, -42, 3.14159, -0.5, 10.0, 1e10, 1E-7, 2.5e+3, -6.02214076e23, "
        "123456789012345678, 0.000001, 4.9e-324, 1.7976931348623157e308, -1, 100]",
    ),
    ("pretty", json.dumps(JSON_PRETTY, indent=4, ensure_ascii=False)),
    ("large_2kb", _large_json()),
]

SQL_SENTENCES = [
    (
        "simple",
        "SELECT id, name, email FROM users WHERE active = TRUE ORDER BY name ASC LIMIT 50;",
    ),
    (
        "join_where",
        "SELECT DISTINCT u.name, COUNT(*) AS n FROM users AS u\n"
        "LEFT JOIN orders AS o ON o.user_id = u.id\n"
        "WHERE u.age >= 18 AND (u.city IN ('Paris', 'Rome') OR u.email LIKE '%@example.com')\n"
        "  AND o.note IS NOT NULL\n"
        "GROUP BY u.name ORDER BY n DESC LIMIT 10;",
    ),
    (
        "aggregate",
        "SELECT c.name AS customer, COUNT(DISTINCT o.id) AS orders, SUM(o.total) AS revenue\n"
        "FROM customers AS c\n"
        "INNER JOIN orders AS o ON o.customer_id = c.id\n"
        "WHERE o.created_at >= '2024-01-01' AND o.status NOT IN ('cancelled', 'refunded')\n"
        "GROUP BY c.name\n"
        "HAVING SUM(o.total) > 1000\n"
        "ORDER BY revenue DESC, customer\n"
        "LIMIT 20 OFFSET 40;",
    ),
    (
        "lowercase_quoted",
        'select p."Product Name", p.price from products as p left outer join categories as cat '
        "on p.category_id = cat.id where p.description like '%children''s%' or (p.price < 9.99 "
        "and not p.discontinued = true) order by p.price desc;",
    ),
    (
        "multi_join",
        "SELECT e.department, MAX(e.salary) AS top_salary, MIN(e.hired) AS first_hire\n"
        "FROM employees AS e\n"
        "    RIGHT JOIN departments AS d ON d.id = e.department_id\n"
        "    FULL OUTER JOIN offices AS f ON f.id = d.office_id\n"
        "WHERE e.salary IS NOT NULL AND e.manager_id <> -1\n"
        "    AND f.city IN ('Berlin', 'Lisbon', 'Osaka')\n"
        "GROUP BY e.department\n"
        "ORDER BY top_salary DESC\n"
        "LIMIT 5",
    ),
]


@dataclass
class Sentence:
    name: str
    text: str
    tokens: list[int] = field(default_factory=list)


@dataclass
class Suite:
    name: str
    builtin: str  # the shipped grammar's name
    sentences: list[Sentence]
    sources: dict[str, str | None] = field(default_factory=dict)  # engine -> grammar text

    @property
    def tokens(self) -> int:
        return sum(len(s.tokens) for s in self.sentences)


def build_suites() -> list[Suite]:
    import lark

    json_lark, sql_lark = load_builtin("json"), load_builtin("sql_select")
    suites = [
        Suite(
            "json",
            "json",
            [Sentence(n, t) for n, t in JSON_SENTENCES],
            {
                "structgen": json_lark,
                "structgen-ebnf": JSON_EBNF,
                "llguidance": json_lark,
                "xgrammar": JSON_EBNF,
                "xgrammar-lark": json_lark,
                "xgrammar-json": "builtin",
            },
        ),
        Suite(
            "sql",
            "sql_select",
            [Sentence(n, t) for n, t in SQL_SENTENCES],
            {
                "structgen": sql_lark,
                "structgen-ebnf": SQL_EBNF,
                "llguidance": sql_lark,
                "xgrammar": SQL_EBNF,
                "xgrammar-lark": sql_lark,
                "xgrammar-json": None,
            },
        ),
    ]
    for suite in suites:  # every sentence is in the shipped grammar's language, per Lark itself
        parser = lark.Lark(load_builtin(suite.builtin), parser="earley")
        for s in suite.sentences:
            parser.parse(s.text)
            if suite.name == "json":
                json.loads(s.text)
    return suites


# ---------------------------------------------------------------------------------- engines


class StructgenEngine(StructgenPeer):
    warm_up_source = WARM_UP_LARK

    def warm_up(self) -> None:
        self.compile(self.warm_up_source)
        self.fill()

    def clear_caches(self) -> None:
        structgen.clear_caches()  # (the shared terminal automata and lexers too)
        self.warm_up()  # (untimed: the per-process and per-vocabulary tables)

    def build(self, compiler: Compiler, source: str) -> Any:
        return compiler.grammar(source)

    def compile(self, source: str) -> None:
        try:
            self.use(self.build(Compiler(self.vocab), source))
        except StructgenError as e:
            raise EngineError(str(e)) from e


class StructgenEbnfEngine(StructgenEngine):
    """structgen reading the same GBNF-style EBNF text xgrammar gets (`Compiler.ebnf`)."""

    name = "structgen-ebnf"
    warm_up_source = WARM_UP_EBNF

    def build(self, compiler: Compiler, source: str) -> Any:
        return compiler.ebnf(source)


class LLGuidanceEngine(LLGuidancePeer):
    def warm_up(self) -> None:
        self.compile(WARM_UP_LARK)
        self.fill()

    def clear_caches(self) -> None:
        pass

    def compile(self, source: str) -> None:
        self.use(self.llg.grammar_from("lark", source))


class XGrammarEngine(XGrammarPeer):
    """xgrammar from an EBNF text (`xgrammar`), from Lark text through `Grammar.from_lark`
    (`xgrammar-lark`) or its built-in JSON grammar (`xgrammar-json`, source "builtin")."""

    def __init__(self, name: str, tokenizer: Any, vocab_size: int, info: Any = None) -> None:
        super().__init__(tokenizer, vocab_size, threads=XGRAMMAR_THREADS, info=info)
        self.name = name

    def warm_up(self) -> None:
        self.clear_caches()
        self.use(self.compiler.compile_grammar(WARM_UP_EBNF))
        self.fill()

    def compile(self, source: str) -> None:
        try:
            if source == "builtin":
                grammar = self.xgr.Grammar.builtin_json_grammar()
            elif self.name == "xgrammar-lark":
                grammar = self.xgr.Grammar.from_lark(source)
            else:
                grammar = self.xgr.Grammar.from_ebnf(source, root_rule_name="root")
            self.use(self.compiler.compile_grammar(grammar))
        except RuntimeError as e:
            raise EngineError(str(e).splitlines()[0]) from e


# ---------------------------------------------------------------------------------- driver


def new_result(sentences: list[Sentence]) -> dict[str, Any]:
    """An engine's empty record for one grammar (`measure_run` fills it)."""
    return {
        "compile_ms": [],
        "first_ms": [],
        "token_us": {s.name: [] for s in sentences},
        "failures": {},
        "seconds": 0.0,
    }


def measure_run(engine: Any, source: str, sentences: list[Sentence], out: dict[str, Any]) -> None:
    """One cold run into `out`: clear caches, compile, first fill, then every sentence token by
    token (the matcher reset between sentences). Per-token times are kept per sentence; an
    `EngineError` becomes the record's "error"."""
    started = time.perf_counter()
    try:
        compile_ms, first_ms = cold_compile(engine, source)
    except EngineError as e:
        out.clear()
        out["error"] = f"error: {e}"[:300]
        return
    out["compile_ms"].append(compile_ms)
    out["first_ms"].append(first_ms)
    for k, sentence in enumerate(sentences):
        times = out["token_us"][sentence.name]
        failure = None
        if k:
            engine.reset()
        for n, token in enumerate(sentence.tokens):
            if n or k:
                t0 = time.perf_counter()
                engine.fill()
                times.append((time.perf_counter() - t0) * 1e6)
            if not mask_allows(engine.bitmask, token):
                failure = (n, token, "not in the mask")
                break
            if not engine.accept(token):
                failure = (n, token, "refused by accept")
                break
        else:
            if not engine.can_terminate():
                failure = (len(sentence.tokens), -1, "cannot terminate at the end")
        if failure is not None:
            out["failures"].setdefault(sentence.name, failure)
    out["seconds"] += time.perf_counter() - started


def measure(
    engines: list[Any], sources: dict[str, str], sentences: list[Sentence], runs: int
) -> dict[str, dict[str, Any]]:
    """`runs` cold runs of each engine on one grammar, interleaved: run i of every engine comes
    before run i + 1 of any (the order turned each run), so a slow spell of this shared host
    falls on all engines alike rather than on whichever ran then. An engine stops repeating once
    its runs took `RUN_BUDGET_S`."""
    present = [e for e in engines if sources.get(e.name) is not None]
    out = {e.name: new_result(sentences) for e in present}
    for run in range(runs):
        shift = run % len(present) if present else 0
        for engine in present[shift:] + present[:shift]:
            record = out[engine.name]
            if "error" in record or record["seconds"] > RUN_BUDGET_S:
                continue
            measure_run(engine, sources[engine.name], sentences, record)
    return out


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    if "error" in result:
        return result
    both = [c + f for c, f in zip(result["compile_ms"], result["first_ms"])]
    pooled = [t for times in result["token_us"].values() for t in times]
    result.update(
        runs_done=len(result["compile_ms"]),
        compile=median(result["compile_ms"]),
        first=median(result["first_ms"]),
        compile_first=median(both),
        p50=percentile(pooled, 50),
        p99=percentile(pooled, 99),
        max=max(pooled, default=float("nan")),
        per_sentence={
            name: {"p50": percentile(times, 50), "p99": percentile(times, 99)}
            for name, times in result["token_us"].items()
        },
        ok=not result["failures"],
    )
    return result


# ---------------------------------------------------------------------------------- report


def cell(result: dict[str, Any] | None, key: str, sentence: str | None = None) -> str:
    if result is None:
        return "n/a"
    if "error" in result:
        return "error"
    if sentence is None:
        return fmt(result[key]) + ("" if result["ok"] else " ✗")
    mark = " ✗" if sentence in result["failures"] else ""
    return fmt(result["per_sentence"][sentence][key]) + mark


def ratio(ours: dict[str, Any] | None, theirs: dict[str, Any] | None, key: str) -> float:
    if not ours or not theirs or "error" in ours or "error" in theirs:
        return float("nan")
    return float(ours[key] / theirs[key]) if theirs[key] else float("nan")


def report(
    suites: list[Suite], engines: list[str], results: dict[str, dict[str, Any]], decode: Any
) -> None:
    rows = [
        [f"{suite.name}/{s.name}", len(s.text), len(s.tokens), s.text[:56].replace("\n", "⏎")]
        for suite in suites
        for s in suite.sentences
    ]
    print_table(["sentence", "chars", "tokens", "text"], rows)
    both = {"structgen", "llguidance"} <= set(engines)
    for key, title in (
        ("compile", "compile, ms (median of runs)"),
        ("first", "first mask after compile, ms"),
        ("compile_first", "compile + first mask, ms"),
    ):
        print(f"\n{title} (lower is better; ✗ = a sentence token refused or cannot terminate)")
        headers = ["grammar", *engines] + (["structgen/llguidance"] if both else [])
        rows = []
        for suite in suites:
            r = results[suite.name]
            row = [suite.name, *(cell(r.get(e), key) for e in engines)]
            if both:
                row.append(fmt(ratio(r.get("structgen"), r.get("llguidance"), key)))
            rows.append(row)
        print_table(headers, rows)
    for key, title in (
        ("p50", "per-token mask fill p50, µs"),
        ("p99", "per-token mask fill p99, µs"),
    ):
        print(f"\n{title} (all sentences pooled, then each; first mask after compile excluded)")
        headers = ["grammar / sentence", *engines] + (["structgen/llguidance"] if both else [])
        rows = []
        for suite in suites:
            r = results[suite.name]
            row = [suite.name, *(cell(r.get(e), key) for e in engines)]
            if both:
                row.append(fmt(ratio(r.get("structgen"), r.get("llguidance"), key)))
            rows.append(row)
            for s in suite.sentences:
                row = [f"  {s.name}", *(cell(r.get(e), key, s.name) for e in engines)]
                if both:
                    ours, llg = r.get("structgen"), r.get("llguidance")
                    value = float("nan")
                    if ours and llg and "error" not in ours and "error" not in llg:
                        a, b = ours["per_sentence"][s.name][key], llg["per_sentence"][s.name][key]
                        value = a / b if b else float("nan")
                    row.append(fmt(value))
                rows.append(row)
        print_table(headers, rows)
    problems = []
    for suite in suites:
        tokens = {s.name: s.tokens for s in suite.sentences}
        for engine, r in results[suite.name].items():
            if "error" in r:
                problems.append(f"{suite.name}/{engine}: {r['error']}")
                continue
            for name, (n, token, what) in r["failures"].items():
                where = f"token {n}"
                if token >= 0:
                    before = decode(tokens[name][max(0, n - 4) : n])
                    where += f" ({token} {decode([token])!r}, after ...{before!r})"
                problems.append(f"{suite.name}/{name}/{engine}: {where} {what}")
    if problems:
        print("\nproblems:\n  " + "\n  ".join(problems))
    if both:
        print_targets(suites, results)


def print_targets(suites: list[Suite], results: dict[str, dict[str, Any]]) -> None:
    marks: dict[str, list[tuple[str, bool]]] = {"p50": [], "p99": [], "compile": [], "ok": []}
    rows = []
    for suite in suites:
        ours, llg = results[suite.name].get("structgen"), results[suite.name].get("llguidance")
        if not ours or "error" in ours:
            rows.append([suite.name, "error", "-", "-", "-", "-"])
            for key in marks:
                marks[key].append((suite.name, False))
            continue
        p50 = ratio(ours, llg, "p50")
        checks = {
            "p50": p50 <= 1.0,
            "p99": ours["p99"] < P99_TARGET_US,
            "compile": ours["compile"] < COMPILE_TARGET_MS,
            "ok": ours["ok"],
        }
        for key, met in checks.items():
            marks[key].append((suite.name, met))

        def tick(key: str, checks: dict[str, bool] = checks) -> str:
            return "✓" if checks[key] else "✗"

        rows.append(
            [
                suite.name,
                f"{fmt(p50)} {tick('p50')}",
                f"{fmt(ours['p99'] / 1e3)} {tick('p99')}",
                f"{fmt(ours['compile'])} {tick('compile')}",
                fmt(ours["compile_first"]),
                "yes ✓" if ours["ok"] else "no ✗",
            ]
        )
    print("\ntargets, structgen")
    print_table(
        [
            "grammar",
            "p50 / llguidance (<= 1)",
            "p99, ms (< 2)",
            "compile, ms (< 50)",
            "compile+first, ms (info)",
            "all tokens in mask, terminates",
        ],
        rows,
    )

    def line(label: str, found: list[tuple[str, bool]]) -> None:
        missed = [name for name, ok in found if not ok]
        verdict = "NOT MET" if missed else "MET"
        tail = f" (missed: {', '.join(missed)})" if missed else ""
        print(f"  {label}: {verdict}, {len(found) - len(missed)}/{len(found)}{tail}")

    print("summary:")
    line("per-token mask p50 no slower than llguidance", marks["p50"])
    line("per-token mask p99 under 2 ms", marks["p99"])
    line("compile under 50 ms", marks["compile"])
    line("every sentence token in the mask, can terminate", marks["ok"])


def plot(suites: list[Suite], engines: list[str], results: dict[str, dict[str, Any]]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("compile_first", "compile + first mask, ms"),
        ("p50", "per-token mask p50, µs"),
        ("p99", "per-token mask p99, µs"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4.8))
    width = 0.8 / max(1, len(engines))
    for ax, (key, label) in zip(axes, panels):
        for k, engine in enumerate(engines):
            xs, ys, hatches = [], [], []
            for n, suite in enumerate(suites):
                r = results[suite.name].get(engine)
                if r and "error" not in r and r[key] == r[key]:
                    xs.append(n + (k - (len(engines) - 1) / 2) * width)
                    ys.append(r[key])
                    hatches.append("" if r["ok"] else "//")
            ax.bar(xs, ys, width, label=engine, color=f"C{k}", hatch=hatches)
        if key == "p99":
            ax.axhline(P99_TARGET_US, color="grey", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(suites)), [s.name for s in suites])
        ax.set_yscale("log")
        ax.set_ylabel(f"{label} (log)")
    axes[0].legend(fontsize=8)
    fig.suptitle(
        "Grammars (shipped json.lark, sql_select.lark), Llama-3.1 tokenizer "
        "(missing bar: n/a or error; hatched: a sentence token refused)"
    )
    fig.tight_layout()
    return save_figure(fig, "grammar.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--grammars", help="comma-separated: json,sql (default: both)")
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated engines")
    parser.add_argument(
        "--runs", type=int, default=11, help="cold runs per grammar and engine (interleaved)"
    )
    parser.add_argument(
        "--no-gc-freeze",
        action="store_true",
        help="leave the setup objects to Python's collector (full collections then take 100+ ms)",
    )
    args = parser.parse_args()

    suites = pick_named(build_suites(), args.grammars, parser, "grammars")
    wanted_engines = args.engines.split(",")

    tokenizer = load_tokenizer("llama3_1")
    for suite in suites:
        for s in suite.sentences:
            s.tokens = tokenizer.encode(s.text, add_special_tokens=False)

    engines: list[Any] = []
    setup: dict[str, float] = {}
    start = time.perf_counter()
    ours = StructgenEngine(tokenizer)
    setup["structgen"] = time.perf_counter() - start
    vocab_size = ours.vocab.size
    if "structgen" in wanted_engines:
        engines.append(ours)
    if "structgen-ebnf" in wanted_engines:
        engines.append(StructgenEbnfEngine(tokenizer, vocab=ours.vocab))
    if "llguidance" in wanted_engines and peer("llguidance") is not None:
        start = time.perf_counter()
        engines.append(LLGuidanceEngine(tokenizer, vocab_size))
        setup["llguidance"] = time.perf_counter() - start
    xgr_names = [e for e in ENGINES if e.startswith("xgrammar") and e in wanted_engines]
    if xgr_names and peer("xgrammar") is not None:
        start = time.perf_counter()
        first = XGrammarEngine(xgr_names[0], tokenizer, vocab_size)
        setup["xgrammar"] = time.perf_counter() - start
        engines.append(first)
        engines += [XGrammarEngine(n, tokenizer, vocab_size, first.info) for n in xgr_names[1:]]
    for engine in engines:
        engine.clear_caches()
        engine.warm_up()
    gc.collect()
    if not args.no_gc_freeze:
        # The tokenizers, Lark, the peers' modules... (~230k objects) would otherwise be scanned
        # by every full collection that the timed code happens to trigger: 120-190 ms pauses
        # that land on random tokens and are no engine's own cost. A server would do the same.
        gc.freeze()
    names = [e.name for e in engines]

    results: dict[str, dict[str, Any]] = {s.name: {} for s in suites}
    for suite in suites:
        measured = measure(engines, suite.sources, suite.sentences, args.runs)
        for name, raw_result in measured.items():
            result = summarize(raw_result)
            results[suite.name][name] = result
            status = result.get("error") or ("ok" if result["ok"] else "token refused")
            elapsed = raw_result.get("seconds", 0.0)
            print(f"  {suite.name:<5} {name:<14} {elapsed:6.1f} s  {status}", flush=True)

    print(
        f"\nLlama-3.1 tokenizer, {vocab_size} ids; {args.runs} cold runs per cell, the engines "
        f"interleaved run by run (fresh compile, caches cleared; fewer when an engine's runs "
        f"exceed {RUN_BUDGET_S:.0f} s); per run the sentences "
        f"are fed one after another through one matcher (reset between them); xgrammar "
        f"max_threads={XGRAMMAR_THREADS}; "
        + ("gc not frozen" if args.no_gc_freeze else "gc.freeze() after setup")
    )
    print("one-time setup, s: " + ", ".join(f"{k} {v:.2f}" for k, v in setup.items()))
    print()
    report(suites, names, results, tokenizer.decode)

    RESULTS.mkdir(parents=True, exist_ok=True)
    raw = {
        "tokenizer": "llama3_1",
        "vocab_size": vocab_size,
        "runs": args.runs,
        "setup_s": setup,
        "xgrammar_max_threads": XGRAMMAR_THREADS,
        "gc_freeze": not args.no_gc_freeze,
        "suites": [
            {
                "name": suite.name,
                "shipped_grammar": f"grammars/{suite.builtin}.lark",
                "sources": {e: suite.sources.get(e) for e in names},
                "sentences": [
                    {"name": s.name, "text": s.text, "tokens": s.tokens} for s in suite.sentences
                ],
                "results": results[suite.name],
            }
            for suite in suites
        ],
    }
    for suite in raw["suites"]:
        for r in suite["results"].values():
            for name, times in r.get("token_us", {}).items():
                r["token_us"][name] = [round(t, 1) for t in times]
    json_path = RESULTS / "grammar.json"
    json_path.write_text(json.dumps(raw, indent=1, default=float) + "\n", encoding="utf-8")
    print(f"\nwrote {json_path} and {plot(suites, names, results)}")


if __name__ == "__main__":
    main()
