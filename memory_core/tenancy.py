"""Tenants: every stored user id is ``tenant:user``, whoever stores it (HTTP API or CLI).

Tenant names cannot hold ``:``, so the first colon of a stored id ends its tenant, and no
tenant can name another tenant's user. The stores treat ids as opaque except to scope work
that spans users to one tenant (the expiry sweep a tenant's admin runs).
"""

from __future__ import annotations

import re

from memory_core.errors import InvalidUserIdError, ValidationError
from memory_core.settings import TENANT_PATTERN
from memory_core.validation import check_user_id

LOCAL_TENANT = "local"
SEPARATOR = ":"
_TENANT = re.compile(TENANT_PATTERN)


def check_tenant(tenant: str) -> str:
    """Return ``tenant`` if it is a valid tenant name (as API keys' tenants are).

    Raises:
        ValidationError: not lowercase letters, digits, ``_`` and ``-``, or over 32 characters.
    """
    if not _TENANT.match(tenant):
        raise ValidationError(f"invalid tenant {tenant!r}: lowercase letters, digits, _ and -, at most 32")
    return tenant


def scoped_user_id(tenant: str, user_id: str, max_chars: int) -> str:
    """The stored id of ``tenant``'s user ``user_id``: ``tenant:user``.

    Raises:
        InvalidUserIdError: the user id is invalid, or too long once prefixed.
    """
    room = max_chars - len(tenant) - len(SEPARATOR)
    try:
        check_user_id(user_id, room)
    except InvalidUserIdError as exc:
        raise InvalidUserIdError(user_id, exc.reason) from None
    return scoped(tenant, user_id)


def scoped(tenant: str, user_id: str) -> str:
    """``tenant:user`` without checks: a bound to compare stored ids with, never an id to store."""
    return f"{tenant}{SEPARATOR}{user_id}"


def unscoped(stored_user_id: str) -> str:
    """The user id of a stored id, as its tenant named it."""
    return stored_user_id.partition(SEPARATOR)[2] or stored_user_id


def tenant_of(stored_user_id: str) -> str:
    """The tenant of a stored user id ("" for an id stored without one)."""
    tenant, separator, _ = stored_user_id.partition(SEPARATOR)
    return tenant if separator else ""
