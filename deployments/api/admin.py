"""Admin routes: run the expiry sweep of the caller's tenant (every tenant's for operators),
read the sweep log, back up the stores, show the shard layout and reshard (operators)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query

from deployments.api.app import ERROR_RESPONSES, principal_dependency
from deployments.api.auth import AuthError, Principal
from deployments.api.dto import ReshardIn, SweepIn
from deployments.api.runtime import Runtime
from memory_core.errors import FutureCutoffError
from memory_core.models import as_utc
from memory_core.store.backup import redact_uri


def _admin(principal: Principal) -> None:
    if not principal.admin:
        raise AuthError("this API key may not run admin calls", status=403)


def admin_router(rt: Runtime) -> APIRouter:
    """Routes under ``/v1/admin``."""
    router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=ERROR_RESPONSES)
    caller = principal_dependency(rt)

    @router.post("/sweep")
    def sweep(body: SweepIn, principal: Principal = caller) -> dict[str, object]:
        """Delete the caller's tenant's facts whose expiry is before ``now`` (every tenant's with
        ``all_tenants``, operator keys only); 422 for a cut-off after the server's clock, 409 while
        a sweep runs."""
        _admin(principal)
        if body.all_tenants and not principal.operator:
            raise AuthError("only an operator key may sweep every tenant", status=403)
        clock = rt.service.clock.now()
        now = as_utc(body.now) if body.now else clock
        if now > clock:
            raise FutureCutoffError(now, clock)
        record = rt.sweeps.run(now, body.dry_run, None if body.all_tenants else principal.tenant)
        return record.model_dump(mode="json")

    def _backup_uri(principal: Principal, action: str) -> str:
        """The server's storage.backup_uri, for an operator key (403 otherwise; 409 when unset)."""
        if not principal.operator:
            raise AuthError(f"only an operator key may {action}", status=403)
        uri = rt.settings.storage.backup_uri
        if uri is None:
            raise HTTPException(409, "the server has no storage.backup_uri: set it, then back up")
        return uri

    @router.post("/backup")
    def backup(principal: Principal = caller) -> dict[str, object]:
        """Back up every shard (facts, profiles, turns) to ``storage.backup_uri`` (operator keys
        only; 409 when the server has none). Each shard is copied on its own node, its writes
        held for the copy."""
        return rt.service.backup(_backup_uri(principal, "back up the stores")).model_dump(mode="json")

    @router.get("/backup")
    def backup_schedule(principal: Principal = caller) -> dict[str, object]:
        """Where backups go and how the app's scheduled ones went (operator keys only; 409 when
        the server has no storage.backup_uri): period, next time, taken, failed, the last record
        and the last error."""
        uri = _backup_uri(principal, "read the backup schedule")
        return {"backup_uri": redact_uri(uri), "schedule": rt.backups()}

    def _operator(principal: Principal, action: str) -> None:
        if not principal.operator:
            raise AuthError(f"only an operator key may {action}", status=403)

    @router.get("/shards")
    def shards(principal: Principal = caller) -> dict[str, object]:
        """How users are routed, each shard's node, directory, slots and counts, and how the last
        reshard went (operator keys)."""
        _operator(principal, "read the shard layout")
        return {**rt.service.shards(), "reshard": rt.reshards.status()}

    @router.post("/shards", status_code=202)
    def reshard(body: ReshardIn, principal: Principal = caller) -> dict[str, object]:
        """Start adding or removing shards while the service serves (operator keys): slots move a
        few at a time, each one's writes held for its move; 202 with the reshard's status (follow
        it with GET), 409 while one runs, 422 for a count the store cannot have."""
        _operator(principal, "reshard the store")
        return rt.reshards.start(body.add, body.remove)

    @router.get("/sweeps")
    def sweeps(limit: int = Query(50, ge=1, le=1000), principal: Principal = caller) -> dict[str, object]:
        """The newest sweep run records of the caller's tenant (every record for operators);
        counts and errors only, no memory text."""
        _admin(principal)
        tenant = None if principal.operator else principal.tenant
        return {"sweeps": [r.model_dump(mode="json") for r in rt.sweeps.list(limit, tenant)]}

    return router
