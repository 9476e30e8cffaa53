"""The `structgen` command: help, one-line errors with status 2, bench discovery, and real
constrained generation on the default model checked against each constraint's oracle."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from structgen.cli import UsageError, main
from tests.conftest import default_model_dir

REPO = Path(__file__).resolve().parents[1]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`structgen ARGV` in-process: (exit status, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, *needles: str) -> None:
    """A user error is one line on stderr that names the problem — never a traceback."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "error:" in lines[0]
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


# ---------------------------------------------------------------------------------- help


class TestHelp:
    def test_top_level_help_lists_every_command(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, out, _ = run(capsys, "--help")
        assert code == 0
        for command in ("generate", "bench", "demo", "fetch"):
            assert re.search(rf"^\s+{command}\s", out, re.MULTILINE), command
        assert "examples:" in out

    @pytest.mark.parametrize("command", ["generate", "bench", "demo", "fetch"])
    def test_each_command_has_a_description_and_an_example(
        self, capsys: pytest.CaptureFixture[str], command: str
    ) -> None:
        code, out, _ = run(capsys, command, "--help")
        assert code == 0
        assert f"usage: structgen {command}" in out
        assert re.search(r"^examples?:", out, re.MULTILINE)
        assert f"structgen {command}" in out.split("example", 1)[1]

    def test_generate_help_names_every_constraint_and_sampling_option(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        _, out, _ = run(capsys, "generate", "--help")
        for option in (
            "--schema", "--json", "--regex", "--grammar", "--choice", "--model", "--system",
            "--max-new-tokens", "--temperature", "--top-p", "--top-k", "--seed", "--no-chat",
            "--format",
        ):  # fmt: skip
            assert option in out, option
        for name in ("json", "arithmetic", "sql_select", "csv", "tool_call"):
            assert name in out

    def test_version(self, capsys: pytest.CaptureFixture[str]) -> None:
        import structgen

        code, out, _ = run(capsys, "--version")
        assert code == 0
        assert structgen.__version__ in out

    def test_help_runs_as_a_real_command(self) -> None:
        script = Path(sys.executable).with_name("structgen")  # the installed console script
        command = [str(script)] if script.is_file() else [sys.executable, "-m", "structgen.cli"]
        done = subprocess.run(
            [*command, "generate", "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "usage: structgen generate" in done.stdout
        assert done.stderr == ""


# ---------------------------------------------------------------------------------- errors


class TestGenerateErrors:
    """Each of these is caught before any model is loaded: fast, and no fixture needed."""

    def test_missing_schema_file(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        missing = tmp_path / "nope.json"
        code, out, err = run(capsys, "generate", "hi", "--schema", str(missing))
        assert code == 2 and out == ""
        assert_one_line_error(err, "schema file", "nope.json", "not found")

    def test_schema_that_is_not_json(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        path = tmp_path / "bad.json"
        path.write_text("{'type': 'object'}")
        code, _, err = run(capsys, "generate", "hi", "--schema", str(path))
        assert code == 2
        assert_one_line_error(err, "not valid JSON")

    def test_invalid_schema_names_its_file_and_json_pointer(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        path = tmp_path / "s.json"
        path.write_text(json.dumps({"properties": {"age": {"type": "intgr"}}}))
        code, _, err = run(capsys, "generate", "hi", "--schema", str(path))
        assert code == 2
        assert_one_line_error(err, f"schema file {str(path)!r}", "type", "/properties/age/type")
        assert "--lenient" not in err  # an invalid schema is not helped by lenient mode

    def test_unsupported_keyword_is_an_error_and_lenient_is_offered(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        path = tmp_path / "s.json"
        path.write_text(json.dumps({"type": "array", "uniqueItems": True}))
        code, _, err = run(capsys, "generate", "hi", "--schema", str(path))
        assert code == 2
        assert_one_line_error(err, "s.json", "uniqueItems", "/uniqueItems", "--lenient")

    def test_unique_items_the_guard_enforces_is_not_refused(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        # checked as Compiler.json_schema compiles it (with the uniqueItems guard), so the
        # run gets as far as loading the model
        path = tmp_path / "s.json"
        schema = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
        path.write_text(json.dumps(schema))
        code, _, err = run(
            capsys, "generate", "hi", "--schema", str(path), "--model", str(tmp_path / "m")
        )
        assert code == 2
        assert_one_line_error(err, "model folder", "not found")

    def test_schema_from_stdin_is_named_in_its_error(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import io

        monkeypatch.setattr("sys.stdin", io.StringIO('{"type": "intgr"}'))
        code, _, err = run(capsys, "generate", "hi", "--schema", "-")
        assert code == 2
        assert_one_line_error(err, "the schema on stdin", "/type")

    def test_schema_path_that_is_a_directory(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        code, _, err = run(capsys, "generate", "hi", "--schema", str(tmp_path))
        assert code == 2
        assert_one_line_error(err, "schema file", str(tmp_path), "is a directory")

    def test_bad_regex_is_one_line_with_the_offset(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        code, _, err = run(capsys, "generate", "hi", "--regex", r"\d{3}-(\d{4}")
        assert code == 2
        assert_one_line_error(err, "bad regex", "offset")

    def test_unsupported_regex_construct(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, _, err = run(capsys, "generate", "hi", "--regex", r"(?<=a)b")
        assert code == 2
        assert_one_line_error(err, "lookbehind")

    def test_unknown_grammar_lists_the_shipped_ones(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        code, _, err = run(capsys, "generate", "hi", "--grammar", "yaml")
        assert code == 2
        assert_one_line_error(err, "unknown grammar 'yaml'", "json", "sql_select", "tool_call")

    def test_missing_grammar_file(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        code, _, err = run(capsys, "generate", "hi", "--grammar", str(tmp_path / "g.lark"))
        assert code == 2
        assert_one_line_error(err, "grammar file", "not found")

    def test_bad_grammar_file_gives_its_path_line_and_column(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        path = tmp_path / "g.lark"
        path.write_text('start: "a" missing_rule\n')
        code, _, err = run(capsys, "generate", "hi", "--grammar", str(path))
        assert code == 2
        assert_one_line_error(err, f"grammar file {path}:1:12:", "missing_rule")

    def test_bad_gbnf_file_gives_its_path_line_and_column(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        path = tmp_path / "g.gbnf"
        path.write_text('# yes or no\nroot ::= "yes" | answer\n')
        code, _, err = run(capsys, "generate", "hi", "--grammar", str(path))
        assert code == 2
        assert_one_line_error(err, f"grammar file {path}:2:18:", "EBNF", "'answer'")

    def test_grammar_path_that_is_a_directory(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        folder = tmp_path / "grammars.lark"
        folder.mkdir()
        code, _, err = run(capsys, "generate", "hi", "--grammar", str(folder))
        assert code == 2
        assert_one_line_error(err, "grammar file", str(folder), "is a directory")

    def test_bad_grammar_text_gives_line_and_column(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        code, _, err = run(capsys, "generate", "hi", "--grammar", 'root ::= "a" | b')
        assert code == 2
        assert_one_line_error(err, "--grammar text", "line 1, column 16", "'b'")
        code, _, err = run(capsys, "generate", "hi", "--grammar", 'start: "a" | b')
        assert code == 2
        assert_one_line_error(err, "--grammar text", "line 1, column 14", "'b'")

    def test_missing_start_rule_names_the_file(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        path = tmp_path / "g.ebnf"
        path.write_text('root ::= "a"\n')
        code, _, err = run(capsys, "generate", "hi", "--grammar", str(path), "--start", "expr")
        assert code == 2
        assert_one_line_error(err, "g.ebnf", "expr")

    def test_two_constraints_are_refused(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, _, err = run(capsys, "generate", "hi", "--json", "--regex", "a")
        assert code == 2
        assert_one_line_error(err, "not allowed with")

    def test_bad_sampling_value_is_named(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, _, err = run(capsys, "generate", "hi", "--top-p", "1.5")
        assert code == 2
        assert_one_line_error(err, "top_p")

    def test_missing_model_folder(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        code, _, err = run(capsys, "generate", "hi", "--model", str(tmp_path / "m"))
        assert code == 2
        assert_one_line_error(err, "model folder", "not found")

    @pytest.mark.parametrize(
        "options",
        [
            ["--regex", "a", "--start", "expr"],
            ["--regex", "a", "--lenient"],
            ["--whitespace", "compact"],
        ],
    )
    def test_options_for_another_mode_are_refused(
        self, capsys: pytest.CaptureFixture[str], options: list[str]
    ) -> None:
        code, _, err = run(capsys, "generate", "hi", *options)
        assert code == 2
        assert_one_line_error(err, "only to")

    def test_prompt_and_schema_cannot_both_be_stdin(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        code, _, err = run(capsys, "generate", "-", "--schema", "-")
        assert code == 2
        assert_one_line_error(err, "stdin")


# ---------------------------------------------------------------------------------- grammars


def read_grammar(*argv: str) -> Any:
    """What `generate` reads from its --grammar arguments, before any model is loaded."""
    from structgen.cli import _read_constraint, build_parser

    return _read_constraint(build_parser().parse_args(["generate", "hi", *argv]))


class TestGrammarSources:
    YES_NO = 'root ::= "yes" | "no"\n'

    @pytest.mark.parametrize("name", ["yn.gbnf", "yn.ebnf", "YN.GBNF", "yn.txt", "yn"])
    def test_gbnf_files_by_extension_or_content(self, tmp_path: Path, name: str) -> None:
        path = tmp_path / name
        path.write_text("# a GBNF grammar\n" + self.YES_NO)
        constraint = read_grammar("--grammar", str(path))
        assert (constraint.mode, constraint.dialect, constraint.start) == (
            "grammar",
            "ebnf",
            "root",
        )
        assert constraint.grammar_text == path.read_text()

    def test_lark_files_stay_lark(self, tmp_path: Path) -> None:
        path = tmp_path / "g.lark"
        path.write_text('start: "yes" | "no"\n')
        constraint = read_grammar("--grammar", str(path))
        assert (constraint.dialect, constraint.start) == ("lark", "start")
        other = tmp_path / "g.grammar"  # no known extension, no ::= : Lark
        other.write_text('start: "yes" | "no"\n')
        assert read_grammar("--grammar", str(other)).dialect == "lark"

    def test_the_extension_wins_over_the_content(self, tmp_path: Path) -> None:
        path = tmp_path / "g.gbnf"
        path.write_text('start: "a"\n')  # Lark text in a .gbnf file is read as GBNF: an error
        with pytest.raises(UsageError, match=r"g\.gbnf:1"):
            read_grammar("--grammar", str(path))

    @pytest.mark.parametrize(
        ("text", "dialect", "start"),
        [
            ('root ::= "yes" | "no"', "ebnf", "root"),
            ('answer ::= [0-9]+\nroot ::= "n=" answer', "ebnf", "root"),
            ('start: "yes" | "no"', "lark", "start"),
            ('?start: pair\npair: "a" "=" /[0-9]+/', "lark", "start"),
            ('expr ::= "1" | "2"', "ebnf", "expr"),
        ],
    )
    def test_grammar_text_given_directly(self, text: str, dialect: str, start: str) -> None:
        argv = ["--grammar", text] + (["--start", start] if start == "expr" else [])
        constraint = read_grammar(*argv)
        assert (constraint.grammar_text, constraint.dialect, constraint.start) == (
            text,
            dialect,
            start,
        )

    def test_shipped_names_and_files_come_before_text(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from structgen.grammar.lark_frontend import load_builtin

        assert read_grammar("--grammar", "json").grammar_text == load_builtin("json")
        monkeypatch.chdir(tmp_path)
        Path("arith").write_text(self.YES_NO)  # a file in the current folder, named like a word
        assert read_grammar("--grammar", "arith").grammar_text == self.YES_NO

    def test_an_explicit_start_rule_is_kept(self, tmp_path: Path) -> None:
        path = tmp_path / "g.gbnf"
        path.write_text('root ::= item\nitem ::= "x"\n')
        assert read_grammar("--grammar", str(path), "--start", "item").start == "item"


# ---------------------------------------------------------------------------------- bench


class TestBench:
    def test_missing_script_folder_says_where_it_looked_and_what_to_do(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        code, out, err = run(capsys, "bench", "regex", "--dir", str(tmp_path))
        assert code == 2 and out == ""
        assert_one_line_error(err, "regexes.py", "not found", str(tmp_path), "--dir", "repository")

    def test_found_from_the_checkout_with_arguments_passed_through(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(REPO / "tests")  # found in a parent folder of the current one
        code, out, _ = run(capsys, "bench", "regex", "--dry-run", "--", "--runs", "1")
        assert code == 0
        assert out.strip().endswith(f"{REPO / 'benchmarks' / 'regexes.py'} --runs 1")

    def test_all_runs_every_script_and_maskbench_gets_make_bench_defaults(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        code, out, _ = run(capsys, "bench", "all", "--dry-run", "--dir", str(REPO / "benchmarks"))
        assert code == 0
        lines = out.strip().splitlines()
        names = [re.search(r"(\w+)\.py", line).group(1) for line in lines]  # type: ignore[union-attr]
        assert names == ["vocab", "regexes", "grammar", "maskbench", "generate"]
        assert lines[3].endswith("maskbench.py --limit 200 --sample --timeout 15")

    def test_extra_arguments_need_one_named_script(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        code, _, err = run(capsys, "bench", "all", "--", "--runs", "1")
        assert code == 2
        assert_one_line_error(err, "one script")

    def test_script_options_without_the_separator_get_a_hint(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        code, _, err = run(capsys, "bench", "regex", "--runs", "1")
        assert code == 2
        assert_one_line_error(err, "--runs", "after `--`")


# ---------------------------------------------------------------------------------- generate


def generate_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """`structgen generate ... --format json` on the default model, parsed."""
    default_model_dir()  # skip (or fail under CI=true) when the fixture is missing
    code, out, err = run(capsys, "generate", *argv, "--format", "json")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    report: dict[str, Any] = json.loads(lines[0])
    assert report["finish_reason"] in ("eos", "stop")
    assert report["output_tokens"] >= 1
    assert report["time_to_first_token"] > 0
    assert report["time_per_output_token"] >= 0
    return report


@pytest.mark.slow
class TestGenerate:
    def test_regex(self, capsys: pytest.CaptureFixture[str]) -> None:
        pattern = r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
        report = generate_json(
            capsys, "Date of the first Moon landing?", "--regex", pattern, "--max-new-tokens", "16"
        )
        assert re.fullmatch(pattern, report["text"])
        assert report["mode"] == "regex" and "value" not in report

    def test_choice(self, capsys: pytest.CaptureFixture[str]) -> None:
        options = ["positive", "negative", "neutral"]
        report = generate_json(
            capsys,
            "Sentiment of: 'The battery died after two days.'",
            "--max-new-tokens",
            "8",
            "--choice",
            *options,
        )
        assert report["text"] in options

    def test_schema_file_gives_text_and_parsed_value(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        schema = {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "country": {"type": "string", "maxLength": 20},
            },
            "required": ["city", "country"],
            "additionalProperties": False,
        }
        path = tmp_path / "city.json"
        path.write_text(json.dumps(schema))
        report = generate_json(
            capsys, "Paris as JSON.", "--schema", str(path), "--max-new-tokens", "48"
        )
        jsonschema.validate(json.loads(report["text"]), schema)
        assert report["value"] == json.loads(report["text"])

    def test_schema_from_stdin(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import io

        schema = {"enum": ["spring", "summer", "autumn", "winter"]}
        monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(schema)))
        report = generate_json(
            capsys, "Which season comes after summer?", "--schema", "-", "--max-new-tokens", "8"
        )
        jsonschema.validate(report["value"], schema)

    def test_lenient_mode_warns_in_one_line_and_answers(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        default_model_dir()
        # distinct booleans are beyond the uniqueItems guard: lenient mode drops the keyword
        schema = {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True}
        path = tmp_path / "s.json"
        path.write_text(json.dumps(schema))
        code, out, err = run(
            capsys, "generate", "Two booleans as a JSON array.", "--schema", str(path),
            "--lenient", "--whitespace", "compact", "--max-new-tokens", "16",
        )  # fmt: skip
        assert code == 0
        assert err.splitlines() == [
            "structgen generate: warning: structgen relaxed /uniqueItems: "
            "uniqueItems cannot be enforced by a grammar (ignored)"
        ]
        jsonschema.validate(json.loads(out), {**schema, "uniqueItems": False})

    def test_unique_items_the_guard_enforces_need_no_lenient_mode(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        default_model_dir()
        schema = {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True}
        path = tmp_path / "s.json"
        path.write_text(json.dumps(schema))
        code, out, err = run(
            capsys, "generate", "Two letters as a JSON array.", "--schema", str(path),
            "--whitespace", "compact", "--max-new-tokens", "16",
        )  # fmt: skip
        assert code == 0 and err == ""
        jsonschema.validate(json.loads(out), schema)  # distinct items: the guard enforced it

    def test_json_mode(self, capsys: pytest.CaptureFixture[str]) -> None:
        report = generate_json(
            capsys,
            'Give a JSON object with the keys "city" and "country" for Paris.',
            "--json",
            "--whitespace",
            "compact",
            "--max-new-tokens",
            "48",
        )
        assert report["value"] == json.loads(report["text"])
        assert "\n" not in report["text"]  # compact: no whitespace between tokens

    def test_shipped_grammar(self, capsys: pytest.CaptureFixture[str]) -> None:
        import lark

        from structgen.grammar.lark_frontend import load_builtin

        report = generate_json(
            capsys,
            "Write 2+3 as an expression.",
            "--grammar",
            "arithmetic",
            "--max-new-tokens",
            "16",
        )
        lark.Lark(load_builtin("arithmetic"), parser="earley").parse(report["text"])

    def test_gbnf_file(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        path = tmp_path / "answer.gbnf"
        path.write_text('root ::= ("yes" | "no") "." \n')
        report = generate_json(
            capsys, "Is the sky blue?", "--grammar", str(path), "--max-new-tokens", "8"
        )
        assert report["text"] in ("yes.", "no.") and report["mode"] == "grammar"

    def test_grammar_text_given_directly(self, capsys: pytest.CaptureFixture[str]) -> None:
        report = generate_json(
            capsys,
            "Write a three digit number.",
            "--grammar",
            "root ::= [1-9] [0-9] [0-9]",
            "--max-new-tokens",
            "8",
        )
        assert re.fullmatch(r"[1-9][0-9][0-9]", report["text"]), report["text"]

    def test_text_format_prints_only_the_answer(self, capsys: pytest.CaptureFixture[str]) -> None:
        default_model_dir()
        code, out, _ = run(
            capsys, "generate", "Is the sky blue?", "--max-new-tokens", "4", "--choice", "yes", "no"
        )
        assert code == 0
        assert out in ("yes\n", "no\n")

    def test_a_budget_below_the_shortest_output_is_exit_1_with_one_line(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        default_model_dir()
        code, out, err = run(
            capsys, "generate", "Spell a word.", "--regex", "[a-z]{40}", "--max-new-tokens", "2"
        )
        assert code == 1 and out == ""
        assert_one_line_error(err, "max_new_tokens")

    def test_json_mode_closes_within_a_small_budget(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        default_model_dir()
        code, out, _ = run(capsys, "generate", "Describe Paris.", "--json", "--max-new-tokens", "3")
        assert code == 0
        assert isinstance(json.loads(out), dict)  # an object, finished within the budget
