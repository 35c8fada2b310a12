"""The dashboard in a real browser: Debian's chromium driven by Playwright against the real server on a
loopback socket (never a downloaded browser). One server and one browser per module; each test signs in
afresh in its own context."""

from __future__ import annotations

import json
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests.servers.memroute_server import TENANT_A, TENANT_B, MemrouteServer

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="Debian's chromium is not installed (.ci/run installs it)")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemrouteServer]:
    with MemrouteServer(tmp_path_factory.mktemp("dashboard"), config={"memory": {"enabled": True}}) as running:
        yield running


@pytest.fixture(scope="module")
def chromium_browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture()
def ui(chromium_browser: Any, server: MemrouteServer) -> Iterator[Any]:
    context = chromium_browser.new_context(base_url=server.base_url, viewport={"width": 1280, "height": 900},
                                  accept_downloads=True)
    page = context.new_page()
    # Generous waits: CI runs the suite on two cores with every worker busy, where one page update can take
    # seconds; a passing run never waits them out.
    page.set_default_timeout(30_000)
    expect.set_options(timeout=30_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("dialog", lambda dialog: errors.append(f"unexpected dialog: {dialog.message}"))
    yield page
    context.close()
    assert not errors, errors


def sign_in(page: Any, secret: str) -> None:
    page.goto("/")
    page.get_by_label("Admin API key").fill(secret)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("tab", name="Memories").wait_for()
    # The tenant picker fills from /api/tenants after sign-in; wait for it, not for a fixed time.
    expect(page.locator("#tenant option")).not_to_have_count(0)


def pick_tenant(page: Any, tenant: str) -> None:
    page.get_by_label("Tenant", exact=True).select_option(tenant)
    expect(page.locator("#page-info")).not_to_have_text("\u2013")


def api(server: MemrouteServer, secret: str) -> httpx.Client:
    return server.client(secret)


def seed(server: MemrouteServer, tenant_secret: str, count: int, prefix: str, **extra: Any) -> None:
    with api(server, tenant_secret) as client:
        for i in range(count):
            body = {"content": f"{prefix} fact number {i}", "key": f"{prefix}:{i}", **extra}
            r = client.post("/api/memory", json=body)
            assert r.status_code == 201, r.text


def rows(page: Any) -> Any:
    return page.locator("#memories tbody tr")


def test_sign_in_needs_an_admin_key_and_sets_a_strict_http_only_cookie(ui: Any, server: MemrouteServer) -> None:
    ui.goto("/")
    ui.get_by_label("Admin API key").fill(server.tenant_a)
    ui.get_by_role("button", name="Sign in").click()
    ui.get_by_text("the dashboard needs an admin key").wait_for()
    ui.get_by_label("Admin API key").fill("mr_not-a-real-key")
    ui.get_by_role("button", name="Sign in").click()
    ui.get_by_text("invalid API key").wait_for()

    sign_in(ui, server.admin)
    cookie = next(c for c in ui.context.cookies() if c["name"] == "memroute_session")
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert server.admin not in cookie["value"]

    ui.get_by_role("button", name="Sign out").click()
    ui.get_by_label("Admin API key").wait_for()
    ui.reload()
    ui.get_by_label("Admin API key").wait_for()  # the session ended on the server, not only in the page
    assert ui.locator("#app").is_hidden()


def test_state_changing_requests_need_the_csrf_token(ui: Any, server: MemrouteServer) -> None:
    sign_in(ui, server.admin)
    cookie = next(c for c in ui.context.cookies() if c["name"] == "memroute_session")
    jar = {"memroute_session": cookie["value"]}
    with httpx.Client(base_url=server.base_url, cookies=jar) as client:
        assert client.get("/api/memory", params={"apiKeyId": TENANT_A}).status_code == 200  # reads need no token
        refused = client.post("/api/memory", json={"content": "sneaky", "apiKeyId": TENANT_A})
        assert refused.status_code == 403
        assert "x-csrf-token" in refused.json()["error"]["message"]
        wrong = client.post("/api/memory", json={"content": "sneaky", "apiKeyId": TENANT_A},
                            headers={"x-csrf-token": "guess"})
        assert wrong.status_code == 403
        token = client.get("/dashboard/session").json()["csrfToken"]
        allowed = client.post("/api/memory", json={"content": "allowed with the token", "apiKeyId": TENANT_A,
                                                   "key": "csrf:ok"}, headers={"x-csrf-token": token})
        assert allowed.status_code == 201
        assert client.delete(f"/api/memory/{allowed.json()['id']}", params={"apiKeyId": TENANT_A},
                             headers={"x-csrf-token": token}).status_code == 200
    with httpx.Client(base_url=server.base_url, cookies={"memroute_session": "forged"}) as client:
        assert client.get("/api/memory").status_code == 401


def test_add_edit_delete_and_user_text_is_shown_as_text(ui: Any, server: MemrouteServer) -> None:
    sign_in(ui, server.admin)
    pick_tenant(ui, TENANT_A)
    ui.get_by_role("button", name="Add memory").click()
    ui.get_by_label("Content").fill("<script>window.pwned = 1</script><b>bold?</b>")
    ui.get_by_label("Key", exact=True).fill("xss:probe")
    ui.get_by_label("Metadata (JSON object)").fill("{not json")
    ui.get_by_role("button", name="Save").click()
    ui.locator('#editor [data-field="metadata"]').get_by_text("not valid JSON").wait_for()
    ui.get_by_label("Metadata (JSON object)").fill('{"source": "dashboard"}')
    ui.get_by_role("button", name="Save").click()
    ui.get_by_text("Memory added.").wait_for()
    row = rows(ui).filter(has_text="xss:probe")
    assert row.locator("td").nth(2).inner_text() == "<script>window.pwned = 1</script><b>bold?</b>"
    assert ui.evaluate("window.pwned") is None
    assert ui.locator("#memories b").count() == 0

    row.get_by_role("button").click()
    ui.get_by_label("Content").fill("Prefers tea over coffee")
    ui.get_by_role("button", name="Save").click()
    ui.get_by_text("Memory saved.").wait_for()
    rows(ui).filter(has_text="Prefers tea over coffee").wait_for()

    # a server-side field error lands next to its field
    rows(ui).filter(has_text="xss:probe").get_by_role("button").click()
    ui.get_by_label("Content").fill("x" * 1_000_001)
    ui.get_by_role("button", name="Save").click()
    ui.locator('#editor [data-field="content"]').filter(has_text="too long").wait_for()
    ui.get_by_role("button", name="Cancel").click()

    rows(ui).filter(has_text="xss:probe").get_by_role("button").click()
    ui.get_by_role("button", name="Delete").click()
    ui.get_by_role("button", name="Confirm").click()
    ui.get_by_text("Memory deleted.").wait_for()
    expect(rows(ui).filter(has_text="xss:probe")).to_have_count(0)
    with api(server, server.tenant_a) as client:
        assert all(m["key"] != "xss:probe" for m in client.get("/api/memory").json()["data"])


def test_consolidate_from_the_editor_and_the_history_shows_what_it_said(ui: Any, server: MemrouteServer) -> None:
    with api(server, server.tenant_a) as a, api(server, server.tenant_b) as b:
        assert a.post("/api/memory", json={"content": "Lives in Lisbon", "key": "home:city"}).status_code == 201
        assert b.post("/api/memory", json={"content": "Lives in Porto", "key": "home:city"}).status_code == 201
    sign_in(ui, server.admin)
    pick_tenant(ui, TENANT_A)
    ui.get_by_role("button", name="Add memory").click()
    ui.get_by_label("Content").fill("Lives in Berlin")
    ui.get_by_label("Key", exact=True).fill("home:city")
    ui.get_by_label("Update a memory this one restates").check()
    ui.get_by_role("button", name="Save").click()
    ui.get_by_text("Memory added.").wait_for()
    row = rows(ui).filter(has_text="home:city")
    expect(row).to_have_count(1)
    assert row.locator("td").nth(2).inner_text() == "Lives in Berlin"
    row.get_by_role("button").click()
    history = ui.get_by_role("list", name="History")
    expect(history.locator("li")).to_have_count(2)
    expect(history.locator("li").nth(0)).to_contain_text("created · by api")
    expect(history.locator("li").nth(1)).to_contain_text("superseded · by api")
    expect(history.locator("li").nth(1)).to_contain_text("was: Lives in Lisbon")
    expect(history.locator("li").nth(1)).to_contain_text("now: Lives in Berlin")
    ui.get_by_role("button", name="Cancel").click()

    # a restatement under another key updates the memory that says it
    with api(server, server.tenant_a) as a:
        engineer = a.post("/api/memory", json={"content": "Works as a data engineer at Acme"}).json()["memory"]
    ui.get_by_role("button", name="Add memory").click()
    ui.get_by_label("Content").fill("Works at Acme as a data engineer")
    ui.get_by_label("Update a memory this one restates").check()
    ui.get_by_role("button", name="Save").click()
    ui.get_by_text("Memory added.").wait_for()
    ui.get_by_label("Search").fill("data engineer")
    ui.get_by_role("button", name="Apply").click()
    restated = rows(ui).filter(has_text="data engineer")
    expect(restated).to_have_count(1)
    restated.get_by_role("button").click()
    expect(ui.locator("#editor-id")).to_contain_text(engineer["id"])
    expect(history.locator("li").nth(1)).to_contain_text("was: Works as a data engineer at Acme")
    ui.get_by_role("button", name="Cancel").click()

    pick_tenant(ui, TENANT_B)  # tenant B's memory with the same key: untouched, its own history only
    ui.get_by_label("Search").fill("Porto")
    ui.get_by_role("button", name="Apply").click()
    rows(ui).filter(has_text="home:city").get_by_role("button").click()
    expect(history.locator("li")).to_have_count(1)
    expect(history.locator("li").nth(0)).to_contain_text("now: Lives in Porto")
    ui.get_by_role("button", name="Cancel").click()


def test_search_filter_and_paging_past_the_first_page_with_true_totals(ui: Any, server: MemrouteServer) -> None:
    _, secret = server.create_key("pager", tenant="pager-tenant")
    seed(server, secret, 25, "paging")
    seed(server, secret, 2, "episode", type="episodic", sessionId="s-1")
    sign_in(ui, server.admin)
    pick_tenant(ui, "pager-tenant")
    ui.get_by_text("Page 1 of 2 · 27 matching").wait_for()
    assert ui.locator("#stat-total").inner_text() == "27"
    assert rows(ui).count() == 20
    ui.get_by_role("button", name="Next").click()
    ui.get_by_text("Page 2 of 2 · 27 matching").wait_for()
    assert rows(ui).count() == 7
    assert ui.get_by_role("button", name="Next").is_disabled()

    ui.locator("#f-type").select_option("episodic")
    ui.get_by_role("button", name="Apply").click()
    ui.get_by_text("Page 1 of 1 · 2 matching").wait_for()
    assert rows(ui).filter(has_text="episodic").count() == 2

    ui.locator("#f-type").select_option("")
    ui.locator("#f-session").fill("s-1")
    ui.get_by_label("Search").fill("number 1")
    ui.get_by_role("button", name="Apply").click()
    ui.get_by_text("Page 1 of 1 · 1 matching").wait_for()
    assert rows(ui).first.locator("td").nth(2).inner_text() == "episode fact number 1"


def test_tenants_are_never_mixed(ui: Any, server: MemrouteServer) -> None:
    seed(server, server.tenant_a, 1, "alpha-only")
    seed(server, server.tenant_b, 1, "beta-only")
    sign_in(ui, server.admin)
    expect(ui.locator("#tenant option", has_text=TENANT_A)).to_have_count(1)
    expect(ui.locator("#tenant option", has_text=TENANT_B)).to_have_count(1)
    # Other tests in this module add memories to these tenants too: search, so paging and order don't matter.
    for mine, theirs, tenant in (("alpha-only", "beta-only", TENANT_A), ("beta-only", "alpha-only", TENANT_B)):
        pick_tenant(ui, tenant)
        ui.get_by_label("Search").fill("only fact")
        ui.get_by_role("button", name="Apply").click()
        rows(ui).filter(has_text=mine).wait_for()
        assert rows(ui).filter(has_text=theirs).count() == 0


def test_export_import_and_compact(ui: Any, server: MemrouteServer, tmp_path: Path) -> None:
    _, secret = server.create_key("porter", tenant="porter")
    seed(server, secret, 3, "portable")
    sign_in(ui, server.admin)
    pick_tenant(ui, "porter")
    with ui.expect_download() as download:
        ui.get_by_role("button", name="Export JSONL").click()
    exported = Path(download.value.path()).read_text().splitlines()
    assert len(exported) == 3 and all(json.loads(line)["api_key_id"] == "porter" for line in exported)

    old = [{"id": str(uuid.uuid4()), "api_key_id": "porter", "session_id": None, "type": "factual",
            "key": f"old:{i}", "content": f"an old note {i} about the build", "metadata": {},
            "created_at": f"2024-01-0{i + 1}T00:00:00Z", "updated_at": f"2024-01-0{i + 1}T00:00:00Z",
            "expires_at": None} for i in range(3)]
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps(item) for item in old) + "\n")
    ui.get_by_label("Import JSONL").set_input_files(str(good))
    ui.get_by_text("Imported 3 memories.").wait_for()
    ui.get_by_text("6 matching").wait_for()

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**old[0], "id": str(uuid.uuid4()), "key": "fine:1"}) + "\n{broken\n")
    ui.get_by_label("Import JSONL").set_input_files(str(bad))
    ui.get_by_text("Import refused, nothing was written").wait_for()
    with api(server, secret) as client:
        assert client.get("/api/memory").json()["total"] == 6

    ui.get_by_label("Compact memories older than (days)").fill("30")
    ui.get_by_role("button", name="Compact…").click()
    ui.get_by_text("Replace 3 memories").wait_for()
    ui.get_by_role("button", name="Confirm").click()
    ui.get_by_text("Compacted: 3 memories replaced").wait_for()
    with api(server, secret) as client:
        keys = {m["key"] for m in client.get("/api/memory").json()["data"]}
    assert not {"old:0", "old:1", "old:2"} & keys


