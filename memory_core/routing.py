"""Stable routing of users to fact shards."""

from __future__ import annotations

import hashlib


def shard_of(user_id: str, shards: int) -> int:
    """Return the shard that owns ``user_id``.

    Uses BLAKE2b over the UTF-8 id, so the answer is the same in every process and on every
    machine (Python's ``hash()`` is salted per process).
    """
    digest = hashlib.blake2b(user_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards
