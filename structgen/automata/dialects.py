"""Regex dialects: what ``\\d``, ``\\w``, ``\\s``, ``.``, ``$``, case folding and ``\\p{...}`` mean.

A dialect names the engine a pattern is written for and judged by:

* ``"python"``: Python's ``re`` on str patterns (Unicode ``\\d \\w \\s``, Unicode case folding,
  ``$`` also before a final ``\\n``, ``.`` anything but ``\\n``) — what ``jsonschema`` uses;
* ``"python-ascii"``: ``re`` with ``re.ASCII`` (``\\d \\w \\s \\b`` and case folding in ASCII);
* ``"ecma"``: ECMA-262 with the ``u`` flag, as ajv compiles JSON Schema patterns
  (``new RegExp(p, "u")``): ASCII ``\\d \\w``, ``\\s`` = WhiteSpace + LineTerminator, ``.``
  excludes ``\\n \\r`` U+2028 U+2029, ``$`` only at the very end;
* ``"rust"``: Rust's ``regex`` crate (pydantic-core): Unicode ``\\d \\w \\s`` (UTS #18 tables,
  generated into ``_rust_tables.py``), ``.`` excludes only ``\\n``, ``$`` only at the end.

A tuple of dialects (``("ecma", "python", "rust")``) is the *generation* reading: the first
dialect's syntax, and each atom the intersection of what the dialects that can read it mean.
The syntax rules live in the parser (``regex_syntax.py``); this module holds the sets.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from functools import cache
from typing import Literal

from structgen.automata import _rust_tables
from structgen.automata import intervals as iv
from structgen.automata import unicode_tables as ut
from structgen.automata.intervals import Ranges

__all__ = [
    "DIALECTS",
    "Dialect",
    "DialectSpec",
    "class_escape",
    "dialects_of",
    "dollar_is_end",
    "dot",
    "family",
    "folds_ascii",
    "property_ranges",
]

Dialect = Literal["python", "python-ascii", "ecma", "rust"]
DialectSpec = Dialect | tuple[Dialect, ...]
DIALECTS: tuple[Dialect, ...] = ("python", "python-ascii", "ecma", "rust")
Family = Literal["python", "ecma", "rust"]

ECMA_SPACE: Ranges = iv.normalize(
    [(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
     (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)]
)  # fmt: skip
_NOT_NEWLINE: Ranges = iv.complement(((0x0A, 0x0A),))
_NOT_LINE_TERMINATOR: Ranges = iv.complement(((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)))
_NOT_CR_LF: Ranges = iv.complement(((0x0A, 0x0A), (0x0D, 0x0D)))


def dialects_of(spec: DialectSpec) -> tuple[Dialect, ...]:
    """A dialect or a tuple of them as a non-empty tuple without repeats (``ValueError``)."""
    items = (spec,) if isinstance(spec, str) else tuple(spec)
    if not items:
        raise ValueError("at least one regex dialect is needed")
    for d in items:
        if d not in DIALECTS:
            raise ValueError(f"unknown regex dialect {d!r}; known: {', '.join(DIALECTS)}")
    return tuple(dict.fromkeys(items))


def family(dialect: Dialect) -> Family:
    """The syntax a dialect is written in (``python-ascii`` is Python syntax)."""
    return "python" if dialect == "python-ascii" else dialect


def folds_ascii(dialect: Dialect, ascii_flag: bool) -> bool:
    """Whether case-insensitive matching folds only A-Z/a-z."""
    return dialect == "python-ascii" or (ascii_flag and dialect != "ecma")


def class_escape(dialect: Dialect, letter: str, ascii_flag: bool) -> Ranges:
    """The set of ``\\d \\D \\s \\S \\w \\W`` (``ascii_flag``: Python's ``a``, Rust's ``-u``)."""
    lower = letter.lower()
    ascii_only = dialect == "python-ascii" or (ascii_flag and dialect != "ecma")
    if dialect == "ecma":
        ranges = (
            ECMA_SPACE if lower == "s" else ut.word_ranges(True) if lower == "w" else ut.ASCII_DIGIT
        )
    elif dialect == "rust" and not ascii_only:
        ranges = {"d": _rust_tables.DIGIT, "s": _rust_tables.SPACE, "w": _rust_tables.WORD}[lower]
    elif lower == "d":
        ranges = ut.digit_ranges(ascii_only)
    elif lower == "w":
        ranges = ut.word_ranges(ascii_only)
    else:
        ranges = ut.space_ranges(ascii_only)
    return _complement(ranges) if letter.isupper() else ranges


def dot(dialect: Dialect, *, dotall: bool, crlf: bool = False) -> Ranges:
    """What ``.`` matches: ECMA excludes every line terminator, the others only ``\\n``."""
    if dotall:
        return ((0, iv.MAX_CODE_POINT),)
    if dialect == "ecma":
        return _NOT_LINE_TERMINATOR
    return _NOT_CR_LF if crlf else _NOT_NEWLINE


def dollar_is_end(dialect: Dialect) -> bool:
    """Whether ``$`` (no multiline) matches only at the very end; Python's also matches just
    before a final ``\\n``."""
    return family(dialect) != "python"


@cache
def _complement(ranges: Ranges) -> Ranges:
    return iv.complement(ranges)


# ----------------------------------------------------------------------------- \p{...}

# General_Category values: short name -> long names and aliases (PropertyValueAliases.txt).
_GC: dict[str, tuple[str, ...]] = {
    "C": ("Other",), "Cc": ("Control", "cntrl"), "Cf": ("Format",), "Cn": ("Unassigned",),
    "Co": ("Private_Use",), "Cs": ("Surrogate",),
    "L": ("Letter",), "LC": ("Cased_Letter",), "Ll": ("Lowercase_Letter",),
    "Lm": ("Modifier_Letter",), "Lo": ("Other_Letter",), "Lt": ("Titlecase_Letter",),
    "Lu": ("Uppercase_Letter",),
    "M": ("Mark", "Combining_Mark"), "Mc": ("Spacing_Mark",), "Me": ("Enclosing_Mark",),
    "Mn": ("Nonspacing_Mark",),
    "N": ("Number",), "Nd": ("Decimal_Number", "digit"), "Nl": ("Letter_Number",),
    "No": ("Other_Number",),
    "P": ("Punctuation", "punct"), "Pc": ("Connector_Punctuation",),
    "Pd": ("Dash_Punctuation",), "Pe": ("Close_Punctuation",), "Pf": ("Final_Punctuation",),
    "Pi": ("Initial_Punctuation",), "Po": ("Other_Punctuation",), "Ps": ("Open_Punctuation",),
    "S": ("Symbol",), "Sc": ("Currency_Symbol",), "Sk": ("Modifier_Symbol",),
    "Sm": ("Math_Symbol",), "So": ("Other_Symbol",),
    "Z": ("Separator",), "Zl": ("Line_Separator",), "Zp": ("Paragraph_Separator",),
    "Zs": ("Space_Separator",),
}  # fmt: skip
_GC_NAMES: dict[str, str] = {
    alias: short for short, names in _GC.items() for alias in (short, *names)
}
# ECMA-262 table 67: binary properties (canonical names and aliases). Any, ASCII and Assigned are
# computed here; the rest need the `regex` package's Unicode tables.
_ECMA_BINARY_NAMES = """
    ASCII ASCII_Hex_Digit AHex Alphabetic Alpha Any Assigned Bidi_Control Bidi_C Bidi_Mirrored
    Bidi_M Case_Ignorable CI Cased Changes_When_Casefolded CWCF Changes_When_Casemapped CWCM
    Changes_When_Lowercased CWL Changes_When_NFKC_Casefolded CWKCF Changes_When_Titlecased CWT
    Changes_When_Uppercased CWU Dash Default_Ignorable_Code_Point DI Deprecated Dep Diacritic Dia
    Emoji Emoji_Component EComp Emoji_Modifier EMod Emoji_Modifier_Base EBase Emoji_Presentation
    EPres Extended_Pictographic ExtPict Extender Ext Grapheme_Base Gr_Base Grapheme_Extend Gr_Ext
    Hex_Digit Hex IDS_Binary_Operator IDSB IDS_Trinary_Operator IDST ID_Continue IDC ID_Start IDS
    Ideographic Ideo Join_Control Join_C Logical_Order_Exception LOE Lowercase Lower Math
    Noncharacter_Code_Point NChar Pattern_Syntax Pat_Syn Pattern_White_Space Pat_WS
    Quotation_Mark QMark Radical Regional_Indicator RI Sentence_Terminal STerm Soft_Dotted SD
    Terminal_Punctuation Term Unified_Ideograph UIdeo Uppercase Upper Variation_Selector VS
    White_Space space XID_Continue XIDC XID_Start XIDS"""
_ECMA_BINARY = frozenset(_ECMA_BINARY_NAMES.split())
_ECMA_SCRIPT_VALUE = re.compile(r"[A-Z][A-Za-z]*(?:_[A-Z][A-Za-z]*)*\Z")


class PropertyError(ValueError):
    """``\\p{...}`` names no property (a syntax error) or one this build cannot compute
    (``unsupported``)."""

    def __init__(self, reason: str, *, unsupported: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.unsupported = unsupported


@cache
def _categories() -> dict[str, Ranges]:
    """Every General_Category value (two letters) -> its code points, in one pass."""
    found: dict[str, list[tuple[int, int]]] = {}
    cp = 0
    for cat, group in itertools.groupby(map(unicodedata.category, ut._all_chars())):
        n = sum(1 for _ in group)
        found.setdefault(cat, []).append((cp, cp + n - 1))
        cp += n
    return {cat: tuple(ranges) for cat, ranges in found.items()}


@cache
def general_category(short: str) -> Ranges:
    """The code points of a General_Category value (``Lu``, or a group such as ``L``, ``LC``)."""
    cats = _categories()
    if short == "LC":
        return iv.union(cats.get("Lu", ()), cats.get("Ll", ()), cats.get("Lt", ()))
    if len(short) == 1:
        return iv.union(*(r for cat, r in cats.items() if cat[0] == short))
    return cats.get(short, ())


@cache
def _regex_property(expr: str) -> Ranges:
    """The code points the `regex` package's ``\\p{expr}`` matches (scripts, binary properties)."""
    try:
        import regex  # type: ignore[import-untyped]
    except ImportError:
        raise PropertyError(
            f"\\p{{{expr}}} needs the `regex` package's Unicode tables (pip install regex)",
            unsupported=True,
        ) from None
    try:
        compiled = regex.compile(rf"\p{{{expr}}}+")
    except regex.error:
        raise PropertyError(f"unknown Unicode property {expr!r}") from None
    return tuple((m.start(), m.end() - 1) for m in compiled.finditer(ut._all_chars()))


def _special(name: str) -> Ranges | None:
    if name == "Any":
        return ((0, iv.MAX_CODE_POINT),)
    if name == "ASCII":
        return ((0, 0x7F),)
    if name == "Assigned":
        return iv.complement(general_category("Cn"))
    return None


def property_ranges(fam: Family, body: str) -> Ranges:
    """The code points of ``\\p{body}`` in a dialect family (``PropertyError`` otherwise).

    ECMA names must be exact (``L``, ``Letter``, ``gc=Lu``, ``Script=Greek``, ``sc=Grek``,
    ``scx=...``, the binary properties of ECMA-262); Rust matches loosely (case, spaces, ``_``
    and ``-`` ignored; a bare script name such as ``Greek``). General categories come from
    Python's ``unicodedata``; scripts and binary properties from the `regex` package.
    """
    if fam == "ecma":
        return _ecma_property(body)
    if fam == "rust":
        return _rust_property(body)
    raise PropertyError("\\p{...} is not Python re syntax")


def _ecma_property(body: str) -> Ranges:
    if "=" in body:
        name, _, value = body.partition("=")
        if name in ("General_Category", "gc"):
            if value not in _GC_NAMES:
                raise PropertyError(f"unknown General_Category value {value!r}")
            return general_category(_GC_NAMES[value])
        if name in ("Script", "sc", "Script_Extensions", "scx"):
            if not _ECMA_SCRIPT_VALUE.match(value):
                raise PropertyError(f"unknown script {value!r}")
            key = "Script" if name in ("Script", "sc") else "Script_Extensions"
            return _regex_property(f"{key}={value}")
        raise PropertyError(f"unknown Unicode property {name!r}")
    if body in _GC_NAMES:
        return general_category(_GC_NAMES[body])
    if body in _ECMA_BINARY:
        special = _special(body)
        return special if special is not None else _regex_property(body)
    raise PropertyError(f"unknown Unicode property {body!r}")


