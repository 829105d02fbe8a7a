"""Status page links in a real headless Chromium: commits link to the forge
(`--commit-url-template`), and `/#commit-<sha>` (the link notifications
carry with `--public-url`) lands on that commit's history row."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from selenium import webdriver
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from gitops.admin.page import render_page
from tests.real.test_statuspage import STATUS, browser, wait_loaded  # noqa: F401 — `browser` is a fixture
from tests.support.stack import free_port

pytestmark = pytest.mark.real

OLD, NEW = "a" * 40, "b" * 40
TEMPLATE = "https://forge.example.com/you/specs/commit/{sha}"
HISTORY = [
    {"commit": NEW, "summary": "newer", "finished_at": 1700000100.0, "result": "invalid",
     "duration_s": 0.1, "plan_summary": "No changes.", "errors": ["x.toml:1:1: bad"]},
    {"commit": NEW, "summary": "newer", "finished_at": 1700000050.0, "result": "invalid",
     "duration_s": 0.1, "plan_summary": "No changes.", "errors": ["x.toml:1:1: older attempt"]},
    {"commit": OLD, "summary": "older", "finished_at": 1700000000.0, "result": "applied",
     "duration_s": 1.5, "plan_summary": "Plan: 1 to create, 0 to update, 0 to delete.", "errors": []},
]


# The page redraws every `refresh_s`, replacing its rows: what a test reads of them is read in
# one script, between two redraws, not element by element (an element found before a redraw
# is stale after it).
READ_LINKS = """
return [
  Array.from(document.querySelectorAll('#history a'), a => [a.innerText, a.href]),
  Array.from(document.querySelectorAll('#applied a'), a => [a.innerText, a.href])[0],
];
"""
READ_MARKED = """
const row = document.getElementById(arguments[0]);
return [
  Array.from(document.querySelectorAll('#history tr.target'), tr => tr.innerText),
  row === null ? '' : row.innerText,
];
"""


@pytest.fixture
def page_with_links() -> Iterator[str]:
    status = {**STATUS, "watched_revision": NEW, "last_applied_revision": OLD}
    app = Starlette(routes=[
        Route("/", lambda r: HTMLResponse(render_page(refresh_s=0.5, commit_url_template=TEMPLATE))),
        Route("/status", lambda r: JSONResponse(status)),
        Route("/history", lambda r: JSONResponse({"entries": HISTORY})),
    ])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/"
    server.should_exit = True
    thread.join(5)


def test_commits_link_to_the_forge(page_with_links: str, browser: webdriver.Chrome) -> None:
    browser.get(page_with_links)
    wait_loaded(browser)
    links, applied = browser.execute_script(READ_LINKS)
    assert dict(links) == {NEW[:12]: TEMPLATE.format(sha=NEW), OLD[:12]: TEMPLATE.format(sha=OLD)}
    assert applied == [OLD, TEMPLATE.format(sha=OLD)]


def test_a_history_link_marks_the_commits_newest_row(page_with_links: str, browser: webdriver.Chrome) -> None:
    browser.get(page_with_links + f"#commit-{NEW}")
    wait_loaded(browser)
    marked, old_row = browser.execute_script(READ_MARKED, f"commit-{OLD}")
    assert len(marked) == 1
    assert "x.toml:1:1: bad" in marked[0]  # the newest attempt, not the older one
    assert old_row.startswith(OLD[:12])


def test_a_template_cannot_end_the_pages_script(browser: webdriver.Chrome) -> None:
    evil = "https://forge.example.com/{sha}</script><script>window.injected = true</script>"
    page = base64.b64encode(render_page(commit_url_template=evil).encode()).decode()
    browser.get(f"data:text/html;base64,{page}")
    assert browser.execute_script("return [COMMIT_URL, window.injected === undefined]") == [evil, True]
