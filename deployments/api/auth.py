"""API keys → tenants (user ids namespaced per tenant, see ``memory_core.tenancy``). Fails closed:
no key, no access."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from memory_core.errors import ConfigError
from memory_core.settings import ServeSettings
from memory_core.tenancy import LOCAL_TENANT


@dataclass(frozen=True)
class Principal:
    """Who is calling: a tenant, whose admins act on that tenant only, and whose operators
    (an explicit role in settings) may act on every tenant."""

    tenant: str
    admin: bool
    operator: bool = False


class AuthError(Exception):
    """Missing or unknown API key (HTTP 401), or an admin call without admin rights (403)."""

    def __init__(self, message: str, status: int = 401) -> None:
        self.status = status
        super().__init__(message)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def _signer_name(digest: bytes) -> str:
    # A name for the key in a session cookie that tells nothing about the key itself.
    return hashlib.sha256(b"longmem-ui-signer\0" + digest).hexdigest()[:32]


class Authenticator:
    """Checks ``Authorization: Bearer KEY`` (or ``X-API-Key``) against the configured keys."""

    def __init__(self, settings: ServeSettings) -> None:
        """Index the keys by digest.

        Raises:
            ConfigError: no key is configured and local_only is off, keys are configured and
                local_only is on, or one key is given twice.
        """
        if settings.local_only and settings.api_keys:
            # Settings refuse this when loaded; settings changed afterwards must not open a door.
            raise ConfigError(
                "serve.local_only together with serve.api_keys: keyless callers would be admins"
            )
        self._local_only = settings.local_only
        if not settings.api_keys and not settings.local_only:
            raise ConfigError(
                'no API keys configured: set serve.api_keys (LONGMEM_SERVE__API_KEYS=\'[{"key": ..., '
                '"tenant": ...}]\') or start with --local-only to serve on 127.0.0.1 without keys'
            )
        self._keys: dict[bytes, Principal] = {}
        # Web inspector sessions are signed with a secret derived from the key that opened
        # them, so every replica configured with that key checks them and removing the key ends
        # them. Local-only has no key: its secret lives and dies with this process.
        self._signers: dict[str, tuple[Principal, bytes]] = {}
        if self._local_only:
            self._signers[LOCAL_TENANT] = (Principal(LOCAL_TENANT, admin=True), secrets.token_bytes(32))
        for entry in settings.api_keys:
            digest = _digest(entry.key.get_secret_value())
            if digest in self._keys:
                raise ConfigError(
                    f"an API key is configured twice (tenants {self._keys[digest].tenant!r}, "
                    f"{entry.tenant!r})"
                )
            self._keys[digest] = Principal(entry.tenant, entry.admin or entry.operator, entry.operator)
            secret = hmac.new(digest, b"longmem-ui-session", hashlib.sha256).digest()
            self._signers[_signer_name(digest)] = (self._keys[digest], secret)

    def signer(self, api_key: str | None) -> tuple[str, bytes]:
        """For a key (none when local-only): a public name of it and the secret its sessions are
        signed with.

        Raises:
            AuthError: no key, or a key that is not configured.
        """
        self.authenticate(None, api_key)
        if self._local_only:
            return LOCAL_TENANT, self._signers[LOCAL_TENANT][1]
        assert api_key is not None  # authenticate() refused a missing key
        name = _signer_name(_digest(api_key))
        return name, self._signers[name][1]

    def signed_by(self, name: str) -> tuple[Principal, bytes] | None:
        """The caller and the secret behind a signer's name, or None for a name no key has."""
        return self._signers.get(name)

    def authenticate(self, authorization: str | None, api_key: str | None) -> Principal:
        """The caller behind the request's headers.

        Raises:
            AuthError: no key, or a key that is not configured.
        """
        key = api_key
        if authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise AuthError("Authorization must be 'Bearer <API key>'")
            key = token.strip()
        if self._local_only:
            # No key exists (see __init__): every caller, on loopback only, is the local tenant.
            return Principal(LOCAL_TENANT, admin=True)
        if not key:
            raise AuthError("missing API key: send 'Authorization: Bearer <key>'")
        digest = _digest(key)
        # Compare against every key, so the time taken says nothing about which prefix matched.
        found = None
        for known, principal in self._keys.items():
            if hmac.compare_digest(known, digest):
                found = principal
        if found is None:
            raise AuthError("unknown API key")
        return found
