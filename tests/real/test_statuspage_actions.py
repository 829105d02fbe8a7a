"""The status page you can act from, in a real headless Chromium against a real agent (issue 47 item 4).

A `gitops run` with `--admin-tokens-file` (a viewer, an operator; digests
only) serves two commits. The browser reaches it as a browser behind a
reverse proxy that adds the reader's bearer header does (Chromium's own
`Network.setExtraHTTPHeaders`, on every request of the page, its stream
included):

- the viewer's page draws the agent's status live (server-sent events) with
  no action button, and a POST it forges from the page's own origin, with
  or without the page's CSRF token, is 403 and changes nothing;
- the operator clicks "Roll back", confirms with a reason, and the rollback
  is in the page's actions (filtered by actor and by kind) and in
  `/history?actor=otto` with the operator's token name as actor; the page
  redraws the agent Held without a reload;
- the page runs under its Content-Security-Policy with no violation
  reported, and no token is in the page's source or its event stream;
- on another agent that applied v1, a docs-only commit and v2, the
  operator rolls back to v1 with the "roll back to this" button of v1's
  history row (not the last commit applied before, which the bar's
  "Roll back" would pick), confirmed; history records it with the
  operator's name and the chosen commit, and v1 runs again; then, the agent
  suspended, a new commit's plan shows as a diff with why "suspended"
  (no CSP violation on the way);
- on a second agent whose endpoint rolls out in two steps, the viewer's
  rollout row has no button; the operator aborts the running rollout from
  its row (confirmed, with a reason), the endpoint's traffic goes back, the
  commit is recorded `aborted` and the action carries the operator's name.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import httpx
import pytest
import ray
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select

from tests.conftest import GitRepo
from tests.support.browser import headless_chromium
from tests.support.agents import commit_versioned_echo
from tests.support.stack import AgentProcess

pytestmark = pytest.mark.real


TOKENS = {"vera": ("viewer", "tok-viewer-page-7c41d9a2e0"), "otto": ("operator", "tok-operator-page-3b8e60f1c5")}

SPEC = '''
[backends.echo]
import_path = "deployments.echo:Echo"
init_args = ["{version}"]
ray_actor_options = {{ num_cpus = 0.01 }}
graceful_shutdown_timeout_s = 1

[endpoints.echo]
route = "/echo"
traffic = {{ echo = 1.0 }}
'''


def agent_with_tokens(repo: GitRepo, tmp_path: Path) -> AgentProcess:
    """A `gitops run` on the session's Ray whose admin API knows `TOKENS` (their hashes, by name and role)."""
    table = tmp_path / "admin-tokens"
    table.write_text("".join(f"{name} {role} {hashlib.sha256(tok.encode()).hexdigest()}\n"
                             for name, (role, tok) in TOKENS.items()))
    return AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address,
                        extra_args=["--admin-tokens-file", str(table)])


def write(repo: GitRepo, version: str) -> str:
    return commit_versioned_echo(repo, SPEC.format(version=version), version)


@pytest.fixture
def chromium(tmp_path: Path):
    with headless_chromium(tmp_path / "chromium", height=1600, browser_log=True) as driver:
        driver.execute_cdp_cmd("Network.enable", {})
        yield driver


def as_reader(driver: webdriver.Chrome, name: str, url: str) -> None:
    """Load the page as `name`: every request of the page carries its bearer, as a reverse proxy adds it."""
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Bearer {TOKENS[name][1]}"}})
    driver.get(url)


def until(what: str, done, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if done():
                return
        except Exception:  # noqa: BLE001 — the page may be between redraws
            pass
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)


