"""The web memory inspector (/ui) in headless Chromium (Debian's, driven by Playwright) over real
HTTP: the app served by uvicorn over a local service (real FAISS shards, DuckDB, embedder); its
pages on the real Serve app; its session rules as logic.

Set LONGMEM_UI_SCREENSHOTS=docs/screenshots to refresh the README's screenshots.
"""

from __future__ import annotations

import http.server
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import httpx
import pytest
import uvicorn
from playwright.sync_api import Browser, Page, expect, sync_playwright

from deployments.api.auth import Authenticator, AuthError
from deployments.ui.session import Sessions
from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.models import Fact, Layer, NewFact, Tag
from memory_core.service import MemoryService, Remember, open_local_service
from memory_core.settings import ApiKey, ServeSettings, Settings, StorageSettings
from tests.asgi_app import local_api
from tests.serve_app import ADMIN_KEY, OTHER_KEY, ServeApp, free_port

ACME_KEY = "acme-inspector-key-0123456789"
GLOBEX_KEY = "globex-inspector-key-012345678"
CHROMIUM = "/usr/bin/chromium"
# As root in a sandbox with no network: no setuid sandbox, no calls home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _settings(data_dir: Path) -> Settings:
    return Settings(
        storage=StorageSettings(data_dir=data_dir, shards=2),
        serve=ServeSettings(
            api_keys=[
                ApiKey(key=ACME_KEY, tenant="acme", admin=True),
                ApiKey(key=GLOBEX_KEY, tenant="globex"),
            ]
        ),
    )


@dataclass
class Site:
    """The inspector served over HTTP, the service behind it and what was stored."""

    url: str
    service: MemoryService
    porto: Fact  # replaced the Lyon memory: a chain of two
    tea: Fact  # temporary
    concert: Fact  # speaks of a month


def _seed(svc: MemoryService, clock: ManualClock) -> tuple[Fact, Fact, Fact]:
    lyon, tea = svc.remember(
        "acme:alice",
        [
            Remember("Alice lives in Lyon", tag="identity", source_turn_ids=("t-1",)),
            Remember(
                "Alice is trying a green tea every morning this week", tag="event", ttl=timedelta(days=60)
            ),
        ],
    )
    svc.remember("acme:alice", [Remember("Alice's brother Marco teaches chemistry", tag="identity")])
    clock.advance(timedelta(days=30))
    [porto] = svc.remember(
        "acme:alice", [Remember("Alice moved to Porto", tag="identity", source_turn_ids=("t-9",))]
    )
    svc.facts.supersede("acme:alice", lyon.id, porto.id)
    svc.set_preference("acme:alice", "Answer in short bullet points")
    svc.remember("acme:bob", [Remember("Bob plays the cello in an amateur orchestra")])
    text = "Bob played a concert in Lisbon"
    [concert] = svc.facts.add(
        [
            NewFact(
                user_id="acme:bob",
                text=text,
                tag=Tag.EVENT,
                layer=Layer.FACT,
                created_at=clock.now(),
                event_start=date(2025, 5, 1),
                event_end=date(2025, 5, 31),
            )
        ],
        svc.embedder.embed_passages([text]),
    )
    svc.remember("globex:carol", [Remember("Carol is allergic to walnuts", tag="requirement")])
    return porto, tea, concert


