"""Tenants: the HTTP API stores the user ``user`` of a tenant as ``tenant:user``.

Tenant names cannot hold ``:``, so the first colon of a stored id ends its tenant, and no
tenant can name another tenant's user. The stores treat ids as opaque except to scope work
that spans users to one tenant (the expiry sweep a tenant's admin runs).
"""

from __future__ import annotations

from memory_core.errors import InvalidUserIdError
from memory_core.validation import check_user_id

LOCAL_TENANT = "local"
SEPARATOR = ":"


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
    return f"{tenant}{SEPARATOR}{user_id}"


def tenant_of(stored_user_id: str) -> str:
    """The tenant of a stored user id ("" for an id stored without one)."""
    tenant, separator, _ = stored_user_id.partition(SEPARATOR)
    return tenant if separator else ""
