"""`lark_to_ir`: Lark grammar text -> IR, checked against Lark itself.

* every shipped grammar loads, and every symbol of every rule is a rule or a terminal;
* EBNF, templates, inlined rules, filtered tokens, %import and %ignore map to the IR;
* terminal flags (`i`, `s`) and the common.lark rewrites mean what Lark's matcher means;
* errors are `GrammarError`s that carry a position or name the terminal.
"""

from __future__ import annotations

import itertools
import re

import lark
import pytest

from structgen.automata import compile_ast, literal_node, parse_regex
from structgen.errors import GrammarError
from structgen.grammar.ir import Grammar
from structgen.grammar.lark_frontend import builtin_names, lark_to_ir, load_builtin

SHIPPED = ["arithmetic", "csv", "json", "sql_select", "tool_call"]


def rules_of(grammar: Grammar, lhs: str) -> set[tuple[str, ...]]:
    return {rule.rhs for rule in grammar.rules if rule.lhs == lhs}


def terminal(grammar: Grammar, name: str) -> object:
    return next(t.pattern for t in grammar.terminals if t.name == name)


def accepts(grammar: Grammar, name: str, text: str) -> bool:
    return compile_ast(terminal(grammar, name)).accepts(text.encode())  # type: ignore[arg-type]


class TestShippedGrammarsLoad:
    def test_the_library_is_complete(self) -> None:
        assert set(SHIPPED) <= set(builtin_names())
        assert load_builtin("json") == load_builtin("json.lark")
        with pytest.raises(GrammarError, match="no shipped grammar"):
            load_builtin("cobol")

    @pytest.mark.parametrize("name", SHIPPED)
    def test_loads_into_a_closed_ir(self, name: str) -> None:
        grammar = lark_to_ir(load_builtin(name))
        rule_names = {rule.lhs for rule in grammar.rules}
        terminal_names = [t.name for t in grammar.terminals]
        assert grammar.start == "start" and "start" in rule_names
        assert len(terminal_names) == len(set(terminal_names))
        assert not rule_names & set(terminal_names)
        for rule in grammar.rules:
            assert type(rule.lhs) is str
            for symbol in rule.rhs:
                assert type(symbol) is str
                assert symbol in rule_names or symbol in terminal_names, (rule, symbol)
        assert set(grammar.ignore) <= set(terminal_names)
        for t in grammar.terminals:  # a terminal must consume text
            assert not compile_ast(t.pattern).accepts(b"")
        assert len(grammar.fingerprint()) == 64
        assert lark_to_ir(load_builtin(name)) == grammar  # deterministic

    def test_ignore_terminals_are_carried_over(self) -> None:
        grammar = lark_to_ir(load_builtin("json"))
        assert grammar.ignore == ("WS",)
        assert accepts(grammar, "WS", " \t\r\n ") and not accepts(grammar, "WS", "\f")
        assert lark_to_ir(load_builtin("csv")).ignore == ()


