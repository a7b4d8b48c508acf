"""Routes of the web memory inspector: sign in with an API key, browse the tenant's users, a
user's memories (tag, layer, dates, expiry, source turns, superseded chain), profile, what
recall returns for a question and with which scores, delete / forget / erase with confirmation,
the sweep log for admins, LLM cost per turn of the recent writes.

Pages call the same service as the API and raise the same errors; the app's error handlers
answer them as pages here (``error_page``). Every write is a POST carrying the session's CSRF
token, from a page that asked for confirmation.

(No ``from __future__ import annotations`` here: FastAPI must see the dependency types that
``ui_router`` defines locally as objects, not as names it cannot resolve.)
"""

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import jinja2
from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from deployments.api.auth import AuthError
from deployments.api.runtime import Runtime
from deployments.ui.session import COOKIE, Sessions, UiSession
from memory_core.errors import NotFoundError, ValidationError
from memory_core.models import Fact
from memory_core.prompt import event_span
from memory_core.tenancy import scoped, unscoped
from memory_core.validation import parse_memory_id

STATIC_DIR = Path(__file__).parent / "static"
_USERS_PER_PAGE = 50
_JOBS_SHOWN = 10
_SEARCH_CANDIDATES = 20

# No script runs on these pages, no frame holds them, forms post only to this origin.
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

# What a redirect after a write may say: fixed texts, so a link cannot put words on the page.
_NOTICES = {
    "deleted": "Memory deleted, with its earlier versions.",
    "preference-deleted": "Preference deleted.",
    "erased": "User erased: memories, profile, working windows and queued writes are gone.",
}


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if value else "—"


_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("deployments.ui", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
_templates.filters["seg"] = lambda value: quote(str(value), safe="")
_templates.filters["when"] = _when
_templates.filters["span"] = event_span


def is_ui(request: Request) -> bool:
    """Whether a request is for the inspector (its errors are answered as pages)."""
    path = request.url.path
    return path == "/ui" or path.startswith("/ui/")


def _page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = _templates.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status, headers=_HEADERS)


def error_page(status: int, detail: object) -> Response:
    """An error of an inspector route: to the sign-in page when not signed in, else a page."""
    if status == 401:
        response = RedirectResponse("/ui/signin", status_code=303, headers=_HEADERS)
        response.delete_cookie(COOKIE, path="/ui")
        return response
    text = detail if isinstance(detail, str) else "the request is invalid"
    return _page("error.html", status, code=status, detail=text, session=None)


def _back(url: str, **query: str) -> RedirectResponse:
    target = f"{url}?{urlencode(query)}" if query else url
    return RedirectResponse(target, status_code=303, headers=_HEADERS)


def _user_url(user_id: str) -> str:
    return f"/ui/users/{quote(user_id, safe='')}"


def _chain(facts: list[Fact], fact: Fact) -> list[Fact]:
    """Every version of ``fact``, oldest first: what it replaced and what replaced it."""
    by_id = {f.id: f for f in facts}
    replaced: dict[int, list[Fact]] = {}
    for f in facts:
        if f.superseded_by is not None:
            replaced.setdefault(f.superseded_by, []).append(f)
    newest = fact
    while newest.superseded_by is not None and newest.superseded_by in by_id:
        newest = by_id[newest.superseded_by]
    versions, todo = [newest], [newest]
    while todo:
        older = replaced.get(todo.pop().id, [])
        versions.extend(older)
        todo.extend(older)
    return sorted(versions, key=lambda f: (f.created_at, f.id))


