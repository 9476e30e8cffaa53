"""Shared helpers: feed JSON text token by token to a compiled schema, collect verdicts."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from structgen import Compiler, Matcher
from structgen.errors import LimitExceededError, SchemaError, StructgenError, UnsupportedSchemaError
from structgen.schema import SchemaOptions
from tests.oracles.checks import AjvReport, check_ajv

# keyword files of the draft 2020-12 suite that structgen claims (the others test features it
# rejects by design: dynamic refs, remote refs, unevaluated*, vocabularies, content)
CLAIMED = (
    "additionalProperties",
    "allOf",
    "anyOf",
    "boolean_schema",
    "const",
    "contains",
    "default",
    "defs",
    "dependentRequired",
    "dependentSchemas",
    "enum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "format",
    "if-then-else",
    "infinite-loop-detection",
    "items",
    "maxContains",
    "maxItems",
    "maxLength",
    "maxProperties",
    "maximum",
    "minContains",
    "minItems",
    "minLength",
    "minProperties",
    "minimum",
    "multipleOf",
    "not",
    "oneOf",
    "pattern",
    "patternProperties",
    "prefixItems",
    "properties",
    "propertyNames",
    "ref",
    "required",
    "type",
    "uniqueItems",
    "anchor",
    "refRemote",
    "unevaluatedItems",
    "unevaluatedProperties",
    "dynamicRef",
    "vocabulary",
    "content",
)


# (`file/group` or another label, schema, JSON text) of an instance the matcher accepted
Accepted = tuple[str, Any, str]


def accepts(compiled: Any, tokenizer: Any, text: str) -> bool:
    """True when every token is allowed and the matcher can stop at the end."""
    matcher = Matcher(compiled)
    for token in tokenizer.encode(text, add_special_tokens=False):
        if not matcher.accept_token(token):
            return False
    return matcher.can_terminate()


def compile_or_reason(
    vocab: Any, schema: Any, options: SchemaOptions | None = None
) -> tuple[Any, str]:
    """(compiled, "") or (None, "unsupported" / "limit" / "schema-error" / "error: ...")."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return Compiler(vocab).json_schema(schema, options=options), ""
    except UnsupportedSchemaError:
        return None, "unsupported"
    except LimitExceededError:
        return None, "limit"
    except SchemaError:
        return None, "schema-error"
    except StructgenError as exc:
        return None, f"error: {type(exc).__name__}"


# Validating existing text: every spelling and layout of a valid instance must be accepted.
ACCEPT = SchemaOptions(mode="accept")


def run_suite(
    folder: Path,
    vocab: Any,
    tokenizer: Any,
    options: SchemaOptions = ACCEPT,
    *,
    accepted: list[Accepted] | None = None,
) -> dict[str, dict[str, int]]:
    """Per `file/group` counts: passed, failed (valid rejected), invalidated (invalid accepted),
    unsupported (tests of groups whose schema does not compile). Instances are written as
    `json.dumps` writes them (`ensure_ascii=False` in generate mode, whose spellings are those).
    `accepted` collects (`file/group`, schema, text) of every accepted instance, for
    `ajv_report`."""
    ascii_only = options.mode == "accept"
    results: dict[str, dict[str, int]] = {}
    for name in CLAIMED:
        path = folder / f"{name}.json"
        if not path.exists():
            continue
        for group in json.loads(path.read_text()):
            key = f"{name}/{group['description']}"
            counts = {"passed": 0, "failed": 0, "invalidated": 0, "unsupported": 0}
            compiled, reason = compile_or_reason(vocab, group["schema"], options)
            for test in group["tests"]:
                if compiled is None:
                    # an unsatisfiable schema rejects everything: right for invalid instances
                    if reason == "schema-error" and not test["valid"]:
                        counts["passed"] += 1
                    else:
                        counts["unsupported"] += 1
                    continue
                text = json.dumps(test["data"], ensure_ascii=ascii_only)
                ok = accepts(compiled, tokenizer, text)
                if ok and accepted is not None:
                    accepted.append((key, group["schema"], text))
                if ok == test["valid"]:
                    counts["passed"] += 1
                elif ok:
                    counts["invalidated"] += 1
                else:
                    counts["failed"] += 1
            results[key] = counts
    return results


def ajv_report(accepted: list[Accepted]) -> AjvReport:
    """ajv's verdicts on accepted instances (one batch per label), classified by `checks`."""
    by_label: dict[str, tuple[Any, list[str]]] = {}
    for label, schema, text in accepted:
        by_label.setdefault(label, (schema, []))[1].append(text)
    report = AjvReport()
    for label, (schema, texts) in by_label.items():
        report.add(check_ajv(schema, texts, where=label))
    return report
