"""The status page in a real headless Chromium shows what the agent reports.

First against a stand-in app serving fixed JSON (every field drawn, markup
in errors shown as text, self-refresh), then against a real `gitops run`
joined to the session's Ray, after a good commit and an invalid one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from selenium import webdriver
from selenium.webdriver.common.by import By
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from gitops.admin.page import render_page
from tests.support.stack import agent_namespace, free_port
from tests.support.browser import headless_chromium
from vocabulary.control.goal_api import CONTROLLER_NAME

pytestmark = pytest.mark.real


STATUS = {
    "status": "Degraded",
    "conditions": [
        {"type": "Ready", "status": "False", "reason": "HealthCheckFailed", "message": "echo-v2: 1/2 replicas ready"}
    ],
    "repo": "/srv/specs",
    "branch": "main",
    "path": "deployments",
    "last_attempted_revision": "b" * 40,
    "last_applied_revision": "a" * 40,
    "errors": ["Traceback (most recent call last):\n  File \"echo.py\", line 3\nImportError: no module <b>x</b>"],
    "backends": {
        "echo-v1": {"version": "v1abc", "target_replicas": 2, "ready": 2, "replicas": {"RUNNING": 2},
                    "versions": {"v1abc": 2}, "restarts": {}, "last_error": None,
                    "ejections": ["replica echo-v1-2 ejected (ejection 2): 5 consecutive errors, back in 58 s"]},
    },
    "endpoints": {"echo": {"route": "/echo", "traffic": {"echo-v1": 0.75, "echo-v2": 0.25}, "shadow": {}}},
    "rollouts": {"echo": {"phase": "stepping", "step": 3, "steps": [0.1, 0.5, 0.75, 1.0], "passed": 2,
                          "weights": {"echo-v1": 0.25, "echo-v2": 0.75}, "target": {"echo-v2": 1.0},
                          "message": "endpoint echo: step 3/4 (75% of the change)",
                          "checks": ["echo-v2: 30 requests >= 20"]}},
    "quarantine": {"good": "a" * 40, "held": ["d" * 40], "reason": "analysis", "detail": ""},
    "proxies": {"node-a": {"node": "node-a", "worker": 0, "state": "running", "address": "http://10.0.0.5:8000",
                           "restarts": 0, "last_error": ""},
                "node-a:1": {"node": "node-a", "worker": 1, "state": "backoff", "address": "http://10.0.0.5:8000",
                             "restarts": 3, "last_error": "killed <b>by</b> signal 9"}},
}
MISMATCHES = {"mismatches": [{"at": 1700000000.0, "endpoint": "echo", "backend": "echo-v3", "path": "/echo/x",
                              "primary_status": 200, "shadow_status": 500, "diff": "status 200 vs 500",
                              "proxy": "http://127.0.0.1:8000"}], "unreachable": []}
HISTORY = {
    "entries": [
        {"commit": "a" * 40, "summary": "roll out v1", "finished_at": 1700000000.0, "result": "applied",
         "duration_s": 1.5, "plan_summary": "1 backend created", "errors": []},
    ],
    "actions": [],
    "ejections": [
        {"at": 1700000100.0, "backend": "echo-v1", "replica_id": "echo-v1-2", "count": 2,
         "reason": "5 consecutive <b>errors</b>", "back_in_s": 60.0},
    ],
}


@pytest.fixture
def served_status() -> dict:
    return dict(STATUS)


@pytest.fixture
def fixture_agent(served_status: dict) -> Iterator[str]:
    """A stand-in admin app serving the page and `served_status` on loopback."""
    app = Starlette(routes=[
        Route("/", lambda r: HTMLResponse(render_page(refresh_s=0.5))),
        Route("/status", lambda r: JSONResponse(served_status)),
        Route("/history", lambda r: JSONResponse(HISTORY)),
        Route("/shadow/mismatches", lambda r: JSONResponse(MISMATCHES)),
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


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    with headless_chromium(tmp_path / "chromium") as driver:
        yield driver


def wait_loaded(driver: webdriver.Chrome, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while driver.execute_script("return document.body.dataset.loaded") != "true":
        assert time.monotonic() < deadline, "the page never drew the agent's status"
        time.sleep(0.1)


def text(driver: webdriver.Chrome, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def test_status_page_shows_the_agents_status_in_a_real_browser(
    fixture_agent: str, browser: webdriver.Chrome, artifacts_dir: Path
) -> None:
    browser.get(fixture_agent)
    wait_loaded(browser)
    browser.save_screenshot(str(artifacts_dir / "statuspage-fixture.png"))
    assert text(browser, "status") == "Degraded"
    assert text(browser, "watched") == "b" * 40
    assert text(browser, "applied") == "a" * 40
    assert "HealthCheckFailed" in text(browser, "conditions")
    assert "ImportError: no module <b>x</b>" in text(browser, "errors")
    assert "echo-v1" in text(browser, "backends") and "RUNNING: 2" in text(browser, "backends")
    assert "roll out v1" in text(browser, "history")
    # Outlier ejections: the one running now on its backend's row, and each one in the history, as text.
    assert "replica echo-v1-2 ejected (ejection 2): 5 consecutive errors, back in 58 s" in text(browser, "backends")
    ejections = text(browser, "ejections-log")
    assert "echo-v1 echo-v1-2 2 5 consecutive <b>errors</b> 60 s" in ejections, ejections
    assert "echo-v1 75.0%" in text(browser, "endpoints")
    proxies = text(browser, "proxies").splitlines()
    assert proxies[0].startswith("node-a running http://10.0.0.5:8000 0")
    assert proxies[1] == "node-a:1 backoff http://10.0.0.5:8000 3 killed <b>by</b> signal 9"  # text, not markup
    drawn = browser.execute_script(
        "return [...document.querySelectorAll('#endpoints .fill')]"
        ".map(e => e.getBoundingClientRect().width / e.parentNode.getBoundingClientRect().width)"
    )
    assert drawn == pytest.approx([0.75, 0.25], abs=0.01)


def test_status_page_shows_rollout_steps_quarantined_commits_and_shadow_mismatches(
    fixture_agent: str, browser: webdriver.Chrome, artifacts_dir: Path
) -> None:
    browser.get(fixture_agent)
    wait_loaded(browser)
    browser.save_screenshot(str(artifacts_dir / "statuspage-rollouts.png"))
    boxes = browser.execute_script("return [...document.querySelectorAll('#rollouts .steps span')].map(e => e.className)")
    assert boxes == ["passed", "passed", "holding", ""]
    assert "step 3/4" in text(browser, "rollouts") and "echo-v2: 30 requests >= 20" in text(browser, "rollouts")
    quarantine = text(browser, "quarantine")
    assert "held: " + "d" * 12 in quarantine and "rolled back to " + "a" * 12 in quarantine and "analysis" in quarantine
    mismatches = text(browser, "mismatches")
    assert "/echo/x" in mismatches and "200 vs 500" in mismatches and "echo-v3" in mismatches


def test_status_page_redraws_by_itself_when_the_status_changes(
    fixture_agent: str, served_status: dict, browser: webdriver.Chrome
) -> None:
    browser.get(fixture_agent)
    wait_loaded(browser)
    served_status.update(status="Synced", last_applied_revision="c" * 40, errors=[])
    deadline = time.monotonic() + 10
    while text(browser, "status") != "Synced":
        assert time.monotonic() < deadline, "the page did not refresh itself"
        time.sleep(0.1)
    assert text(browser, "applied") == "c" * 40
    assert text(browser, "errors") == "none"


# --- against a real agent ---------------------------------------------------------

APP = """
class Hello:
    def __call__(self, request):
        return "hello"
