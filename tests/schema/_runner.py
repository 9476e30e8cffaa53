"""Shared helpers: feed JSON text token by token to a compiled schema, collect verdicts."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from structgen import Compiler, Matcher
from structgen.errors import LimitExceededError, SchemaError, StructgenError, UnsupportedSchemaError
from structgen.schema import SchemaOptions

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


def run_suite(folder: Path, vocab: Any, tokenizer: Any) -> dict[str, dict[str, int]]:
    """Per `file/group` counts: passed, failed (valid rejected), invalidated (invalid accepted),
    unsupported (tests of groups whose schema does not compile)."""
    results: dict[str, dict[str, int]] = {}
    for name in CLAIMED:
        path = folder / f"{name}.json"
        if not path.exists():
            continue
        for group in json.loads(path.read_text()):
            key = f"{name}/{group['description']}"
            counts = {"passed": 0, "failed": 0, "invalidated": 0, "unsupported": 0}
            compiled, reason = compile_or_reason(vocab, group["schema"])
            for test in group["tests"]:
                if compiled is None:
                    # an unsatisfiable schema rejects everything: right for invalid instances
                    if reason == "schema-error" and not test["valid"]:
                        counts["passed"] += 1
                    else:
                        counts["unsupported"] += 1
                    continue
                ok = accepts(compiled, tokenizer, json.dumps(test["data"]))
                if ok == test["valid"]:
                    counts["passed"] += 1
                elif ok:
                    counts["invalidated"] += 1
                else:
                    counts["failed"] += 1
            results[key] = counts
    return results
