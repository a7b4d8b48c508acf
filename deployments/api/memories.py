"""Per-user routes: ingest, recall, prompt, chat, memories, forget, profile, erase, jobs."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from deployments.api.app import ERROR_RESPONSES, principal_dependency
from deployments.api.auth import Principal
from deployments.api.dto import (
    ChatIn,
    ChatOut,
    DeletedOut,
    EraseOut,
    FactOut,
    ForgetIn,
    ForgetOut,
    HitOut,
    IngestIn,
    IngestOut,
    JobOut,
    MemoriesOut,
    ProfileIn,
    ProfileListOut,
    ProfileOut,
    PromptIn,
    PromptOut,
    RecallIn,
    RecallOut,
    RememberIn,
    TurnResult,
    UserOut,
    UsersOut,
)
from deployments.api.idempotency import KeyHeader
from deployments.api.runtime import Runtime
from memory_core.errors import NotFoundError, ValidationError
from memory_core.models import Turn
from memory_core.service import Remember
from memory_core.tenancy import scoped, unscoped
from memory_core.validation import parse_memory_id


def _job_out(rt: Runtime, principal: Principal, job_id: str) -> JobOut:
    job = rt.writes.job(principal.tenant, job_id)
    if job is None:
        raise NotFoundError(principal.tenant, [job_id])
    return JobOut(
        job_id=job.job_id,
        status=job.status,  # type: ignore[arg-type]
        results=[TurnResult.of(o) for o in job.outcomes],
        error=job.error,
    )


def memory_router(rt: Runtime) -> APIRouter:
    """Routes under ``/v1/users/{user_id}`` and ``/v1/jobs``."""
    router = APIRouter(prefix="/v1", tags=["memory"], responses=ERROR_RESPONSES)
    caller = principal_dependency(rt)
    svc = rt.service
    writes = rt.writes
    replays = rt.replays
    limits = rt.settings.serve

    @router.get("/users", response_model=UsersOut)
    def users(
        after: str = Query("", max_length=200, description="List users after this id."),
        limit: int = Query(100, ge=1, le=1000),
        principal: Principal = caller,
    ) -> UsersOut:
        """The tenant's users that have memories or profile entries, by id."""
        page = svc.users(principal.tenant, scoped(principal.tenant, after) if after else "", limit)
        return UsersOut(
            users=[
                UserOut(user_id=unscoped(u.user_id), facts=u.facts, profile_entries=u.profile_entries)
                for u in page
            ],
            next_after=unscoped(page[-1].user_id) if len(page) == limit else None,
        )

    @router.post("/users/{user_id}/turns", response_model=IngestOut, responses={202: {"model": JobOut}})
    def ingest(
        user_id: str, body: IngestIn, request: Request, key: KeyHeader = None, principal: Principal = caller
    ) -> Response:
        """Feed turns through the write path: working window, judge, extraction, resolution, writes."""
        user = rt.user(principal, user_id)
        if len(body.turns) > limits.max_turns_per_request:
            raise ValidationError(
                f"{len(body.turns)} turns in one request, limit is {limits.max_turns_per_request}"
            )
        turns = [
            Turn(role=t.role, content=t.content, at=t.at or body.at, turn_id=t.turn_id) for t in body.turns
        ]
        if body.wait:
            return replays.respond(
                request,
                user,
                key,
                body,
                200,
                lambda: IngestOut(
                    results=[TurnResult.of(o) for o in writes.ingest(user, body.session_id, turns, body.at)]
                ),
            )

        def accept() -> JobOut:
            # On disk, in the working window and queued when this returns (202).
            return JobOut(job_id=writes.submit_turns(user, body.session_id, turns, body.at), status="queued")

        return replays.respond(request, user, key, body, 202, accept)

    @router.get("/jobs/{job_id}", response_model=JobOut)
    def job(job_id: str, principal: Principal = caller) -> JobOut:
        """State of an async ingest or post-reply write job."""
        return _job_out(rt, principal, job_id)

    @router.post("/users/{user_id}/recall", response_model=RecallOut)
    def recall(user_id: str, body: RecallIn, principal: Principal = caller) -> RecallOut:
        """The memories that matter for a question, and the profile."""
        user = rt.user(principal, user_id)
        hits, profile = svc.recall_with_profile(
            user, body.query, body.k, body.threshold, body.at, body.history
        )
        return RecallOut(
            memories=[HitOut.of_hit(h) for h in hits], profile=[ProfileOut.of(e) for e in profile]
        )

    @router.post("/users/{user_id}/prompt", response_model=PromptOut)
    def prompt(user_id: str, body: PromptIn, principal: Principal = caller) -> PromptOut:
        """The prompt an agent should send: rules, profile, memories, working window, question."""
        return PromptOut(
            prompt=svc.build_prompt(rt.user(principal, user_id), body.session_id, body.query, body.k)
        )

    @router.post("/users/{user_id}/chat", response_model=ChatOut)
    def chat(
        user_id: str, body: ChatIn, request: Request, key: KeyHeader = None, principal: Principal = caller
    ) -> Response:
        """One full agent turn; the memory write from the message runs after the reply."""
        user = rt.user(principal, user_id)

        def reply() -> ChatOut:
            answer = svc.chat(user, body.session_id, body.message, body.k, max_tokens=limits.reply_max_tokens)
            return ChatOut(
                reply=answer.reply,
                memories=[HitOut.of_hit(h) for h in answer.hits],
                profile=[ProfileOut.of(e) for e in answer.profile],
                write_job_id=writes.write_after_reply(user, body.session_id, answer.turns),
            )

        return replays.respond(request, user, key, body, 200, reply)

    @router.post("/users/{user_id}/memories", response_model=MemoriesOut, status_code=201)
    def remember(
        user_id: str, body: RememberIn, request: Request, key: KeyHeader = None, principal: Principal = caller
    ) -> Response:
        """Store memories as given (no LLM), durably, as one batch."""
        user = rt.user(principal, user_id)
        items = [
            Remember(
                text=m.text,
                tag=m.tag,
                ttl=timedelta(seconds=m.ttl_seconds) if m.ttl_seconds else None,
                expire_at=m.expire_at,
                source_turn_ids=tuple(m.source_turn_ids),
            )
            for m in body.memories
        ]
        return replays.respond(
            request,
            user,
            key,
            body,
            201,
            lambda: MemoriesOut(memories=[FactOut.of(f) for f in writes.remember(user, items, at=body.at)]),
        )

    @router.get("/users/{user_id}/memories", response_model=MemoriesOut)
    def list_memories(
        user_id: str, include_superseded: bool = Query(False), principal: Principal = caller
    ) -> MemoriesOut:
        """Every memory of the user, oldest first."""
        facts = svc.list_facts(rt.user(principal, user_id), include_superseded)
        return MemoriesOut(memories=[FactOut.of(f) for f in facts])

    @router.get("/users/{user_id}/memories/{memory_id}", response_model=FactOut)
    def get_memory(user_id: str, memory_id: str, principal: Principal = caller) -> FactOut:
        """One memory (404 for any id that is not this user's)."""
        user = rt.user(principal, user_id)
        return FactOut.of(svc.get_fact(user, parse_memory_id(memory_id, user)))

    @router.delete("/users/{user_id}/memories/{memory_id}", response_model=DeletedOut)
    def delete_memory(
        user_id: str, memory_id: str, request: Request, key: KeyHeader = None, principal: Principal = caller
    ) -> Response:
        """Delete one memory, durably."""
        user = rt.user(principal, user_id)
        fact_id = parse_memory_id(memory_id, user)
        return replays.respond(
            request,
            user,
            key,
            None,
            200,
            lambda: DeletedOut(deleted=[str(i) for i in writes.forget_ids(user, [fact_id])]),
        )

    @router.post("/users/{user_id}/forget", response_model=ForgetOut)
    def forget(
        user_id: str, body: ForgetIn, request: Request, key: KeyHeader = None, principal: Principal = caller
    ) -> Response:
        """Forget what the user names in their own words ("forget my home address")."""
        user = rt.user(principal, user_id)
        return replays.respond(
            request, user, key, body, 200, lambda: ForgetOut.of(writes.forget(user, body.utterance, body.at))
        )

    @router.get("/users/{user_id}/profile", response_model=ProfileListOut)
    def get_profile(user_id: str, principal: Principal = caller) -> ProfileListOut:
        """The user's lasting preferences."""
        return ProfileListOut(profile=[ProfileOut.of(e) for e in svc.profile(rt.user(principal, user_id))])

    @router.post("/users/{user_id}/profile", response_model=ProfileOut, status_code=201)
    def add_preference(
        user_id: str, body: ProfileIn, request: Request, key: KeyHeader = None, principal: Principal = caller
    ) -> Response:
        """Add a preference (its key is derived from the text: saying it twice is one entry)."""
        user = rt.user(principal, user_id)
        return replays.respond(
            request,
            user,
            key,
            body,
            201,
            lambda: ProfileOut.of(writes.set_preference(user, body.text, source="api")),
        )

    @router.put("/users/{user_id}/profile/{key}", response_model=ProfileOut)
    def set_preference(
        user_id: str,
        key: str,
        body: ProfileIn,
        request: Request,
        idempotency_key: KeyHeader = None,
        principal: Principal = caller,
    ) -> Response:
        """Add or replace the preference under ``key``."""
        user = rt.user(principal, user_id)
        return replays.respond(
            request,
            user,
            idempotency_key,
            body,
            200,
            lambda: ProfileOut.of(writes.set_preference(user, body.text, source="api", key=key)),
        )

    @router.delete("/users/{user_id}/profile/{key}", response_model=DeletedOut)
    def delete_preference(
        user_id: str,
        key: str,
        request: Request,
        idempotency_key: KeyHeader = None,
        principal: Principal = caller,
    ) -> Response:
        """Delete one preference."""
        user = rt.user(principal, user_id)

        def delete() -> DeletedOut:
            writes.delete_preference(user, key)
            return DeletedOut(deleted=[key])

        return replays.respond(request, user, idempotency_key, None, 200, delete)

    @router.delete("/users/{user_id}", response_model=EraseOut)
    def erase(user_id: str, principal: Principal = caller) -> EraseOut:
        """Erase every trace of the user: memories and their files, profile, working windows."""
        user = rt.user(principal, user_id)
        receipt, jobs = writes.erase(user)
        return EraseOut.of(user_id, receipt, jobs)

    return router
