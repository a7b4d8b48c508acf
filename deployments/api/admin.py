"""Admin routes: run the expiry sweep with an explicit cut-off, read the sweep log."""

from __future__ import annotations

from fastapi import APIRouter, Query

from deployments.api.app import principal_dependency
from deployments.api.auth import AuthError, Principal
from deployments.api.dto import SweepIn
from deployments.api.runtime import Runtime
from memory_core.models import as_utc


def _admin(principal: Principal) -> None:
    if not principal.admin:
        raise AuthError("this API key may not run admin calls", status=403)


def admin_router(rt: Runtime) -> APIRouter:
    """Routes under ``/v1/admin``."""
    router = APIRouter(prefix="/v1/admin", tags=["admin"])
    caller = principal_dependency(rt)

    @router.post("/sweep")
    def sweep(body: SweepIn, principal: Principal = caller) -> dict[str, object]:
        """Delete every fact (all tenants) whose expiry is before ``now``; 409 while a sweep runs."""
        _admin(principal)
        now = as_utc(body.now) if body.now else rt.service.clock.now()
        record = rt.sweeps.run(now, body.dry_run)
        return record.model_dump(mode="json")

    @router.get("/sweeps")
    def sweeps(limit: int = Query(50, ge=1, le=1000), principal: Principal = caller) -> dict[str, object]:
        """The newest sweep run records (counts and errors only: no memory text)."""
        _admin(principal)
        return {"sweeps": [r.model_dump(mode="json") for r in rt.sweeps.list(limit)]}

    return router
