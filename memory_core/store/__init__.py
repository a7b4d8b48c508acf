"""Durable storage: fact shards (FAISS + log + snapshots) and the DuckDB profile store."""