def test_playground_shows_tiers_resolution_budget_and_the_injected_block(ui: Any, server: MemrouteServer) -> None:
    _, secret = server.create_key("player", tenant="player")
    with api(server, secret) as client:
        client.post("/api/memory", json={"content": "Prefers TypeScript for frontend code", "key": "preference:ts"})
        client.post("/api/memory", json={"content": "Deploys with Docker Compose", "key": "pattern:deploy"})
    sign_in(ui, server.admin)
    pick_tenant(ui, "player")
    ui.get_by_role("tab", name="Playground").click()
    ui.get_by_label("Query").fill("TypeScript frontend")
    ui.locator("#p-strategy").select_option("hybrid")
    ui.get_by_label("Token budget").fill("500")
    ui.get_by_role("button", name="Preview").click()
    result = ui.locator("#p-results tbody tr").filter(has_text="preference:ts")
    result.wait_for()
    assert result.locator(".badge").inner_text() != ""
    assert "of 500 tokens" in ui.locator("#p-tokens").inner_text()
    resolution = ui.locator("#p-resolution").inner_text()
    assert "Strategy used" in resolution and "hybrid" in resolution and "keyword + vector" in resolution

    # Per-leg ranks and scores, exactly as retrieve-preview reports them (keyword and vector columns).
    with api(server, secret) as client:
        wire = client.post("/api/memory/retrieve-preview",
                           json={"query": "TypeScript frontend", "strategy": "hybrid", "maxTokens": 500}).json()
    item = next(m for m in wire["memories"] if m["key"] == "preference:ts")
    assert item["ranks"]["keyword"] == 1 and item["ftsScore"] == item["legScores"]["keyword"]
    cells = result.locator("td")
    assert 0.0 < item["score"] <= 1.0  # a relevance, shown as the Playground's "Relevance" column
    assert cells.nth(3).inner_text() == f"{item['score']:.2f}"
    keyword_cell, vector_cell = cells.nth(4).inner_text(), cells.nth(5).inner_text()
    assert keyword_cell == f"#1 / {item['legScores']['keyword']:.3f}"
    if "vector" in item["ranks"]:
        assert vector_cell == f"#{item['ranks']['vector']} / {item['legScores']['vector']:.3f}"
    else:
        assert vector_cell == "\u2013"
    assert "Prefers TypeScript for frontend code" in ui.locator("#p-block").inner_text()

    # A remembered message shows when it was said (a "when did I …" question's answer).
    with api(server, secret) as client:
        client.post("/api/memory", json={"content": "Started learning Japanese with a tutor", "key": "turn:jp",
                                         "metadata": {"said_at": "2025-06-01T10:00:00Z"}})
    ui.get_by_label("Query").fill("when did I start learning Japanese")
    ui.get_by_role("button", name="Preview").click()
    said = ui.locator("#p-results tbody tr").filter(has_text="turn:jp")
    expect(said.locator("td").nth(2)).to_have_text("Started learning Japanese with a tutor said 2025-06-01")
    others = ui.locator("#p-results tbody tr").filter(has_not_text="turn:jp")
    expect(others.locator("small.said")).to_have_count(0)  # a memory that records no time shows none

    ui.get_by_label("Token budget").fill("50")  # below the range: the browser refuses to submit the form
    assert ui.locator("#p-budget").evaluate("input => input.validity.rangeUnderflow") is True


