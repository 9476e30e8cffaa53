"""ECMA-262 regexes as an oracle: Node.js's `new RegExp(pattern, "u")`, one process per batch.

`ecma_verdicts(cases)` takes (pattern, [strings]) pairs and returns, per case, None when node
rejects the pattern (a SyntaxError) or the list of `RegExp.prototype.test` results (search
semantics, as ajv checks `pattern`). Strings travel as lists of code points, so lone
surrogates and every other code point arrive intact.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence

_SCRIPT = r"""
const cases = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = cases.map(([p, texts]) => {
  let re;
  try { re = new RegExp(p, "u"); } catch (e) { return { error: String(e.message) }; }
  return { results: texts.map(cps => re.test(String.fromCodePoint(...cps))) };
});
process.stdout.write(JSON.stringify(out));
"""


def node_path() -> str | None:
    return shutil.which("node")


def ecma_verdicts(
    cases: Sequence[tuple[str, Sequence[str]]],
) -> list[list[bool] | None]:
    """Node's verdicts for each (pattern, strings) case; None where the pattern is invalid."""
    node = node_path()
    assert node is not None, "node is not installed"
    payload = json.dumps([[p, [[ord(c) for c in s] for s in texts]] for p, texts in cases])
    done = subprocess.run(
        [node, "-e", _SCRIPT], input=payload, capture_output=True, text=True, check=True
    )
    return [r.get("results") for r in json.loads(done.stdout)]


def ecma_errors(patterns: Sequence[str]) -> list[str | None]:
    """Node's SyntaxError message for each pattern (None when it compiles)."""
    node = node_path()
    assert node is not None, "node is not installed"
    script = _SCRIPT.replace("return { results", "return { ok: true, results")
    payload = json.dumps([[p, []] for p in patterns])
    done = subprocess.run(
        [node, "-e", script], input=payload, capture_output=True, text=True, check=True
    )
    return [r.get("error") for r in json.loads(done.stdout)]