class TestConstructs:
    def test_filtered_and_anonymous_tokens_stay_in_rules(self) -> None:
        grammar = lark_to_ir('start: "(" _inner ")" _SEMI\n_inner: A\nA: "a"\n_SEMI: ";"\n')
        assert rules_of(grammar, "start") == {("LPAR", "_inner", "RPAR", "_SEMI")}
        assert rules_of(grammar, "_inner") == {("A",)}
        assert {t.name for t in grammar.terminals} == {"LPAR", "RPAR", "A", "_SEMI"}
        assert terminal(grammar, "LPAR") == literal_node("(")

    def test_inlined_rules_are_rules(self) -> None:
        grammar = lark_to_ir('?start: item | item "," start\n_sep: ","\nitem: "x" _sep?\n')
        assert rules_of(grammar, "start") == {("item",), ("item", "COMMA", "start")}
        assert rules_of(grammar, "item") == {("X", "_sep"), ("X",)}
        assert rules_of(grammar, "_sep") == {("COMMA",)}

    def test_ebnf_operators_expand_to_the_same_language(self) -> None:
        text = 'start: A? B* C+ D~2 E~1..3 [F] ("g" | "h")\n' + "".join(
            f'{c}: "{c.lower()}"\n' for c in "ABCDEF"
        )
        grammar = lark_to_ir(text)
        parser = lark.Lark(text, parser="earley")
        derived = _derive_all(grammar, max_len=10)
        assert {"cddeg", "abbcddeeeh", "cccddeh"} <= derived
        candidates = set(derived)
        for s in derived:  # every single-letter edit of every derived string
            for i in range(len(s) + 1):
                for c in "abcdefgh":
                    candidates |= {s[:i] + c + s[i:], s[:i] + c + s[i + 1 :]}
                candidates.add(s[:i] + s[i + 1 :])
        for s in candidates:
            if len(s) <= 10:
                assert (s in derived) == _lark_accepts(parser, s), s

    def test_templates_are_expanded(self) -> None:
        grammar = lark_to_ir('_sep{x, s}: x (s x)*\nstart: _sep{"a", ","}\n')
        derived = _derive_all(grammar, max_len=5)
        assert {"a", "a,a", "a,a,a"} <= derived and "a," not in derived

    def test_left_and_right_recursion(self) -> None:
        grammar = lark_to_ir('start: start "+" N | N tail\nN: "1"\ntail: "x" tail |\n')
        assert rules_of(grammar, "start") == {("start", "PLUS", "N"), ("N", "tail")}
        assert rules_of(grammar, "tail") == {("X", "tail"), ()}
        assert {"1", "1xx", "1x+1", "1+1+1"} <= _derive_all(grammar, max_len=5)

    def test_common_imports_resolve(self) -> None:
        grammar = lark_to_ir("start: NUMBER WORD\n%import common (NUMBER, WORD, WS)\n%ignore WS\n")
        assert grammar.ignore == ("WS",)
        assert accepts(grammar, "NUMBER", "12.5e3") and not accepts(grammar, "NUMBER", "1.2.3")
        assert accepts(grammar, "WORD", "Hello") and not accepts(grammar, "WORD", "héllo")

    def test_shipped_grammars_can_be_imported(self) -> None:
        grammar = lark_to_ir("start: value\n%import json (value, WS)\n%ignore WS\n")
        assert "value" in {rule.lhs for rule in grammar.rules}
        assert grammar.ignore == ("WS",)

    def test_priorities_are_ignored(self) -> None:
        assert lark_to_ir('start: A\nA.5: "a"\n').terminals[0].pattern == literal_node("a")

    def test_other_start_rule(self) -> None:
        grammar = lark_to_ir('start: "a"\nother: "b"\n', start="other")
        assert grammar.start == "other" and rules_of(grammar, "other") == {("B",)}