def test_last_accessed_fills_after_an_injection_but_not_after_a_preview(ui: Any, server: MemrouteServer) -> None:
    _, secret = server.create_key("accessed", tenant="accessed")
    with api(server, secret) as client:
        client.post("/api/memory", json={"content": "Prefers Rust for systems code", "key": "preference:rust"})
        client.post("/api/memory", json={"content": "Waters the plants on Sundays", "key": "habit:plants"})
    sign_in(ui, server.admin)
    pick_tenant(ui, "accessed")
    rust = rows(ui).filter(has_text="preference:rust")
    expect(rust.locator("td").nth(6)).to_have_text("\u2013")
    ui.get_by_role("tab", name="Playground").click()
    ui.get_by_label("Query").fill("Rust systems")
    ui.get_by_role("button", name="Preview").click()
    expect(ui.locator("#p-block")).to_contain_text("Prefers Rust for systems code")
    server.mem.flush()
    ui.get_by_role("tab", name="Memories").click()
    ui.get_by_role("button", name="Apply").click()
    expect(rust.locator("td").nth(6)).to_have_text("\u2013")  # a preview is not an access
    injected = server.mem.augment({"messages": [{"role": "user", "content": "Rust for systems code?"}]},
                                  api_key_id="accessed")
    assert "Prefers Rust" in json.dumps(injected)
    server.mem.flush()
    ui.get_by_role("button", name="Apply").click()
    expect(rust.locator("td").nth(6)).not_to_have_text("\u2013")
    expect(rust.locator("td").nth(6)).to_have_attribute("title", "1 access")
    with api(server, secret) as client:
        listed = client.get("/api/memory", params={"orderBy": "lastAccessedAt"}).json()["data"]
    # The default floor keeps weak matches too (docs/retrieval.md): the plants may have been injected beside it.
    stamp = next(m for m in listed if m["key"] == "preference:rust")
    assert stamp["accessCount"] == 1 and stamp["lastAccessedAt"]