@pytest.fixture
def site(tmp_path: Path, embedder: Embedder, clock: ManualClock) -> Iterator[Site]:
    svc = open_local_service(_settings(tmp_path / "data"), clock, embedder)
    porto, tea, concert = _seed(svc, clock)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(local_api(svc), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield Site(f"http://127.0.0.1:{port}", svc, porto, tea, concert)
    server.should_exit = True
    thread.join(timeout=10)
    svc.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    yield context.new_page()
    context.close()


def _shot(page: Page, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("LONGMEM_UI_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"inspector-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000  # a rendered page, not a blank one


def _sign_in(page: Page, url: str, key: str) -> None:
    page.goto(f"{url}/ui/signin")
    page.fill("#api_key", key)
    page.click("button[type=submit]")


def test_sign_in_browse_search_and_delete(site: Site, page: Page, tmp_path: Path) -> None:
    _sign_in(page, site.url, ACME_KEY)
    expect(page).to_have_url(f"{site.url}/ui/users")
    users = page.locator("#users tbody tr")
    expect(users).to_have_count(2)  # alice and bob; globex's carol is another tenant's
    expect(page.locator("#users")).not_to_contain_text("carol")
    expect(users.first).to_contain_text("alice")
    expect(users.first).to_contain_text("4")  # memories stored, the replaced one included
    _shot(page, tmp_path, "users")

    page.click("text=alice")
    expect(page.locator("#user-id")).to_have_text("alice")
    table = page.locator("#memory-table")
    expect(table).to_contain_text("Alice moved to Porto")
    expect(table).not_to_contain_text("Alice lives in Lyon")  # replaced: only in the history
    expect(table).to_contain_text("until")  # the temporary memory shows its expiry
    expect(table).to_contain_text("t-9")  # source turn
    expect(page.locator("#profile")).to_contain_text("Answer in short bullet points")
    _shot(page, tmp_path, "user")

    page.fill("input[name=q]", "Which city do I live in?")
    page.click("#search button")
    first = page.locator("#search-results tbody tr").first
    expect(first).to_contain_text("Porto")
    expect(first).to_contain_text("returned")
    score = float(first.locator("td.score").inner_text())
    assert 0 < score <= 2
    expect(page.locator("#search-results")).to_contain_text("below the cut-off")
    expect(page.locator("#search-results")).not_to_contain_text("Lyon")  # replaced: never recalled
    _shot(page, tmp_path, "search")

    page.goto(f"{site.url}/ui/users/alice/memories/{site.porto.id}")
    chain = page.locator("#chain li")
    expect(chain).to_have_count(2)
    expect(chain.first).to_contain_text("Alice lives in Lyon")
    expect(chain.first).to_contain_text(f"replaced by #{site.porto.id}")
    expect(chain.last).to_contain_text("live")
    _shot(page, tmp_path, "chain")
    page.goto(f"{site.url}/ui/users/bob/memories/{site.concert.id}")
    expect(page.locator("#event-time")).to_have_text("2025-05")  # a whole month, as people write it

    page.goto(f"{site.url}/ui/users/alice")
    row = page.locator("#memory-table tr", has_text="green tea")
    row.locator("text=Delete…").click()
    expect(page.locator("blockquote")).to_contain_text("green tea")
    page.click("#confirm")
    expect(page.locator(".alert.ok")).to_contain_text("Memory deleted")
    expect(page.locator("#memory-table")).not_to_contain_text("green tea")
    assert site.tea.id not in {f.id for f in site.service.list_facts("acme:alice", include_superseded=True)}

    page.click("text=Sign out")
    expect(page).to_have_url(f"{site.url}/ui/signin")
    page.goto(f"{site.url}/ui/users/alice")
    expect(page).to_have_url(f"{site.url}/ui/signin")


def test_a_wrong_key_sees_nothing_and_each_tenant_sees_its_own(site: Site, page: Page) -> None:
    page.goto(f"{site.url}/ui/users/alice")
    expect(page).to_have_url(f"{site.url}/ui/signin")
    _sign_in(page, site.url, "not-a-key-of-anyone-0000")
    expect(page.locator(".alert.error")).to_contain_text("unknown API key")
    page.goto(f"{site.url}/ui/users")
    expect(page).to_have_url(f"{site.url}/ui/signin")
    assert "alice" not in page.content() and "Porto" not in page.content()

    _sign_in(page, site.url, GLOBEX_KEY)
    expect(page.locator("#users tbody tr")).to_have_count(1)
    expect(page.locator("#users")).to_contain_text("carol")
    page.goto(f"{site.url}/ui/users/alice")  # globex's alice: another person, with nothing
    expect(page.locator("#live-count")).to_have_text("0")
    page.goto(f"{site.url}/ui/users/alice/memories/{site.porto.id}")
    expect(page.locator("h1")).to_have_text("Not found")
    page.goto(f"{site.url}/ui/sweeps")  # globex's key is not an admin key
    expect(page.locator("h1")).to_have_text("Not allowed")


def test_a_form_on_another_site_cannot_delete(site: Site, page: Page) -> None:
    target = f"{site.url}/ui/users/alice/memories/{site.porto.id}/delete"
    attacker = _serve_page(
        f'<form method="post" action="{target}"><input name="csrf" value="guess">'
        '<button id="go">win a prize</button></form>'
    )
    _sign_in(page, site.url, ACME_KEY)
    page.goto(attacker)
    page.click("#go")
    expect(page.locator("h1")).to_have_text("Not allowed")
    assert site.porto.id in {f.id for f in site.service.list_facts("acme:alice")}

    # Without a browser: the session cookie alone, with no token or a wrong one, deletes nothing.
    with httpx.Client(base_url=site.url) as raw:
        raw.post("/ui/signin", data={"api_key": ACME_KEY})
        assert raw.cookies.get("longmem_ui")
        for form in ({}, {"csrf": "0" * 32}):
            assert raw.post(f"/ui/users/alice/memories/{site.porto.id}/delete", data=form).status_code == 403
    assert site.porto.id in {f.id for f in site.service.list_facts("acme:alice")}


def _serve_page(html: str) -> str:
    """Serve one page from another origin (another port) for the rest of the test run."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(html.encode())

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/"


def test_erase_asks_for_the_id_and_then_removes_every_trace(site: Site, page: Page) -> None:
    _sign_in(page, site.url, ACME_KEY)
    page.goto(f"{site.url}/ui/users/alice")
    page.click("text=Erase user…")
    page.fill("#confirm-id", "alicia")
    page.click("#confirm")
    expect(page.locator(".alert.error")).to_contain_text("nothing was erased")
    assert site.service.list_facts("acme:alice")
    page.fill("#confirm-id", "alice")
    page.click("#confirm")
    expect(page.locator(".alert.ok")).to_contain_text("User erased")
    expect(page.locator("#users")).not_to_contain_text("alice")
    assert site.service.list_facts("acme:alice", include_superseded=True) == []
    assert site.service.profile("acme:alice") == []


def test_the_inspector_on_the_serve_app(serve_app: ServeApp) -> None:
    serve_app.acme.post("/v1/users/ui-dora/memories", json={"memories": [{"text": "Dora rows on Sundays"}]})
    serve_app.globex.post("/v1/users/ui-egon/memories", json={"memories": [{"text": "Egon keeps koi"}]})
    try:
        with httpx.Client(base_url=serve_app.url) as web:
            unsigned = web.get("/ui/users")
            assert unsigned.status_code == 303 and unsigned.headers["location"] == "/ui/signin"
            assert web.post("/ui/signin", data={"api_key": OTHER_KEY[:-1]}).status_code == 401
            signed = web.post("/ui/signin", data={"api_key": ADMIN_KEY})
            assert signed.status_code == 303 and "HttpOnly" in signed.headers["set-cookie"]
            listing = web.get("/ui/users")
            assert "ui-dora" in listing.text and "ui-egon" not in listing.text
            assert "frame-ancestors 'none'" in listing.headers["content-security-policy"]
            assert "Dora rows on Sundays" in web.get("/ui/users/ui-dora").text
            assert web.get("/ui/static/style.css").status_code == 200
            token = re.search(r'name="csrf" value="([0-9a-f]+)"', listing.text)
            assert token is not None
            assert web.post("/ui/signout", data={"csrf": token.group(1)}).status_code == 303
    finally:
        serve_app.acme.delete("/v1/users/ui-dora")
        serve_app.globex.delete("/v1/users/ui-egon")


# ------------------------------------------------------------------ session rules (logic)


def _sessions(keys: list[ApiKey], now: list[float]) -> Sessions:
    return Sessions(Authenticator(ServeSettings(api_keys=keys)), 3600, now=lambda: now[0])


def test_a_session_is_signed_expires_and_ends_with_its_key() -> None:
    keys = [ApiKey(key=ACME_KEY, tenant="acme", admin=True), ApiKey(key=GLOBEX_KEY, tenant="globex")]
    now = [1_000_000.0]
    sessions = _sessions(keys, now)
    cookie = sessions.open(ACME_KEY)
    session = sessions.check(cookie)
    assert session.principal.tenant == "acme" and session.principal.admin
    assert ACME_KEY not in cookie

    name, expires, nonce, mac = cookie.split(".")
    for forged in (
        f"{name}.{int(expires) + 86_400}.{nonce}.{mac}",  # a longer life
        f"{name}.{expires}.{nonce}.{'0' * len(mac)}",  # no signature
        f"{sessions.open(GLOBEX_KEY).split('.')[0]}.{expires}.{nonce}.{mac}",  # another key's name
        "",
        "a.b.c",
    ):
        with pytest.raises(AuthError):
            sessions.check(forged)
    with pytest.raises(AuthError):
        sessions.open("not-a-key-of-anyone-0000")

    # Another replica with the same keys accepts it; one whose settings dropped the key does not.
    assert _sessions(keys, now).check(cookie).principal.tenant == "acme"
    with pytest.raises(AuthError):
        _sessions(keys[1:], now).check(cookie)

    Sessions.check_csrf(session, session.csrf)
    other = sessions.check(sessions.open(ACME_KEY))
    for token in (other.csrf, "", None):
        with pytest.raises(AuthError) as refused:
            Sessions.check_csrf(session, token)
        assert refused.value.status == 403

    now[0] += 3601
    with pytest.raises(AuthError, match="expired"):
        sessions.check(cookie)


def test_local_only_signs_in_without_a_key_as_the_local_admin() -> None:
    sessions = Sessions(Authenticator(ServeSettings(local_only=True)), 60)
    session = sessions.check(sessions.open(None))
    assert session.principal.tenant == "local" and session.principal.admin
    # The secret is the process's own: a restarted server signs everyone out.
    with pytest.raises(AuthError):
        Sessions(Authenticator(ServeSettings(local_only=True)), 60).check(sessions.open(None))