class TestTerminals:
    def test_i_flag_on_strings(self) -> None:
        grammar = lark_to_ir('start: SELECT\nSELECT: "select"i\n')
        assert terminal(grammar, "SELECT") == literal_node(
            "select", ignore_case=True, ascii_case=True
        )
        for text in ("select", "SELECT", "SeLeCt"):
            assert accepts(grammar, "SELECT", text)
        assert not accepts(grammar, "SELECT", "selec")
        # case folds in ASCII only: no long s (U+017F) for `s`, no dotted I for `i`
        assert not accepts(grammar, "SELECT", "\u017felect")
        grammar = lark_to_ir('start: LIMIT\nLIMIT: "limit"i\n')
        assert accepts(grammar, "LIMIT", "LIMIT") and not accepts(grammar, "LIMIT", "L\u0130MIT")

    def test_i_flag_on_anonymous_strings_and_regexes(self) -> None:
        grammar = lark_to_ir('start: "from"i /ab[c-e]/i\n')
        names = [t.name for t in grammar.terminals]
        assert accepts(grammar, names[0], "FROM")
        assert terminal(grammar, names[1]) == parse_regex("ab[c-e]", flags="i", ascii_case=True)
        assert accepts(grammar, names[1], "aBD") and not accepts(grammar, names[1], "abf")

    def test_u_flag_folds_case_in_unicode(self) -> None:
        grammar = lark_to_ir("start: /k+/i /s+/iu\n")
        ascii_k, unicode_s = (t.name for t in grammar.terminals)
        assert accepts(grammar, ascii_k, "kK") and not accepts(grammar, ascii_k, "\u212a")
        assert accepts(grammar, unicode_s, "sS\u017f")  # as Python's re.IGNORECASE

    def test_case_sensitive_by_default(self) -> None:
        grammar = lark_to_ir('start: "from" /ab/\n')
        assert not accepts(grammar, grammar.terminals[0].name, "FROM")
        assert not accepts(grammar, grammar.terminals[1].name, "AB")

    def test_s_flag(self) -> None:
        grammar = lark_to_ir("start: DOT DOTALL\nDOT: /a.b/\nDOTALL: /a.b/s\n")
        assert not accepts(grammar, "DOT", "a\nb") and accepts(grammar, "DOTALL", "a\nb")

    def test_terminals_built_from_terminals(self) -> None:
        grammar = lark_to_ir('start: SIGNED\nSIGNED: ("+"|"-")? DIGITS\nDIGITS: /[0-9]+/\n')
        assert accepts(grammar, "SIGNED", "-12") and not accepts(grammar, "SIGNED", "+-1")

    @pytest.mark.parametrize(
        ("name", "alphabet"), [("ESCAPED_STRING", 'a\\"\n'), ("C_COMMENT", "/*a\n")]
    )
    def test_common_lookbehind_and_lazy_terminals_mean_what_lark_matches(
        self, name: str, alphabet: str
    ) -> None:
        """Lark matches these with `re.match` (shortest match); the IR has exactly those."""
        source = f"start: {name}\n%import common.{name}\n"
        dfa = compile_ast(terminal(lark_to_ir(source), name))  # type: ignore[arg-type]
        lark_pattern = lark.Lark(source, parser="earley").terminals[0].pattern.to_regexp()
        matcher = re.compile(lark_pattern)
        positives = 0
        for length in range(8):
            for letters in itertools.product(alphabet, repeat=length):
                s = "".join(letters)
                match = matcher.match(s)
                expected = match is not None and match.end() == len(s)
                positives += expected
                assert dfa.accepts(s.encode()) == expected, s
        assert positives > 50


class TestErrors:
    def test_undefined_rule_has_a_position(self) -> None:
        with pytest.raises(GrammarError) as info:
            lark_to_ir('start: a\na: "x" missing_rule\n')
        assert "missing_rule" in str(info.value)
        assert (info.value.line, info.value.column) == (2, 8)

    def test_undefined_terminal_has_a_position(self) -> None:
        with pytest.raises(GrammarError) as info:
            lark_to_ir("start: NOPE\n%import common.NOPE\n")
        assert "NOPE" in str(info.value) and info.value.line == 1

    @pytest.mark.parametrize(
        ("text", "line", "column"),
        [
            ('start: "a"\nfoo: ( "b"\n', 2, 11),
            ('start: "a"\n  $$$\n', 2, 3),
            ('start: "a"\n  bar baz: "x"\n', 2, 7),
        ],
    )
    def test_syntax_errors_have_positions(self, text: str, line: int, column: int) -> None:
        with pytest.raises(GrammarError) as info:
            lark_to_ir(text)
        assert (info.value.line, info.value.column) == (line, column)
        assert f"line {line}, column {column}" in str(info.value)

    def test_rule_defined_twice_points_at_the_second_definition(self) -> None:
        with pytest.raises(GrammarError) as info:
            lark_to_ir('start: "a"\nstart: "b"\n')
        assert info.value.line == 2

    def test_missing_start_rule(self) -> None:
        with pytest.raises(GrammarError, match="start rule 'start'"):
            lark_to_ir('foo: "a"\n')

    @pytest.mark.parametrize(
        ("text", "name", "reason"),
        [
            ("start: WORD\nWORD: /[a-z]+(?=!)/\n", "WORD", "lookahead"),
            ('start: "x" /(?<=x)y/\n', "__ANON_0", "lookbehind"),
            ('start: STR\nSTR: /".*?"/\n', "STR", "lazy"),
            ("start: A\nA: /a$/\n", "A", "anchor"),
            ("start: A\nA: /^a/\n", "A", "anchor"),
            ("start: A\nA: /(a)\\1/\n", "A", "backreference"),
        ],
    )
    def test_unsupported_terminal_regexes_name_the_terminal(
        self, text: str, name: str, reason: str
    ) -> None:
        with pytest.raises(GrammarError) as info:
            lark_to_ir(text)
        message = str(info.value)
        assert f"terminal {name}" in message and reason in message.lower()
        assert info.value.line is not None

    def test_anchor_and_lazy_detection_skips_classes_and_escapes(self) -> None:
        grammar = lark_to_ir(r"start: A" + "\n" + r"A: /[$^]\$\^a{2}?b*c/" + "\n")
        assert accepts(grammar, "A", "$$^aabbc")

    @pytest.mark.parametrize("text", ["start: A\nA: /a*/\n", 'start: "x" /b?/\n'])
    def test_empty_matching_terminals_are_rejected(self, text: str) -> None:
        with pytest.raises(GrammarError, match="empty string") as info:
            lark_to_ir(text)
        assert info.value.line is not None

    def test_declared_terminals_are_rejected(self) -> None:
        with pytest.raises(GrammarError, match="terminal A has no pattern"):
            lark_to_ir("start: A\n%declare A\n")

    def test_bad_regex(self) -> None:
        with pytest.raises(GrammarError) as info:
            lark_to_ir('start: "x" /a(/\n')
        assert info.value.line == 1


