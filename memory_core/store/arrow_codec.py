"""Facts and their vectors as Arrow record batches: the shape of log records and snapshots."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from memory_core.models import Fact, Layer, Tag

_TS = pa.timestamp("us", tz="UTC")
_TAGS = {t.value: t for t in Tag}
_LAYERS = {layer.value: layer for layer in Layer}


def fact_schema(dim: int, metadata: dict[str, str] | None = None) -> pa.Schema:
    """Arrow schema of stored facts with ``dim``-wide float32 embeddings."""
    return pa.schema(
        [
            ("id", pa.int64()),
            ("user_id", pa.string()),
            ("text", pa.string()),
            ("tag", pa.string()),
            ("layer", pa.string()),
            ("created_at", _TS),
            ("expire_at", _TS),
            ("source_turn_ids", pa.list_(pa.string())),
            ("superseded_by", pa.int64()),
            ("about", pa.string()),
            ("event_start", pa.date32()),
            ("event_end", pa.date32()),
            ("embedding", pa.list_(pa.float32(), dim)),
        ],
        metadata=metadata,
    )


def facts_to_batch(facts: Sequence[Fact], vectors: np.ndarray, dim: int) -> pa.RecordBatch:
    """Pack facts and their (n, dim) float32 vectors into one record batch."""
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1), pa.float32())
    columns = [
        pa.array([f.id for f in facts], pa.int64()),
        pa.array([f.user_id for f in facts], pa.string()),
        pa.array([f.text for f in facts], pa.string()),
        pa.array([f.tag.value for f in facts], pa.string()),
        pa.array([f.layer.value for f in facts], pa.string()),
        pa.array([f.created_at for f in facts], _TS),
        pa.array([f.expire_at for f in facts], _TS),
        pa.array([list(f.source_turn_ids) for f in facts], pa.list_(pa.string())),
        pa.array([f.superseded_by for f in facts], pa.int64()),
        pa.array([f.about for f in facts], pa.string()),
        pa.array([f.event_start for f in facts], pa.date32()),
        pa.array([f.event_end for f in facts], pa.date32()),
        pa.FixedSizeListArray.from_arrays(flat, dim),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=fact_schema(dim))


def batch_to_facts(batch: pa.RecordBatch | pa.Table) -> tuple[list[Fact], np.ndarray]:
    """Unpack a record batch (or table) into facts and an (n, dim) float32 vector matrix."""
    cols = {name: batch.column(name) for name in batch.schema.names}
    emb = cols["embedding"]
    if isinstance(emb, pa.ChunkedArray):
        emb = emb.combine_chunks()
    dim = emb.type.list_size
    vectors = emb.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim).astype(np.float32)
    ids = cols["id"].to_pylist()
    users = cols["user_id"].to_pylist()
    texts = cols["text"].to_pylist()
    tags = cols["tag"].to_pylist()
    layers = cols["layer"].to_pylist()
    created = cols["created_at"].to_pylist()
    expires = cols["expire_at"].to_pylist()
    sources = cols["source_turn_ids"].to_pylist()
    superseded = cols["superseded_by"].to_pylist()
    # Logs and snapshots written before facts had an ``about`` column hold only the user's own.
    about = cols["about"].to_pylist() if "about" in cols else [""] * len(ids)
    # ... and those written before facts had event times name none.
    starts = cols["event_start"].to_pylist() if "event_start" in cols else [None] * len(ids)
    ends = cols["event_end"].to_pylist() if "event_end" in cols else [None] * len(ids)
    facts = [
        # Values were validated when first written; skip re-validation on the hot load path.
        Fact.model_construct(
            id=ids[i],
            user_id=users[i],
            text=texts[i],
            tag=_TAGS[tags[i]],
            layer=_LAYERS[layers[i]],
            created_at=created[i],
            expire_at=expires[i],
            source_turn_ids=tuple(sources[i]),
            superseded_by=superseded[i],
            about=about[i],
            event_start=starts[i],
            event_end=ends[i],
        )
        for i in range(len(ids))
    ]
    return facts, vectors


def batch_to_ipc(batch: pa.RecordBatch) -> bytes:
    """Serialize one record batch as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def ipc_to_table(payload: bytes) -> pa.Table:
    """Read an Arrow IPC stream written by :func:`batch_to_ipc`."""
    return pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