def text(driver: webdriver.Chrome, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


# The page redraws a table's rows whole (the rollouts' on each update, the history's when it changed, and
# once more on the live stream's first update after the page's own first read), so a row's button found by
# one WebDriver call may be replaced before the next: rows are read in one script, and a row's button is
# clicked again until the confirm it opens shows.
ROW_COMMITS = "return [...document.querySelectorAll('#history button')].map(b => b.dataset.commit)"


def press_row_button(driver: webdriver.Chrome, button_id: str, confirm_id: str) -> WebElement:
    """The confirm `confirm_id` opened by the row button `button_id`, clicked until it shows."""

    def opened() -> bool:
        driver.find_element(By.ID, button_id).click()
        return bool(driver.find_element(By.ID, confirm_id).is_displayed())

    until(f"{confirm_id} opened by {button_id}", opened)
    return driver.find_element(By.ID, confirm_id)


FORGE = """
const [path, withToken, done] = arguments;
const headers = withToken ? {"X-CSRF-Token": document.querySelector('meta[name="gitops-csrf"]').content} : {};
fetch(path, {method: "POST", headers}).then(r => r.text().then(body => done([r.status, body])));
"""


def test_a_viewer_cannot_act_and_an_operators_rollback_from_the_page_is_attributed(
    ray_session: str, repo: GitRepo, tmp_path: Path, chromium: webdriver.Chrome, artifacts_dir: Path
) -> None:
    first = write(repo, "v1")
    agent = agent_with_tokens(repo, tmp_path)
    otto = {"Authorization": f"Bearer {TOKENS['otto'][1]}"}
    http = httpx.Client(timeout=30, headers=otto)
    page = agent.admin + "/"
    try:
        agent.wait("v1 applied", lambda: http.get(agent.admin + "/status").json()["last_applied_revision"] == first)
        second = write(repo, "v2")
        agent.wait("v2 applied", lambda: http.get(agent.admin + "/status").json()["last_applied_revision"] == second)

        # The viewer: the status, live, and no button.
        as_reader(chromium, "vera", page)
        until("the viewer's page drawn", lambda: chromium.execute_script("return document.body.dataset.loaded") == "true")
        until("the page following the live stream", lambda: text(chromium, "live") == "· live")
        assert text(chromium, "status") == "Synced" and text(chromium, "applied") == second
        assert "vera (viewer)" in text(chromium, "who")
        assert chromium.find_elements(By.CSS_SELECTOR, "#actions button") == []
        assert "read-only" in text(chromium, "actions")
        chromium.save_screenshot(str(artifacts_dir / "statuspage-viewer.png"))
        for with_token in (False, True):
            status, body = chromium.execute_async_script(FORGE, "rollback", with_token)
            assert status == 403 and "vera is viewer; this needs operator" in body, (with_token, body)
        viewer_source = chromium.page_source

        # The operator: the buttons, a confirm, the rollback.
        as_reader(chromium, "otto", page)
        until("the operator's page drawn", lambda: chromium.execute_script("return document.body.dataset.loaded") == "true")
        assert "otto (operator)" in text(chromium, "who")
        shown = [b.get_attribute("id") for b in chromium.find_elements(By.CSS_SELECTOR, "#action-buttons button")
                 if b.is_displayed()]
        assert shown == ["act-sync", "act-suspend", "act-rollback"]  # resume while suspended, override while held
        status, body = chromium.execute_async_script(FORGE, "rollback", False)
        assert status == 403 and "X-CSRF-Token" in body  # the operator's own page, but no token: forged
        chromium.find_element(By.ID, "act-rollback").click()
        confirm = chromium.find_element(By.ID, "confirm-rollback")
        assert confirm.is_displayed() and "hold the newer commits back" in confirm.text
        assert http.get(agent.admin + "/history?kind=rollback").json()["actions"] == []  # nothing sent before the confirm
        confirm.find_element(By.NAME, "reason").send_keys("v2 breaks checkout")
        chromium.find_element(By.ID, "go-rollback").click()
        until("the rollback done", lambda: text(chromium, "action-result").startswith("rollback: done"))
        assert f"back to {first[:12]}" in text(chromium, "action-result")
        until("the page redrawn Held without a reload", lambda: text(chromium, "status") == "Held")
        until("the rollback in the page's actions", lambda: "otto (token)" in text(chromium, "actions-log"))
        chromium.save_screenshot(str(artifacts_dir / "statuspage-operator-rolled-back.png"))

        # History filters: by actor, by kind.
        http.post(agent.admin + "/sync", params={"reason": "after the rollback"})
        until("the sync listed", lambda: "sync" in text(chromium, "actions-log"))
        Select(chromium.find_element(By.ID, "filter-kind")).select_by_value("rollback")
        until("only rollbacks", lambda: "rollback (to " in text(chromium, "actions-log")
              and "sync" not in text(chromium, "actions-log"))
        assert "no commits attempted yet" in text(chromium, "history")  # a verb's filter shows no commit
        Select(chromium.find_element(By.ID, "filter-kind")).select_by_value("")
        Select(chromium.find_element(By.ID, "filter-actor")).select_by_value("otto")
        until("otto's actions only", lambda: "rollback (to " in text(chromium, "actions-log")
              and "sync" in text(chromium, "actions-log"))
        operator_source = chromium.page_source
        logs = chromium.get_log("browser")

        # The agent's own record: the operator's name, the reason, the address.
        (rollback,) = http.get(agent.admin + "/history", params={"actor": "otto", "kind": "rollback"}).json()["actions"]
        assert (rollback["actor"], rollback["via"], rollback["reason"], rollback["peer"]) == (
            "otto", "token", "v2 breaks checkout", "127.0.0.1")
        assert rollback["detail"].startswith(f"to {first[:7]}, holding {second[:7]}")
        assert http.get(agent.admin + "/history", params={"actor": "vera"}).json()["actions"] == []

        # What the stream sends, and the raw page: once the sync's apply is over the rollback holds
        # the head again. The stream's first update may still be the snapshot taken while the apply
        # ran (streams share a snapshot for half a poll), so read updates until Held arrives; the
        # stream ends by its own lifetime if it never does.
        agent.wait("Held again after the sync", lambda: http.get(agent.admin + "/status").json()["status"] == "Held")
        stream = b""
        with http.stream("GET", agent.admin + "/events") as events:
            assert events.headers["content-type"].startswith("text/event-stream")
            for chunk in events.iter_bytes():
                stream += chunk
                if b'"status":"Held"' in stream and stream.endswith(b"\n\n"):
                    break
        raw_page = http.get(page)
        assert "frame-ancestors 'none'" in raw_page.headers["content-security-policy"]
    finally:
        http.close()
        agent.stop()
    assert b'"status":"Held"' in stream
    violations = [entry["message"] for entry in logs if "Content Security Policy" in entry["message"]]
    assert violations == []
    for where, seen in {"viewer's page": viewer_source, "operator's page": operator_source,
                        "raw page": raw_page.text, "event stream": stream.decode()}.items():
        for _, token in TOKENS.values():
            assert token not in seen, f"{where} shows a token"


def test_an_operator_rolls_back_to_a_chosen_commit_and_a_suspended_agent_shows_the_heads_plan(
    ray_session: str, repo: GitRepo, tmp_path: Path, chromium: webdriver.Chrome, artifacts_dir: Path
) -> None:
    first = write(repo, "v1")
    agent = agent_with_tokens(repo, tmp_path)
    http = httpx.Client(timeout=30, headers={"Authorization": f"Bearer {TOKENS['otto'][1]}"})

    def applied() -> str:
        return http.get(agent.admin + "/status").json()["last_applied_revision"]

    try:
        agent.wait("v1 applied", lambda: applied() == first)
        repo.write("README.md", "echo, served by ray-gitops\n")
        docs = repo.commit("docs only: nothing to change")
        agent.wait("the docs commit attempted", lambda: applied() == docs)
        second = write(repo, "v2")
        agent.wait("v2 applied", lambda: applied() == second)

        # A viewer's history rows have no button.
        as_reader(chromium, "vera", agent.admin + "/")
        until("the viewer's history drawn", lambda: first[:12] in text(chromium, "history"))
        assert chromium.find_elements(By.CSS_SELECTOR, "#history button") == []

        # The operator: a button on each applied commit's row but the current one's.
        as_reader(chromium, "otto", agent.admin + "/")
        until("the operator's row buttons", lambda: chromium.find_element(By.ID, f"act-rollback-to-{first}").is_displayed())
        assert set(chromium.execute_script(ROW_COMMITS)) == {first, docs}  # v2 runs: no button on its row
        confirm = press_row_button(chromium, f"act-rollback-to-{first}", "confirm-rollback-to")
        assert confirm.is_displayed() and f"Roll back to commit {first[:12]}?" in confirm.text
        assert http.get(agent.admin + "/history?kind=rollback").json()["actions"] == []  # nothing sent before the confirm
        confirm.find_element(By.NAME, "reason").send_keys("v1 was the last good one")
        chromium.find_element(By.ID, "go-rollback-to").click()
        until("the rollback done", lambda: text(chromium, "action-result").startswith("rollback-to: done"))
        assert f"back to {first[:12]}" in text(chromium, "action-result")
        agent.wait("v1 applied again", lambda: applied() == first)
        (rollback,) = http.get(agent.admin + "/history", params={"actor": "otto", "kind": "rollback"}).json()["actions"]
        assert (rollback["actor"], rollback["reason"], rollback["result"]) == ("otto", "v1 was the last good one", "accepted")
        assert rollback["detail"] == f"to {first[:7]}, holding {', '.join(sorted([docs[:7], second[:7]]))}"
        newest = http.get(agent.admin + "/history").json()["entries"][0]
        assert (newest["commit"], newest["result"]) == (first, "applied")
        until("the rollback in the page's actions", lambda: "otto (token)" in text(chromium, "actions-log"))
        chromium.save_screenshot(str(artifacts_dir / "statuspage-rolled-back-to.png"))

        # Suspended: the new head is not applied, and the page shows its plan and why.
        assert http.post(agent.admin + "/suspend").status_code == 200
        third = write(repo, "v3")
        until("the head's plan on the page", lambda: f"{third[:12]} · suspended" in text(chromium, "plan"), timeout_s=20)
        diff = text(chromium, "plan")
        assert "~ backend echo" in diff and '"v3"' in diff
        assert chromium.find_elements(By.CSS_SELECTOR, "#plan pre.diff span.chg")
        plan = http.get(agent.admin + "/plan").json()
        assert (plan["commit"], plan["why"]) == (third, "suspended") and applied() == first
        chromium.save_screenshot(str(artifacts_dir / "statuspage-suspended-plan.png"))
        logs = chromium.get_log("browser")
    finally:
        http.close()
        agent.stop()
    assert [entry["message"] for entry in logs if "Content Security Policy" in entry["message"]] == []


ROLLOUT_SPEC = '''
[backends.echo-v1]
import_path = "deployments.echo:Echo"
init_args = ["v1"]
ray_actor_options = {{ num_cpus = 0.01 }}
graceful_shutdown_timeout_s = 1

[backends.echo-v2]
import_path = "deployments.echo:Echo"
init_args = ["v2"]
ray_actor_options = {{ num_cpus = 0.01 }}
graceful_shutdown_timeout_s = 1

[endpoints.echo]
route = "/echo"
traffic = {{ {traffic} }}

[endpoints.echo.rollout]
steps = [0.5, 1.0]
step_interval_s = 600
min_requests = 10
'''


def test_an_operator_aborts_a_running_rollout_from_its_row_and_the_traffic_goes_back(
    ray_session: str, repo: GitRepo, tmp_path: Path, chromium: webdriver.Chrome, artifacts_dir: Path
) -> None:
    table = tmp_path / "admin-tokens"
    table.write_text("".join(f"{name} {role} {hashlib.sha256(tok.encode()).hexdigest()}\n"
                             for name, (role, tok) in TOKENS.items()))
    first = commit_versioned_echo(repo, ROLLOUT_SPEC.format(traffic='"echo-v1" = 1.0'), "v1 serves")
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address,
                         extra_args=["--admin-tokens-file", str(table)])
    http = httpx.Client(timeout=30, headers={"Authorization": f"Bearer {TOKENS['otto'][1]}"})

    def status() -> dict:
        return http.get(agent.admin + "/status").json()

    try:
        agent.wait("v1 applied", lambda: status()["last_applied_revision"] == first)
        repo.write("deployments/echo.toml", ROLLOUT_SPEC.format(traffic='"echo-v1" = 0.0, "echo-v2" = 1.0'))
        second = repo.commit("v2 takes over, in two steps")
        agent.wait("the rollout at its first step", lambda: status()["rollouts"]["echo"]["phase"] == "stepping"
                   and status()["last_applied_revision"] == second)
        as_reader(chromium, "vera", agent.admin + "/")
        until("the viewer's page drawn", lambda: "stepping" in text(chromium, "rollouts"))
        assert chromium.find_elements(By.CSS_SELECTOR, "#rollouts button") == []  # a viewer's row has none

        as_reader(chromium, "otto", agent.admin + "/")
        until("the operator's row buttons", lambda: all(
            chromium.find_element(By.ID, button).is_displayed() for button in ("act-abort-echo", "act-promote-echo")))
        confirm = press_row_button(chromium, "act-abort-echo", "confirm-abort")
        assert "Abort endpoint echo?" in confirm.text and status()["rollouts"]["echo"]["phase"] == "stepping"
        confirm.find_element(By.NAME, "reason").send_keys("v2 p99 too high")
        chromium.find_element(By.ID, "go-abort").click()
        until("the abort done", lambda: text(chromium, "action-result").startswith("abort: done"))
        assert "aborted by hand by otto at step 1/2, traffic back" in text(chromium, "action-result")
        until("the row redrawn aborted, its buttons gone", lambda: "aborted" in text(chromium, "rollouts")
              and chromium.find_elements(By.CSS_SELECTOR, "#rollouts button") == [])
        until("the endpoint back on v1", lambda: "echo-v1 100.0%" in text(chromium, "endpoints"))
        chromium.save_screenshot(str(artifacts_dir / "statuspage-rollout-aborted.png"))
        agent.wait("the commit recorded aborted", lambda: any(
            e["commit"] == second and e["result"] == "aborted" for e in http.get(agent.admin + "/history").json()["entries"]))
        (abort,) = http.get(agent.admin + "/history", params={"kind": "abort"}).json()["actions"]
        assert (abort["actor"], abort["reason"], abort["result"]) == ("otto", "v2 p99 too high", "accepted")
        assert status()["endpoints"]["echo"]["traffic"] == {"echo-v1": 1.0, "echo-v2": 0.0}
        # The CLI's verb is the same route: the rollout is over now, and it says so.
        refused = http.post(agent.admin + "/rollouts/echo/promote")
        assert refused.status_code == 409 and "is over (aborted)" in refused.json()["error"]
    finally:
        http.close()
        agent.stop()