"""

SPEC = """
[backends.hello-v1]
import_path = "apps.hello:Hello"
num_replicas = 1
ray_actor_options = { num_cpus = 0 }

[endpoints.hello]
route = "/hello"
traffic = { hello-v1 = 1.0 }
"""


@pytest.fixture
def real_agent(ray_session: str, repo, tmp_path: Path) -> Iterator[tuple[str, object]]:
    """`gitops run` on a real repository, joined to the session's Ray."""
    import httpx
    import ray

    from controller.client import ControllerClient

    repo.write("apps/__init__.py", "")
    repo.write("apps/hello.py", APP)
    repo.write("deployments/hello.toml", SPEC)
    repo.commit("hello")
    admin_port = free_port()
    log = (tmp_path / "agent.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "gitops", "run", "--repo", str(repo.root),
         "--ray-address", ray.get_runtime_context().gcs_address,
         "--proxy-port", str(free_port()), "--proxy-metrics-port", str(free_port()),
         "--admin-port", str(admin_port), "--interval", "0.5",
         "--state-dir", str(tmp_path / "state")],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        yield f"http://127.0.0.1:{admin_port}/", httpx.Client(timeout=5)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.close()
        # A joined cluster keeps serving after the agent stops: stop what it ran.
        try:
            handle = ray.get_actor(CONTROLLER_NAME, namespace=agent_namespace())
        except ValueError:
            pass
        else:
            ControllerClient(handle, agent_namespace()).shutdown()


