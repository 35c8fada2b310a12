"""Take the screenshots in docs/dashboard.md from the real pages: a real server on a loopback port with a
few example memories, Debian's chromium driven by Playwright.

    .venv/bin/python scripts/dashboard_screenshots.py [--out docs/img]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playwright.sync_api import sync_playwright

from tests.servers.memroute_server import MemrouteServer

EXAMPLES = [
    ("preference:typescript", "Prefers TypeScript for frontend code", "factual"),
    ("decision:database", "Decided to use PostgreSQL for the orders service", "episodic"),
    ("pattern:deploy", "Deploys with Docker Compose on a single VM", "procedural"),
    ("preference:editor", "Uses Neovim with LazyVim", "factual"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="docs/img")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    config = {"memory": {"enabled": True}}
    with tempfile.TemporaryDirectory() as tmp, MemrouteServer(Path(tmp), config=config) as server:
        with server.client(server.tenant_a) as client:
            for key, content, kind in EXAMPLES:
                client.post("/api/memory", json={"key": key, "content": content, "type": kind})
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                                 args=["--headless=new", "--no-sandbox", "--disable-gpu",
                                                       "--disable-background-networking", "--no-first-run"])
            page = browser.new_page(base_url=server.base_url, viewport={"width": 1280, "height": 760})
            page.goto("/")
            page.screenshot(path=str(out / "dashboard-sign-in.png"))
            page.get_by_label("Admin API key").fill(server.admin)
            page.get_by_role("button", name="Sign in").click()
            page.get_by_label("Tenant", exact=True).select_option("tenant-a")
            page.locator("#memories tbody tr").filter(has_text="preference:editor").wait_for()
            page.screenshot(path=str(out / "dashboard-memories.png"))
            page.get_by_role("tab", name="Playground").click()
            page.get_by_label("Query").fill("which language for the web UI?")
            page.get_by_role("button", name="Preview").click()
            page.locator("#p-results tbody tr").first.wait_for()
            page.screenshot(path=str(out / "dashboard-playground.png"), full_page=True)
            page.get_by_role("tab", name="Engine").click()
            page.locator("#backends tbody tr").first.wait_for()
            page.screenshot(path=str(out / "dashboard-engine.png"), full_page=True)
            page.get_by_role("tab", name="Keys").click()
            page.locator("#keys tbody tr").first.wait_for()
            page.screenshot(path=str(out / "dashboard-keys.png"))
            page.set_viewport_size({"width": 390, "height": 844})
            page.get_by_role("tab", name="Memories").click()
            page.screenshot(path=str(out / "dashboard-narrow.png"))
            browser.close()
    print(f"screenshots written to {out}")


if __name__ == "__main__":
    main()
