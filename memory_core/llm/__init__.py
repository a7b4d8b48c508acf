"""The judge/extractor LLM: an engine protocol, its implementations, and structured calls."""
