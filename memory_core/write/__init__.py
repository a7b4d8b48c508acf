"""The write path: pre-filter, LLM judge, extraction, update resolution, forgetting by words."""