def ui_router(rt: Runtime, sessions: Sessions) -> APIRouter:
    """The inspector's pages under ``/ui``."""
    router = APIRouter(prefix="/ui", include_in_schema=False)
    svc = rt.service
    serve = rt.settings.serve

    def signed_in(request: Request) -> UiSession:
        return sessions.check(request.cookies.get(COOKIE))

    Session = Annotated[UiSession, Depends(signed_in)]

    def posted(request: Request, session: Session, csrf: Annotated[str, Form()] = "") -> UiSession:
        # A write from another site carries neither the cookie (SameSite=Strict) nor the token.
        if request.headers.get("sec-fetch-site") == "cross-site":
            raise AuthError("a form from another site", status=403)
        Sessions.check_csrf(session, csrf)
        return session

    Posted = Annotated[UiSession, Depends(posted)]

    def stored(session: UiSession, user_id: str) -> str:
        return rt.user(session.principal, user_id)

    @router.get("")
    def home(_: Session) -> Response:
        return _back("/ui/users")

    @router.get("/signin")
    def signin_form(request: Request) -> Response:
        try:
            signed_in(request)
            return _back("/ui/users")
        except AuthError:
            return _page("signin.html", local_only=serve.local_only, error=None, session=None)

    @router.post("/signin")
    def signin(request: Request, api_key: Annotated[str, Form()] = "") -> Response:
        if request.headers.get("sec-fetch-site") == "cross-site":
            raise AuthError("a form from another site", status=403)
        try:
            cookie = sessions.open(api_key.strip() or None)
        except AuthError as exc:
            return _page("signin.html", 401, local_only=serve.local_only, error=str(exc), session=None)
        response = _back("/ui/users")
        secure = serve.ui_secure_cookie
        response.set_cookie(
            COOKIE,
            cookie,
            max_age=sessions.ttl_s,
            path="/ui",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https" if secure is None else secure,
        )
        return response

    @router.post("/signout")
    def signout(_: Posted) -> Response:
        response = _back("/ui/signin")
        response.delete_cookie(COOKIE, path="/ui")
        return response

    @router.get("/users")
    def users(
        session: Session, after: Annotated[str, Query(max_length=200)] = "", notice: str = ""
    ) -> Response:
        tenant = session.principal.tenant
        page = svc.users(tenant, scoped(tenant, after) if after else "", _USERS_PER_PAGE)
        rows = [(unscoped(u.user_id), u) for u in page]
        more = rows[-1][0] if len(rows) == _USERS_PER_PAGE else None
        return _page(
            "users.html", session=session, rows=rows, after=after, more=more, notice=_NOTICES.get(notice)
        )

    @router.get("/find")
    def find(session: Session, user_id: Annotated[str, Query(max_length=200)] = "") -> Response:
        stored(session, user_id.strip())  # a bad id is a 422 page here, not a broken link
        return _back(_user_url(user_id.strip()))

    @router.get("/users/{user_id}")
    def user(
        session: Session,
        user_id: str,
        q: Annotated[str, Query(max_length=2000)] = "",
        history: bool = False,
        notice: str = "",
    ) -> Response:
        uid = stored(session, user_id)
        facts = svc.list_facts(uid, include_superseded=True)
        versions = {f.id: len(_chain(facts, f)) for f in facts if f.superseded_by is None}
        shown = facts if history else [f for f in facts if f.superseded_by is None]
        search = None
        if q.strip():
            returned = {h.fact.id for h in svc.recall(uid, q)}
            candidates = svc.recall(uid, q, k=_SEARCH_CANDIDATES, threshold=float("-inf"))
            search = [(hit, hit.fact.id in returned) for hit in candidates]
        jobs = rt.writes.jobs_of(session.principal.tenant, uid, _JOBS_SHOWN)
        return _page(
            "user.html",
            session=session,
            user_id=user_id,
            facts=shown,
            live=len(versions),
            superseded=len(facts) - len(versions),
            versions=versions,
            history=history,
            profile=svc.profile(uid),
            q=q,
            search=search,
            jobs=jobs,
            now=svc.clock.now(),
            notice=_NOTICES.get(notice),
        )

    @router.get("/users/{user_id}/memories/{memory_id}")
    def memory(session: Session, user_id: str, memory_id: str) -> Response:
        uid = stored(session, user_id)
        fact = svc.get_fact(uid, parse_memory_id(memory_id, uid))
        chain = _chain(svc.list_facts(uid, include_superseded=True), fact)
        return _page(
            "memory.html", session=session, user_id=user_id, fact=fact, chain=chain, now=svc.clock.now()
        )

    @router.get("/users/{user_id}/memories/{memory_id}/delete")
    def confirm_delete(session: Session, user_id: str, memory_id: str) -> Response:
        uid = stored(session, user_id)
        fact = svc.get_fact(uid, parse_memory_id(memory_id, uid))
        chain = _chain(svc.list_facts(uid, include_superseded=True), fact)
        return _page("confirm_delete.html", session=session, user_id=user_id, fact=fact, chain=chain)

    @router.post("/users/{user_id}/memories/{memory_id}/delete")
    def delete(session: Posted, user_id: str, memory_id: str) -> Response:
        uid = stored(session, user_id)
        rt.writes.forget_ids(uid, [parse_memory_id(memory_id, uid)])
        return _back(_user_url(user_id), notice="deleted")

    @router.get("/users/{user_id}/profile/{key}/delete")
    def confirm_delete_preference(session: Session, user_id: str, key: str) -> Response:
        entry = next((e for e in svc.profile(stored(session, user_id)) if e.key == key), None)
        if entry is None:
            raise NotFoundError(user_id, [key])
        return _page("confirm_preference.html", session=session, user_id=user_id, entry=entry)

    @router.post("/users/{user_id}/profile/{key}/delete")
    def delete_preference(session: Posted, user_id: str, key: str) -> Response:
        rt.writes.delete_preference(stored(session, user_id), key)
        return _back(_user_url(user_id), notice="preference-deleted")

    @router.get("/users/{user_id}/forget")
    def confirm_forget(
        session: Session, user_id: str, utterance: Annotated[str, Query(max_length=2000)] = ""
    ) -> Response:
        stored(session, user_id)
        if not utterance.strip():
            raise ValidationError("say what to forget, in the user's words")
        return _page("confirm_forget.html", session=session, user_id=user_id, utterance=utterance)

    @router.post("/users/{user_id}/forget")
    def forget(session: Posted, user_id: str, utterance: Annotated[str, Form()] = "") -> Response:
        result = rt.writes.forget(stored(session, user_id), utterance)
        return _page("forgotten.html", session=session, user_id=user_id, utterance=utterance, result=result)

    def erase_form(session: UiSession, user_id: str, error: str | None) -> Response:
        uid = stored(session, user_id)
        return _page(
            "confirm_erase.html",
            422 if error else 200,
            session=session,
            user_id=user_id,
            facts=len(svc.list_facts(uid, include_superseded=True)),
            entries=len(svc.profile(uid)),
            error=error,
        )

    @router.get("/users/{user_id}/erase")
    def confirm_erase(session: Session, user_id: str) -> Response:
        return erase_form(session, user_id, None)

    @router.post("/users/{user_id}/erase")
    def erase(session: Posted, user_id: str, confirm: Annotated[str, Form()] = "") -> Response:
        uid = stored(session, user_id)
        if confirm.strip() != user_id:
            return erase_form(session, user_id, "The id typed is not this user's: nothing was erased.")
        rt.writes.erase(uid)
        return _back("/ui/users", notice="erased")

    @router.get("/sweeps")
    def sweeps(session: Session) -> Response:
        principal = session.principal
        if not principal.admin:
            raise AuthError("the sweep log is for admin keys", status=403)
        records = rt.sweeps.list(50, None if principal.operator else principal.tenant)
        return _page("sweeps.html", session=session, records=records)

    return router