# ----------------------------------------------------------------------------- helpers


def _lark_accepts(parser: lark.Lark, text: str) -> bool:
    try:
        parser.parse(text)
    except lark.exceptions.UnexpectedInput:
        return False
    return True


def _derive_all(grammar: Grammar, *, max_len: int) -> set[str]:
    """Every sentence of at most `max_len` terminals (single-string terminals), by BFS."""
    words = {t.name: t.pattern.text for t in grammar.terminals}  # type: ignore[union-attr]
    by_lhs: dict[str, list[tuple[str, ...]]] = {}
    for rule in grammar.rules:
        by_lhs.setdefault(rule.lhs, []).append(rule.rhs)
    out: set[str] = set()
    seen: set[tuple[str, ...]] = set()
    frontier = [(grammar.start,)]
    while frontier:
        form = frontier.pop()
        if form in seen or sum(s in words for s in form) > max_len or len(form) > 3 * max_len:
            continue
        seen.add(form)
        index = next((i for i, s in enumerate(form) if s in by_lhs), None)
        if index is None:
            out.add("".join(words[s] for s in form))
            continue
        for rhs in by_lhs[form[index]]:
            frontier.append(form[:index] + rhs + form[index + 1 :])
    return out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("start: A\nA: /a*/\n", "terminal A can match the empty string"),
        ('start: A | B\nA: "x"\nB: /(a|)/\n', "terminal B can match the empty string"),
        ('begin: "a"\n', "the start rule 'start' is not defined"),
        ("start: A\nA: /a{2,1}/\n", "min repeat greater than max repeat"),
        ('start: x y\nx: "a"\n', "Rule 'y' used but not defined"),
    ],
)
def test_what_larks_earley_parser_refuses_is_refused_without_building_it(
    text: str, message: str
) -> None:
    """structgen loads a grammar with Lark but does not build Lark's Earley parser (its own
    parses); the checks that construction makes still apply, with the same errors."""
    with pytest.raises(Exception):  # noqa: B017  (Lark lets its regex module's errors out)
        lark.Lark(text, parser="earley", lexer="dynamic", keep_all_tokens=True)
    with pytest.raises(GrammarError, match=re.escape(message)):
        lark_to_ir(text)


def test_grammars_lark_accepts_load_without_its_parser() -> None:
    """A rule written twice (Lark folds it), an unused empty-matching terminal, a nullable
    rule: accepted, as by Lark."""
    for text in ('start: "a" | "a"\n', 'start: "a"\nA: /a*/\n', 'start: s\ns: "(" s ")" | \n'):
        lark.Lark(text, parser="earley", lexer="dynamic", keep_all_tokens=True)
        assert lark_to_ir(text).rules