def wait_for_text(driver: webdriver.Chrome, element_id: str, wanted: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if wanted in text(driver, element_id):
                return
        except Exception:  # noqa: BLE001 — the page may be between redraws
            pass
        assert time.monotonic() < deadline, f"#{element_id} never showed {wanted!r}: {text(driver, element_id)!r}"
        time.sleep(0.2)


def test_status_page_shows_a_real_agents_sync_backends_traffic_and_errors(
    real_agent: tuple[str, object], repo, browser: webdriver.Chrome, artifacts_dir: Path
) -> None:
    url, _ = real_agent
    good = repo.head()
    deadline = time.monotonic() + 60
    while True:  # the admin port opens a moment after the process starts
        try:
            browser.get(url)
            break
        except Exception:  # noqa: BLE001 — connection refused until it listens
            assert time.monotonic() < deadline, "the agent's admin port never opened"
            time.sleep(0.3)
    wait_for_text(browser, "status", "Synced")
    assert text(browser, "applied") == good
    assert "hello-v1" in text(browser, "backends") and "RUNNING: 1" in text(browser, "backends")
    assert "hello-v1 100.0%" in text(browser, "endpoints")
    wait_for_text(browser, "proxies", "running")
    wait_for_text(browser, "history", good[:12])
    browser.save_screenshot(str(artifacts_dir / "statuspage-agent-synced.png"))

    repo.write("deployments/hello.toml", SPEC + "no_such_key = 1\n")
    bad = repo.commit("a typo")
    wait_for_text(browser, "status", "Failed")
    wait_for_text(browser, "errors", "no_such_key")
    assert "deployments/hello.toml:" in text(browser, "errors")
    assert text(browser, "watched") == bad and text(browser, "applied") == good
    wait_for_text(browser, "history", "unknown key")
    browser.save_screenshot(str(artifacts_dir / "statuspage-agent-failed.png"))


def test_status_page_shows_how_each_backend_serves_and_its_latest_exception(
    fixture_agent: str, served_status: dict, browser: webdriver.Chrome, artifacts_dir: Path
) -> None:
    serving = {"window_s": 60.0, "requests": 120, "errors": 30, "p99_s": 0.025}
    served_status["status"] = "Degraded"
    served_status["backends"] = {"echo-v1": {
        **STATUS["backends"]["echo-v1"], "serving": serving,
        "latest_exception": "ZeroDivisionError: division by zero at deployments/boom.py:7",
    }}
    served_status["endpoints"] = {"echo": {**STATUS["endpoints"]["echo"], "serving": serving}}
    browser.get(fixture_agent)
    wait_loaded(browser)
    browser.save_screenshot(str(artifacts_dir / "statuspage-serving.png"))
    backends = text(browser, "backends")
    assert "2.0 25% 25 ms ZeroDivisionError: division by zero at deployments/boom.py:7" in backends
    assert "2.0 25% 25 ms" in text(browser, "endpoints")
    assert "echo-v1 (latest exception): ZeroDivisionError" in text(browser, "errors")