def test_engine_reindex_progress_and_settings_save(ui: Any, server: MemrouteServer) -> None:
    sign_in(ui, server.admin)
    ui.get_by_role("tab", name="Engine").click()
    ui.locator("#backends tbody tr").filter(has_text="primary").wait_for()
    assert "sqlite-vec" in ui.locator("#engine-status").inner_text()
    assert "everyday" in ui.locator("#engine-status").inner_text()  # the extractor chain
    ui.get_by_label("Force rebuild").check()
    ui.get_by_role("button", name="Reindex").click()
    expect(ui.locator("#reindex-state")).to_have_text(re.compile(r"^done: \d+ indexed, 0 pending"))

    ui.get_by_label("Max tokens").fill("1234")
    expect(ui.get_by_label("Delete after (days)")).to_have_value("0")  # never, by default
    ui.get_by_label("Retention (days)").fill("45")
    ui.get_by_label("Delete after (days)").fill("400")
    ui.get_by_role("button", name="Save settings").click()
    ui.get_by_text("Settings saved.").wait_for()
    with api(server, server.admin) as client:
        settings = client.get("/api/settings/memory").json()
        assert client.put("/api/settings/memory", json={"deleteAfterDays": None}).status_code == 200
    assert settings["maxTokens"] == 1234 and settings["retentionDays"] == 45 and settings["deleteAfterDays"] == 400
    ui.get_by_label("Max tokens").fill("99999")  # out of range: refused in the form, and by the server
    assert ui.locator("#s-max-tokens").evaluate("input => input.validity.rangeOverflow") is True
    with api(server, server.admin) as client:
        refused = client.put("/api/settings/memory", json={"maxTokens": 99999})
    assert refused.status_code in (400, 422) and refused.json()["error"]["details"]


