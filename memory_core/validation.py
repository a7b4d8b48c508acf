"""Checks run on every input before anything is written."""

from __future__ import annotations

import re

import numpy as np

from memory_core.errors import InvalidTextError, InvalidUserIdError, InvalidVectorError, NotFoundError

# Letters and digits of any script plus a few separators; no whitespace, slashes or controls,
# so ids are safe in logs, URLs and tenant namespacing ("tenant:user").
_USER_ID = re.compile(r"[\w.@:+-]+")


def check_user_id(user_id: object, max_chars: int) -> str:
    """Return ``user_id`` if it is a valid user id.

    Raises:
        InvalidUserIdError: not a string, empty, too long, or with forbidden characters.
    """
    if not isinstance(user_id, str):
        raise InvalidUserIdError(user_id, "must be a string")
    if not user_id:
        raise InvalidUserIdError(user_id, "must not be empty")
    if len(user_id) > max_chars:
        raise InvalidUserIdError(user_id, f"longer than {max_chars} characters")
    if not _USER_ID.fullmatch(user_id):
        raise InvalidUserIdError(user_id, "only letters, digits and . @ : + - _ are allowed")
    return user_id


def parse_memory_id(raw: str, user_id: str) -> int:
    """A memory id given as text (ids are 63-bit decimal strings).

    Raises:
        NotFoundError: anything else names no memory of ``user_id``.
    """
    # ASCII digits only: str.isdigit() also takes "²" or "①", which int() then refuses (a 500).
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19:
        raise NotFoundError(user_id, [raw])
    return int(raw)


def check_text(text: object, max_chars: int) -> str:
    """Return ``text`` stripped of surrounding whitespace if it is a valid memory text.

    Raises:
        InvalidTextError: not a string, blank, too long, or containing NUL characters.
    """
    if not isinstance(text, str):
        raise InvalidTextError("must be a string")
    stripped = text.strip()
    if not stripped:
        raise InvalidTextError("must not be empty")
    if len(stripped) > max_chars:
        raise InvalidTextError(f"{len(stripped)} characters, limit is {max_chars}")
    if "\x00" in stripped:
        raise InvalidTextError("must not contain NUL characters")
    return stripped


def check_vectors(vectors: object, dim: int, rows: int) -> np.ndarray:
    """Return ``vectors`` as a C-contiguous float32 matrix of unit rows.

    Args:
        vectors: array-like of shape (rows, dim).
        dim: the store's vector dimension.
        rows: how many rows are expected.

    Raises:
        InvalidVectorError: wrong shape, non-finite values, or a zero row.
    """
    try:
        matrix = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InvalidVectorError(f"not a numeric array: {exc}") from exc
    if matrix.ndim == 1:
        matrix = matrix.reshape(1, -1)
    if matrix.ndim != 2 or matrix.shape != (rows, dim):
        raise InvalidVectorError(f"expected shape ({rows}, {dim}), got {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise InvalidVectorError("contains NaN or infinite values")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if (norms < 1e-12).any():
        raise InvalidVectorError("a vector has zero norm")
    return np.ascontiguousarray(matrix / norms, dtype=np.float32)
