"""Check what structgen accepted under ajv, and name the disagreements that are known.

A test collects the JSON texts structgen's matcher accepted (and that jsonschema already
called valid) and hands them to `assert_ajv_accepts` (one schema) or `check_ajv` (many, then
`AjvReport.assert_clean`). Every text must validate under ajv too, except where a `Known` cause
below explains the disagreement: each is proved on the instance itself (ajv accepts it once the
cause is repaired), never assumed for a whole schema. Each cause also has an example that
`tests/oracles/test_ajv.py` checks on its own, as a strict expected failure where structgen is
the one to change: when the fix lands the example passes, the test says so, and the entry goes.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.conftest import missing
from tests.oracles.ajv import AjvOracle, AjvSchemaError, AjvTimeout, AjvUnavailable, oracle

__all__ = [
    "KNOWN",
    "AjvReport",
    "Known",
    "KnownAjvDisagreement",
    "ajv",
    "assert_ajv_accepts",
    "check_ajv",
]


class KnownAjvDisagreement(UserWarning):
    """ajv rejected accepted instances for a known reason (listed in `KNOWN`)."""


def ajv() -> AjvOracle:
    """The process-wide ajv oracle; skips locally (fails under CI=true) when not installed."""
    try:
        return oracle()
    except AjvUnavailable as exc:
        missing(f"the ajv oracle ({exc})")
        raise  # unreachable: missing() raises


# ---------------------------------------------------------------------- walking JSON values


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {fn(k): _map_strings(v, fn) for k, v in value.items()}
    return value


def _schema_values(schema: Any, keyword: str) -> Iterator[Any]:
    """The values of `keyword` anywhere in a schema (a plain walk; keys of `properties` too)."""
    if isinstance(schema, dict):
        for key, sub in schema.items():
            if key == keyword:
                yield sub
            yield from _schema_values(sub, keyword)
    elif isinstance(schema, list):
        for sub in schema:
            yield from _schema_values(sub, keyword)


def _patterns(schema: Any) -> list[str]:
    found = [p for p in _schema_values(schema, "pattern") if isinstance(p, str)]
    for table in _schema_values(schema, "patternProperties"):
        if isinstance(table, dict):
            found += [p for p in table if isinstance(p, str)]
    for names in _schema_values(schema, "propertyNames"):
        if isinstance(names, dict) and isinstance(names.get("pattern"), str):
            found.append(names["pattern"])
    return found


# ---------------------------------------------------------------------- the known causes


@dataclass(frozen=True)
class Known:
    """A known reason why ajv rejects what structgen (and jsonschema) accept.

    Instance-level causes (`repair` set) explain a rejected instance when they `apply` to the
    schema and ajv accepts the instance once `repair` has removed the cause (None: nothing to
    repair, so not this cause). `ajv_fault` causes explain every rejected instance of a schema
    they apply to: ajv's own bugs. Schema-level causes (`error` set) explain a schema ajv cannot
    compile, by ajv's message. `example`: a (schema, instance) pair structgen accepts and ajv
    rejects (or cannot compile) for this reason. `structgen_changes`: structgen is the one
    expected to change, so the example is a strict expected failure in test_ajv.py.
    """

    name: str
    reason: str
    example: tuple[Any, Any]
    applies: Callable[[Any], bool] = lambda schema: True
    repair: Callable[[Any], Any] | None = None
    ajv_fault: bool = False
    error: re.Pattern[str] | None = None
    structgen_changes: bool = True


_EMAIL = re.compile(r"(?s)(.*)@([^@]*)")
_UNDOTTED_OR_LITERAL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?|\[[^\[\]]*\]")


def _has_email_format(schema: Any) -> bool:
    return "email" in list(_schema_values(schema, "format"))


def _dotted_email_domain(instance: Any) -> Any:
    def fix(s: str) -> str:
        # (only an email's shape: a local part and a domain; other strings may hold an `@`)
        # and only the domains ajv refuses where RFC 5321 does not: one hostname label or an
        # address literal (a name like "\n@ﯲ\\" is left as it is: rewritten, it could break
        # the schema's other keywords, such as its maxLength)
        m = _EMAIL.fullmatch(s)
        if m and m.group(1) and _UNDOTTED_OR_LITERAL.fullmatch(m.group(2)):
            return f"{m.group(1)}@example.com"
        return s

    repaired = _map_strings(instance, fix)
    return None if repaired == instance else repaired


# Object.prototype's members: ajv reads `data.constructor` etc. through the prototype chain
_PROTOTYPE_NAMES = frozenset(
    ["constructor", "hasOwnProperty", "isPrototypeOf", "propertyIsEnumerable", "toString",
     "toLocaleString", "valueOf", "__defineGetter__", "__defineSetter__", "__lookupGetter__",
     "__lookupSetter__"]
)  # fmt: skip


def _names_prototype_member(schema: Any) -> bool:
    tables = _schema_values(schema, "properties")
    return any(isinstance(t, dict) and not _PROTOTYPE_NAMES.isdisjoint(t) for t in tables)


KNOWN: tuple[Known, ...] = (
    Known(
        "email-undotted-domain-or-address-literal",
        "ajv-formats' email wants a dotted domain name and no address literal; structgen's "
        "accept mode reads email as RFC 5321 does (`a@b`, `a@[127.0.0.1]`), as jsonschema and "
        "the official suite do; generate mode offers only dotted domains (valid under both)",
        ({"type": "string", "format": "email"}, "joe.bloggs@[127.0.0.1]"),
        applies=_has_email_format,
        repair=_dotted_email_domain,
        structgen_changes=False,
    ),
    Known(
        "ajv-prototype-property",
        "ajv bug: a property named like a member of Object.prototype (`constructor`, "
        "`toString`...) is read through the prototype chain when the object lacks it, so "
        "`{}` fails `properties: {constructor: {type: number}}`",
        ({"properties": {"constructor": {"type": "number"}}}, {}),
        applies=_names_prototype_member,
        ajv_fault=True,
        structgen_changes=False,
    ),
)


def explain(schema: Any, instance: Any, check: AjvOracle) -> Known | None:
    """The known cause of ajv rejecting `instance` under `schema`, or None."""
    for known in KNOWN:
        if known.error is not None or not known.applies(schema):
            continue
        if known.ajv_fault:
            return known
        repaired = None if known.repair is None else known.repair(instance)
        if repaired is not None and check.validate(schema, repaired):
            return known
    return None


def explain_no_verdict(schema: Any, message: str) -> Known | None:
    """The known cause of ajv not compiling `schema` (its error `message`), or None."""
    for known in KNOWN:
        if known.error is not None and known.applies(schema) and known.error.search(message):
            return known
    return None


# ---------------------------------------------------------------------- checking


@dataclass
class AjvReport:
    """What ajv said about a set of accepted instances."""

    checked: int = 0  # instances ajv gave a verdict on
    no_verdict: dict[str, str] = field(default_factory=dict)  # where -> why ajv could not judge
    known: dict[str, list[str]] = field(default_factory=dict)  # Known.name -> "where: text"
    unexplained: list[str] = field(default_factory=list)  # "where: text"

    def add(self, other: AjvReport) -> None:
        self.checked += other.checked
        self.no_verdict.update(other.no_verdict)
        for name, cases in other.known.items():
            self.known.setdefault(name, []).extend(cases)
        self.unexplained += other.unexplained

    def assert_clean(self, *, min_checked: int = 1, stacklevel: int = 2) -> None:
        """No unexplained disagreement, and ajv judged at least `min_checked` instances (so
        the check cannot pass by ajv judging nothing). Known ones are reported as a warning."""
        assert not self.unexplained, (
            f"{len(self.unexplained)} instances structgen accepted are invalid under ajv:\n"
            + "\n".join(self.unexplained[:20])
        )
        assert self.checked >= min_checked, (
            f"ajv judged {self.checked} instances (< {min_checked}); no verdict on "
            f"{self.no_verdict}"
        )
        if self.known:
            by_reason = {k.name: k.reason for k in KNOWN}
            lines = [
                f"{len(cases)} x {name} ({by_reason[name]}), e.g. {cases[0]}"
                for name, cases in sorted(self.known.items())
            ]
            warnings.warn(
                KnownAjvDisagreement("known ajv disagreements: " + "; ".join(lines)),
                stacklevel=stacklevel,
            )


def check_ajv(schema: Any, texts: Sequence[str], *, where: str = "") -> AjvReport:
    """ajv's verdicts on JSON texts structgen accepted under `schema`, classified."""
    report = AjvReport()
    if not texts:
        return report
    check = ajv()
    label = where or json.dumps(schema)[:80]
    try:
        verdicts = check.validate_texts(schema, texts)
    except (AjvSchemaError, AjvTimeout) as exc:
        known = explain_no_verdict(schema, str(exc)) if isinstance(exc, AjvSchemaError) else None
        if known is None:
            report.no_verdict[label] = str(exc)[:200]
        else:
            report.known.setdefault(known.name, []).append(f"{label}: {str(exc)[:120]}")
        return report
    report.checked = len(texts)
    for text, ok in zip(texts, verdicts):
        if ok:
            continue
        case = f"{where}: {text[:200]}" if where else text[:200]
        known = explain(schema, json.loads(text), check)
        if known is None:
            report.unexplained.append(case)
        else:
            report.known.setdefault(known.name, []).append(case)
    return report


def assert_ajv_accepts(
    schema: Any, texts: Sequence[str], *, where: str = "", allow_no_verdict: bool = False
) -> AjvReport:
    """Every text validates under ajv too, or a known cause explains why not. ajv must give a
    verdict (or a known reason for none) unless `allow_no_verdict`."""
    report = check_ajv(schema, texts, where=where)
    assert allow_no_verdict or not report.no_verdict, f"ajv gives no verdict: {report.no_verdict}"
    report.assert_clean(min_checked=0, stacklevel=3)
    return report