def test_keys_create_shows_the_secret_once_then_revoke(ui: Any, server: MemrouteServer) -> None:
    sign_in(ui, server.admin)
    ui.get_by_role("tab", name="Keys").click()
    ui.get_by_label("Name").fill("from-the-ui")
    ui.get_by_label("Key tenant", exact=True).fill("ui-tenant")
    ui.get_by_role("button", name="Create key").click()
    secret = ui.locator("#k-secret-value")
    secret.wait_for()
    value = secret.inner_text()
    assert value.startswith("mr_")
    with api(server, value) as client:
        assert client.get("/api/memory").status_code == 200
    ui.get_by_role("button", name="Revoke key from-the-ui").click()
    ui.get_by_role("button", name="Confirm").click()
    ui.get_by_text("Key revoked.").wait_for()
    with api(server, value) as client:
        assert client.get("/api/memory").status_code == 401


def test_narrow_screen_and_keyboard(chromium_browser: Any, server: MemrouteServer) -> None:
    context = chromium_browser.new_context(base_url=server.base_url, viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.goto("/")
    page.keyboard.press("Tab")  # the key field has focus after load; Tab moves to the button
    page.get_by_label("Admin API key").focus()
    page.keyboard.type(server.admin)
    page.keyboard.press("Enter")
    page.get_by_role("tab", name="Memories").wait_for()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways at 390 px ({width} px)"
    page.get_by_role("tab", name="Keys").focus()
    page.keyboard.press("Enter")
    page.get_by_role("button", name="Create key").wait_for()
    context.close()


def test_engine_shows_the_llm_extractors_spend(chromium_browser: Any, tmp_path: Path) -> None:
    """The extraction line of the Engine tab, with the ``llm`` extractor pointed at the loopback fake model (its
    scripted answer stands in for a model's judgement)."""
    from tests.servers.fake_chat_model import fake_chat_model

    with fake_chat_model() as model:
        config = {"memory": {"enabled": True},
                  "extraction": {"extractors": ["regex", "llm"],
                                 "llm": {"base_url": model.base_url, "model": "fake-extractor",
                                         "allow_private": True}}}
        model.on_extract({"facts": [{"content": "Lives in Lisbon", "type": "factual", "category": "location"}]})
        with MemrouteServer(tmp_path, config=config) as running:
            running.mem.observe({"messages": [{"role": "user", "content": "I live in Lisbon."}]}, api_key_id=TENANT_A)
            assert running.mem.flush(30)
            context = chromium_browser.new_context(base_url=running.base_url)
            page = context.new_page()
            page.set_default_timeout(30_000)
            try:
                sign_in(page, running.admin)
                page.get_by_role("tab", name="Engine").click()
                expect(page.locator("#engine-status")).to_contain_text(
                    "regex → llm · fake-extractor · 1 requests, 150 tokens")
            finally:
                context.close()
