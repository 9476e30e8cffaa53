"""ajv 8 (Node.js) as a second JSON Schema oracle beside the Python `jsonschema` library.

The JSON Schema spec reads `pattern` as ECMA-262 (`$` only at the very end, ASCII `\\d`), as
ajv does; `jsonschema` uses Python's `re`, which is laxer. Tests check what structgen accepts
under both.

Installation (`make fixtures`, or `python -m tests.oracles.ajv`): `npm ci` of the committed
`package.json` / `package-lock.json` beside this file (exact versions of ajv, ajv-formats,
ajv-draft-04 and their dependencies; npm checks each tarball against the lock's sha512) into
`$STRUCTGEN_CACHE/oracles/ajv-<lock digest>`. Only the npm registry is needed.

Use: `oracle()` starts one node process per Python process (`ajv_server.cjs`), which speaks JSON
lines. Each schema is sent and compiled once (keyed by its canonical JSON text); instances go in
batches. ajv runs with strict mode off, `allErrors` off, ajv-formats in full mode and
`unicodeRegExp` on (patterns are `new RegExp(p, "u")`); the draft follows `$schema`
(2020-12 when there is none, as `jsonschema.validators.validator_for` defaults). A schema ajv
cannot compile raises `AjvSchemaError`: no verdict.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from structgen._assets import AssetError, cache_dir

__all__ = [
    "AjvError",
    "AjvOracle",
    "AjvSchemaError",
    "AjvTimeout",
    "AjvUnavailable",
    "draft_of",
    "install",
    "install_dir",
    "oracle",
]

HERE = Path(__file__).resolve().parent
SERVER = HERE / "ajv_server.cjs"
LOCK = HERE / "package-lock.json"
PACKAGE = HERE / "package.json"

# `$schema` substrings, in the order they are tried (as structgen's own draft detection reads it)
_DRAFTS = ("draft-03", "draft-04", "draft-06", "draft-07", "2019-09", "2020-12")


class AjvError(RuntimeError):
    """ajv gave no verdict (the process died, timed out, or an instance is not JSON)."""


class AjvSchemaError(AjvError):
    """ajv cannot compile the schema (invalid under its meta-schema, a pattern that is not
    ECMA-262 with the `u` flag, an unresolvable `$ref`, draft-03...): no verdict."""


class AjvTimeout(AjvError):
    """ajv gave no answer in time (a pattern that backtracks for ever): the process is killed
    and the next call starts a fresh one. No verdict."""


class AjvUnavailable(AjvError, FileNotFoundError):
    """node or the installed npm packages are missing (`make fixtures` installs them)."""


def draft_of(schema: Any) -> str:
    """The draft ajv should use: from the root's `$schema`, 2020-12 when it names none."""
    if isinstance(schema, dict):
        uri = schema.get("$schema")
        if isinstance(uri, str):
            for draft in _DRAFTS:
                if draft in uri:
                    return draft
    return "2020-12"


def install_dir() -> Path:
    """Where the pinned packages are installed: one folder per lock file content."""
    digest = hashlib.sha256(LOCK.read_bytes() + PACKAGE.read_bytes()).hexdigest()[:16]
    return cache_dir() / "oracles" / f"ajv-{digest}"