def _loose(name: str) -> str:
    return re.sub(r"[\s_-]", "", name).lower()


@cache
def _loose_gc() -> dict[str, str]:
    return {_loose(alias): short for alias, short in _GC_NAMES.items()}


def _rust_property(body: str) -> Ranges:
    for sep in ("!=", "=", ":"):
        if sep in body:
            name, _, value = body.partition(sep)
            key = _loose(name)
            if key in ("generalcategory", "gc"):
                short = _loose_gc().get(_loose(value))
                if short is None:
                    raise PropertyError(f"unknown General_Category value {value!r}")
                ranges = general_category(short)
            elif key in ("script", "sc", "scriptextensions", "scx"):
                prefix = "Script" if key in ("script", "sc") else "Script_Extensions"
                ranges = _regex_property(f"{prefix}={value.strip()}")
            else:
                raise PropertyError(f"unknown Unicode property {name!r}")
            return iv.complement(ranges) if sep == "!=" else ranges
    loose = _loose(body)
    if loose in _loose_gc():
        return general_category(_loose_gc()[loose])
    for special in ("Any", "ASCII", "Assigned"):
        if loose == special.lower():
            found = _special(special)
            assert found is not None
            return found
    if not loose or not loose.isalnum():
        raise PropertyError(f"unknown Unicode property {body!r}")
    try:
        return _regex_property(f"Script={loose}")
    except PropertyError as exc:
        if exc.unsupported:
            raise
    return _regex_property(loose)
