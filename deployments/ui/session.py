"""Inspector sessions: a signed, expiring cookie, and the CSRF token that every form posts back.

Nothing is kept on the server: the cookie names the API key that opened it (by a name that tells
nothing about the key) and is signed with a secret derived from that key, so any ingress replica
with the key checks it, and removing the key from settings ends its sessions.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from deployments.api.auth import Authenticator, AuthError, Principal

COOKIE = "longmem_ui"


@dataclass(frozen=True)
class UiSession:
    """A signed-in inspector user."""

    principal: Principal
    csrf: str  # the token every form of this session posts back
    expires: int  # unix seconds


def _mac(secret: bytes, message: str) -> str:
    return hmac.new(secret, message.encode("ascii"), hashlib.sha256).hexdigest()


class Sessions:
    """Opens and checks inspector sessions."""

    def __init__(self, auth: Authenticator, ttl_s: float, now: Callable[[], float] = time.time) -> None:
        self._auth = auth
        self._ttl_s = ttl_s
        self._now = now

    @property
    def ttl_s(self) -> int:
        """How long a session lasts, in whole seconds."""
        return int(self._ttl_s)

    def open(self, api_key: str | None) -> str:
        """A cookie value for a new session of ``api_key``'s caller.

        Raises:
            AuthError: no key, or a key that is not configured.
        """
        name, secret = self._auth.signer(api_key)
        body = f"{name}.{int(self._now() + self._ttl_s)}.{secrets.token_hex(16)}"
        return f"{body}.{_mac(secret, body)}"

    def check(self, cookie: str | None) -> UiSession:
        """The session a cookie stands for.

        Raises:
            AuthError: no cookie, or one that is malformed, forged, expired or of a removed key.
        """
        parts = (cookie or "").split(".")
        if len(parts) != 4:
            raise AuthError("not signed in")
        name, expires, nonce, mac = parts
        signed = self._auth.signed_by(name)
        if signed is None or not expires.isdigit():
            raise AuthError("not signed in")
        principal, secret = signed
        if not hmac.compare_digest(_mac(secret, f"{name}.{expires}.{nonce}"), mac):
            raise AuthError("not signed in")
        if int(expires) <= self._now():
            raise AuthError("the session has expired: sign in again")
        return UiSession(principal, _mac(secret, f"csrf.{nonce}")[:32], int(expires))

    @staticmethod
    def check_csrf(session: UiSession, token: str | None) -> None:
        """Refuse a form that does not carry the session's token (another site posting it).

        Raises:
            AuthError: 403, the token is missing or wrong.
        """
        if not token or not hmac.compare_digest(session.csrf, token):
            raise AuthError("the form is stale or came from another site: reload the page", status=403)
