"""Durable storage: shards (FAISS + log + snapshots, a turn inbox, a DuckDB profile file each)."""
