"""HF-format model directories made from packaged GGUF files, for engines that cannot read GGUF (vLLM).

transformers dequantizes the GGUF (it needs the ``gguf`` and ``accelerate`` packages) and
saves weights, config, tokenizer and chat template. That happens once per GGUF and dtype:
the directory is written under a temporary name beside its final one, fsynced, renamed into
place, and reused afterwards. Nothing is fetched from a model hub.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

from memory_core.errors import LLMUnavailableError, StorageError
from memory_core.store.fsutil import fsync_dir

HFDtype = Literal["bfloat16", "float16", "float32"]

# Written last into a converted directory: which GGUF it came from. A directory without it
# (or with another source) is not reused.
SOURCE_RECORD = "longmem-source.json"
_FORMAT = 1


def _source(gguf: Path, dtype: HFDtype) -> dict[str, Any]:
    return {"format": _FORMAT, "gguf": gguf.name, "size": gguf.stat().st_size, "dtype": dtype}


def _is_converted(model_dir: Path, source: dict[str, Any]) -> bool:
    try:
        recorded = json.loads((model_dir / SOURCE_RECORD).read_text())
    except (OSError, ValueError):
        return False
    return bool(recorded == source)


def _convert(gguf: Path, out_dir: Path, dtype: HFDtype) -> None:
    """Dequantize ``gguf`` into ``out_dir`` (weights, config, tokenizer, chat template)."""
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise LLMUnavailableError(
            f"converting a GGUF to HF format needs transformers, gguf and accelerate ({exc})"
        ) from exc
    # Without this, transformers 5 may keep the weights packed when a GGUF kernel is
    # installed, and packed weights cannot be saved.
    gguf_config = getattr(transformers, "GgufConfig", None)
    extra: dict[str, Any] = {}
    if gguf_config is not None:
        extra["quantization_config"] = gguf_config(dequantize=True)
    try:
        tokenizer: Any = AutoTokenizer.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, local_files_only=True
        )
        model: Any = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent),
            gguf_file=gguf.name,
            dtype=getattr(torch, dtype),
            local_files_only=True,
            **extra,
        )
    except (ValueError, OSError, ImportError, RuntimeError, KeyError) as exc:
        raise LLMUnavailableError(f"transformers cannot read {gguf}: {exc}") from exc
    # The weights are plain tensors now; a leftover GGUF quantizer would make saving refuse.
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        else:
            fsync_dir(path)
    fsync_dir(root)


def ensure_hf_model(gguf: Path, out_root: Path, dtype: HFDtype = "bfloat16") -> Path:
    """Return an HF-format model directory made from ``gguf``, converting it on first use.

    Args:
        gguf: a GGUF file (e.g. :func:`memory_core.llm.packaged.smollm2_path`).
        out_root: cache directory; the model goes to ``out_root/<gguf stem>-<dtype>``.
        dtype: dtype the dequantized weights are saved in.

    Returns:
        The directory, ready for ``VLLMEngine``.

    Raises:
        LLMUnavailableError: ``gguf`` is missing, or transformers (with gguf and accelerate)
            is missing or cannot read it.
        StorageError: the directory cannot be written.
    """
    if not gguf.is_file():
        raise LLMUnavailableError(f"GGUF file {gguf} does not exist")
    target = out_root / f"{gguf.stem}-{dtype}"
    source = _source(gguf, dtype)
    if _is_converted(target, source):
        return target
    try:
        out_root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=out_root))
    except OSError as exc:
        raise StorageError(f"cannot write to {out_root}: {exc}") from exc
    try:
        _convert(gguf, tmp, dtype)
        (tmp / SOURCE_RECORD).write_text(json.dumps(source) + "\n")
        _fsync_tree(tmp)
        if _is_converted(target, source):  # another process finished first
            return target
        if target.exists():  # converted from another GGUF of the same name, or incomplete
            shutil.rmtree(target)
        os.rename(tmp, target)
        fsync_dir(out_root)
    except OSError as exc:
        if _is_converted(target, source):  # lost a rename race to an identical conversion
            return target
        raise StorageError(f"cannot write the converted model to {target}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
