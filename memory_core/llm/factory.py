"""Build the LLM engine named in the settings."""

from __future__ import annotations

from pathlib import Path

from memory_core.errors import ConfigError
from memory_core.llm.base import LLMEngine
from memory_core.llm.packaged import resolve
from memory_core.settings import LLMEngineName, LLMSettings

_GPU_DEVICES = (Path("/dev/nvidiactl"), Path("/dev/nvidia0"))


def gpu_visible() -> bool:
    """Whether an NVIDIA GPU device node exists on this machine."""
    return any(device.exists() for device in _GPU_DEVICES)


def make_engine(settings: LLMSettings) -> LLMEngine:
    """Load or connect to the engine ``settings`` name.

    Raises:
        ConfigError: the settings are incomplete for that engine.
        LLMUnavailableError: the engine's package or model is missing.
    """
    engine = settings.engine
    if engine is LLMEngineName.AUTO:
        engine = LLMEngineName.VLLM if gpu_visible() else LLMEngineName.LLAMA_CPP
    if engine is LLMEngineName.OPENAI:
        from memory_core.llm.openai_engine import OpenAIEngine

        if not settings.base_url:
            raise ConfigError("llm.engine=openai needs llm.base_url (e.g. http://127.0.0.1:8000/v1)")
        return OpenAIEngine(
            settings.base_url,
            str(settings.model_path or settings.model.value),
            api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        )
    if engine is LLMEngineName.VLLM:
        from memory_core.llm.hf_weights import ensure_hf_model
        from memory_core.llm.vllm_engine import VLLMEngine

        model_dir = settings.model_path or ensure_hf_model(
            resolve(settings.model, settings.models_dir), settings.models_dir / "hf"
        )
        return VLLMEngine(model_dir)
    from memory_core.llm.llama_cpp_engine import LlamaCppEngine
    from memory_core.write.prompts import fixed_beginnings

    model_file = settings.model_path or resolve(settings.model, settings.models_dir)
    return LlamaCppEngine(
        model_file,
        n_ctx=settings.context_tokens,
        threads=settings.threads,
        warm=fixed_beginnings(),
        state_dir=settings.models_dir / "prompt-states",
    )
