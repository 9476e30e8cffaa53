"""The documentation runs: every ```python block of docs/guide/*.md executes on the default model
(in order, one namespace per page), README.md's blocks compile, and relative links resolve.

A block marked ```python no-run is shown but not executed (it still has to compile).
"""

from __future__ import annotations

import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import default_model_dir

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
GUIDE = DOCS / "guide"
PAGES = sorted(GUIDE.glob("*.md"))

_FENCE = re.compile(r"^(`{3,})([^\n`]*)\n(.*?)^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*(\S+)", re.MULTILINE)
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)


@dataclass(frozen=True)
class Block:
    """One fenced code block: its info string's words, its code, and where it starts."""

    words: tuple[str, ...]
    code: str
    line: int  # 1-based line of the code's first line in the page

    @property
    def is_python(self) -> bool:
        return bool(self.words) and self.words[0] in ("python", "py")

    @property
    def runs(self) -> bool:
        return self.is_python and "no-run" not in self.words[1:]

    def compiled(self, path: Path) -> object:
        """Compiled with the page's line numbers, so a traceback points into the page, and
        without this file's `from __future__` flags: the page runs as a user's script would."""
        source = "\n" * (self.line - 1) + self.code
        return compile(source, str(path), "exec", dont_inherit=True)


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start(3)) + 1
        found.append(Block(tuple(match.group(2).split()), match.group(3), line))
    return found


def page_id(path: Path) -> str:
    return path.name


# ---------------------------------------------------------------------------------- examples


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_guide_examples_run(page: Path) -> None:
    """Each page's python blocks, in order, in one namespace, on the default model."""
    runnable = [b for b in blocks(page) if b.runs]
    if not runnable:
        pytest.skip(f"{page.name} has no runnable python blocks")
    default_model_dir()  # skip (or fail under CI=true) when the default model is missing
    # A real module, so that what looks classes up by module (Pydantic's forward references,
    # dataclasses, pickle) finds the page's names as it would in a script.
    module = types.ModuleType(f"docs_guide_{page.stem.replace('-', '_')}")
    sys.modules[module.__name__] = module
    try:
        for block in runnable:
            exec(block.compiled(page), module.__dict__)
    finally:
        del sys.modules[module.__name__]


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_guide_blocks_that_do_not_run_still_compile(page: Path) -> None:
    for block in blocks(page):
        if block.is_python and not block.runs:
            block.compiled(page)


def test_readme_python_blocks_compile() -> None:
    python = [b for b in blocks(REPO / "README.md") if b.is_python]
    assert python, "README.md has no python block"
    for block in python:
        block.compiled(REPO / "README.md")


README_CALLS = (
    'lm.regex("Moon landing date?", r"\\d{4}-\\d{2}-\\d{2}")',
    'lm.json("Paris as JSON.", {"type": "object", "properties": {"name": {"type": "string"}}})',
    'run = sg.run_tools(lm, "Weather in Lyon?", [weather])',
)


@pytest.mark.slow
def test_readme_examples_give_the_answers_a_reader_expects() -> None:
    """README.md's one-call examples, as written there, on the default model: an ASCII date, a
    flat object, one tool call and an answer."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for call in README_CALLS:
        assert call in readme, f"README.md no longer shows {call}; update this test with it"
    default_model_dir()
    import structgen as sg

    lm = sg.LM.default()
    date = lm.regex("Moon landing date?", r"\d{4}-\d{2}-\d{2}")
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", date), date  # ASCII digits
    city = lm.json("Paris as JSON.", {"type": "object", "properties": {"name": {"type": "string"}}})
    assert isinstance(city, dict) and set(city) <= {"name"}, city  # no invented keys
    assert not any(isinstance(v, (dict, list)) for v in city.values()), city  # flat

    made: list[str] = []

    @sg.tool
    def weather(city: str) -> dict[str, object]:
        """Current weather in a city."""
        made.append(city)
        return {"city": city, "sky": "sunny", "celsius": 21}

    run = sg.run_tools(lm, "Weather in Lyon?", [weather])
    assert [(c.name, c.arguments) for c in run.calls] == [("weather", {"city": "Lyon"})], run.calls
    assert made == ["Lyon"]
    assert isinstance(run.answer, str) and run.answer


def test_guide_has_the_pages_the_index_promises() -> None:
    for name in ("quickstart", "json-schema", "regex", "grammar", "logits-processor",
                 "generator", "cli"):  # fmt: skip
        assert (GUIDE / f"{name}.md").is_file(), name


def test_fence_parser_sees_info_strings_and_lines(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# t\n\n```python\nx = 1\n```\n\n```python no-run\nboom(\n```\n")
    found = blocks(page)
    assert [(b.words, b.line, b.runs) for b in found] == [
        (("python",), 4, True),
        (("python", "no-run"), 8, False),
    ]


# ---------------------------------------------------------------------------------- links


def relative_links(path: Path) -> list[str]:
    """Link targets in a markdown page, outside code blocks and code spans."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    text = _INLINE_CODE.sub("", text)
    targets = _LINK.findall(text) + _REFERENCE.findall(text)
    return [
        t
        for t in targets
        if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.IGNORECASE) and not t.startswith("#")
    ]


MARKDOWN = [*sorted(DOCS.rglob("*.md")), REPO / "README.md"]


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_point_to_existing_files(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        resolved = (page.parent / target.split("#", 1)[0]).resolve()
        if not resolved.exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: broken links {broken}"


def test_link_finder_skips_code_and_urls(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "[a](a.md) ![img](img/x.png) [web](https://x.org) [top](#t) `[no](code.md)`\n"
        "```\n[no](block.md)\n```\n[ref]: ref.md\n"
    )
    assert sorted(relative_links(page)) == ["a.md", "img/x.png", "ref.md"]