def install(*, fetch: bool = True) -> Path:
    """The `node_modules` folder of the pinned ajv packages, installed with `npm ci` if needed.

    With `fetch=False` a missing installation raises `AjvUnavailable` instead.
    """
    target = install_dir()
    stamp = target / "INSTALLED"
    if stamp.is_file():
        return target / "node_modules"
    if not fetch:
        raise AjvUnavailable(f"not installed at {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        staging = Path(tmp) / "out"
        staging.mkdir()
        shutil.copy(PACKAGE, staging / "package.json")
        shutil.copy(LOCK, staging / "package-lock.json")
        cmd = ["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--silent"]
        try:
            subprocess.run(cmd, cwd=staging, check=True, capture_output=True, text=True)
        except FileNotFoundError as exc:
            raise AssetError("'npm' is not installed; it is needed for the ajv oracle") from exc
        except subprocess.CalledProcessError as exc:
            raise AssetError(f"{' '.join(cmd)} failed:\n{exc.stderr.strip()}") from exc
        locked = json.loads(LOCK.read_text())["packages"]
        for key, entry in locked.items():
            if not key:
                continue
            got = json.loads((staging / key / "package.json").read_text())["version"]
            if got != entry["version"]:
                raise AssetError(f"{key}: npm ci installed {got}, the lock says {entry['version']}")
        (staging / "INSTALLED").write_text(
            json.dumps({k: v["version"] for k, v in locked.items() if k}, indent=1) + "\n"
        )
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target / "node_modules"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


class AjvOracle:
    """One node process running ajv. Thread-safe; restarts itself after a crash or timeout."""

    def __init__(self, node_modules: Path, *, timeout: float = 30.0) -> None:
        node = shutil.which("node")
        if node is None:
            raise AjvUnavailable("node is not installed; the ajv oracle needs it")
        self._cmd = [node, str(SERVER), str(node_modules)]
        self._timeout = timeout
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._buffer = b""
        self._sids: dict[str, int] = {}  # canonical schema text -> id, in this process
        self._sent: set[int] = set()  # ids the running node process has compiled
        self._errors: dict[int, str] = {}  # ids ajv could not compile
        self.requests = 0  # round trips made, for tests of the batching

    # ------------------------------------------------------------------ public

    def validate(self, schema: Any, instance: Any) -> bool:
        """ajv's verdict on one instance (a Python value, sent as JSON)."""
        return self.validate_many(schema, [instance])[0]

    def validate_many(self, schema: Any, instances: Iterable[Any]) -> list[bool]:
        """ajv's verdicts on many instances of one schema, in one round trip."""
        return self.validate_texts(schema, [json.dumps(v, allow_nan=False) for v in instances])

    def validate_texts(self, schema: Any, texts: Sequence[str]) -> list[bool]:
        """ajv's verdicts on JSON texts, which node parses with `JSON.parse` (so numbers are
        read as a JavaScript user's validator reads them: IEEE doubles)."""
        key = _canonical(schema)
        with self._lock:
            sid = self._sids.setdefault(key, len(self._sids))
            if sid in self._errors:
                raise AjvSchemaError(self._errors[sid])
            if not texts:
                return []
            self._start()  # first, so that a restarted process is sent the schema again
            request: dict[str, Any] = {"sid": sid, "texts": list(texts)}
            if sid not in self._sent:
                request["schema"] = key
                request["draft"] = draft_of(schema)
            reply = self._call(request)
            self._sent.add(sid)
            if "valid" in reply:
                valid: list[bool] = reply["valid"]
                return valid
            if reply.get("kind") == "schema":
                self._errors[sid] = reply["error"]
                raise AjvSchemaError(reply["error"])
            raise AjvError(reply["error"])

    def compiles(self, schema: Any) -> bool:
        """Whether ajv can compile the schema (and so give verdicts on it)."""
        try:
            self.validate_texts(schema, ["null"])
        except AjvSchemaError:
            return False
        return True

    @property
    def schemas(self) -> int:
        """Distinct schemas (by canonical JSON) this oracle has been asked about."""
        return len(self._sids)

    def close(self) -> None:
        with self._lock:
            self._stop()

    # ------------------------------------------------------------------ the process

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in _stop)
            self._proc = subprocess.Popen(
                self._cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr
            )
            self._buffer = b""
            self._sent.clear()
        return self._proc

    def _stop(self) -> None:
        if self._proc is not None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _died(self, what: str, cls: type[AjvError] = AjvError) -> AjvError:
        if self._proc is not None:
            if cls is AjvTimeout:
                self._proc.kill()
            try:
                self._proc.wait(timeout=2)  # so that its last words are on stderr
            except subprocess.TimeoutExpired:
                self._proc.kill()
        err = b""
        if self._stderr is not None:
            self._stderr.seek(0)
            err = self._stderr.read()[-2000:]
        self._stop()
        return cls(f"the ajv process {what}: {err.decode('utf-8', 'replace').strip()}")

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        self.requests += 1
        try:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
        except BrokenPipeError:
            raise self._died("exited") from None
        fd = proc.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], self._timeout)
            if not ready:
                raise self._died(f"gave no answer within {self._timeout} s (killed)", AjvTimeout)
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise self._died("exited")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        return reply


@functools.cache
def oracle() -> AjvOracle:
    """The process-wide oracle (one node process, started on first use).

    Raises `AjvUnavailable` when node or the packages are missing.
    """
    instance = AjvOracle(install(fetch=False))
    atexit.register(instance.close)
    return instance


if __name__ == "__main__":
    print(f"ajv oracle: {install()}")
    if "--check" in sys.argv:
        assert not oracle().validate({"pattern": "^a$"}, "a\n")
        print("ajv oracle: ok")
