"""A real `gitops run` exposed as docs/guides/security.md says (issue 11 rows 1, 3, 4, 14).

One agent, joined to the session's Ray (token auth on, so the join itself
proves an agent authenticates as the cluster does), with an admin token and
the webhook on its own listener. Real HTTP on loopback, the real CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from gitops.admin.webhooks import sign
from gitops.cli import main
from tests.conftest import GitRepo
from tests.support.stack import AgentProcess, eventually, free_port

pytestmark = pytest.mark.real

TOKEN = "agent-admin-token-0123456789"
SECRET = b"agent-webhook-secret"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


class Exposed:
    def __init__(self, agent: AgentProcess, hooks: str, token_file: Path) -> None:
        self.agent = agent
        self.hooks = hooks
        self.token_file = token_file


@pytest.fixture(scope="module")
def exposed(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exposed]:
    import ray

    root = tmp_path_factory.mktemp("exposed")
    repo = GitRepo(root / "repo")
    repo.write("deployments/empty.toml", "")
    repo.commit("nothing to serve yet")
    (root / "token").write_text(TOKEN + "\n")
    (root / "secret").write_bytes(SECRET)
    hooks_port = free_port()
    agent = AgentProcess(repo.root, root, ray.get_runtime_context().gcs_address, [
        "--admin-token-file", str(root / "token"),
        "--webhook-secret-file", str(root / "secret"),
        "--webhook-port", str(hooks_port),
    ])
    agent.wait("the admin API", lambda: agent.http.get(agent.admin + "/healthz").status_code == 200)
    try:
        yield Exposed(agent, f"http://127.0.0.1:{hooks_port}", root / "token")
    finally:
        agent.stop()


def test_status_needs_the_token(exposed: Exposed) -> None:
    http = exposed.agent.http
    assert http.get(exposed.agent.admin + "/status").status_code == 401
    status = eventually(lambda: http.get(exposed.agent.admin + "/status", headers=BEARER).json().get("status"),
                        what="a status with the token")
    assert status in {"Synced", "Progressing"}


def test_suspend_without_the_token_is_refused_and_changes_nothing(exposed: Exposed) -> None:
    http = exposed.agent.http
    assert http.post(exposed.agent.admin + "/suspend").status_code == 401
    assert http.get(exposed.agent.admin + "/status", headers=BEARER).json()["status"] != "Suspended"


def test_metrics_stay_open_for_prometheus(exposed: Exposed) -> None:
    assert "gitops_" in exposed.agent.http.get(exposed.agent.admin + "/metrics").text


def test_the_cli_reads_the_token_file(exposed: Exposed, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--agent", exposed.agent.admin, "--token-file", str(exposed.token_file), "--json"]) == 0
    assert '"status"' in capsys.readouterr().out


def test_the_webhook_listener_publishes_nothing_but_the_webhook(exposed: Exposed) -> None:
    http = exposed.agent.http
    for method, path in [("GET", "/status"), ("POST", "/suspend"), ("GET", "/metrics"), ("GET", "/")]:
        assert http.request(method, exposed.hooks + path, headers=BEARER).status_code == 404, path


def test_the_admin_listener_no_longer_serves_the_webhook(exposed: Exposed) -> None:
    body = b'{"after": "admin"}'
    response = exposed.agent.http.post(exposed.agent.admin + "/hooks/git", content=body,
                                       headers={"X-Hub-Signature-256": sign(SECRET, body)})
    assert response.status_code == 404


def test_a_signed_push_is_taken_once_and_its_replay_refused(exposed: Exposed) -> None:
    body = b'{"after": "0123abc"}'
    headers = {"X-Hub-Signature-256": sign(SECRET, body), "X-GitHub-Delivery": "delivery-1"}
    http = exposed.agent.http
    assert http.post(exposed.hooks + "/hooks/git", content=body, headers=headers).status_code == 202
    assert http.post(exposed.hooks + "/hooks/git", content=body, headers=headers).status_code == 409


def test_a_foreign_host_is_refused(exposed: Exposed) -> None:
    response = exposed.agent.http.get(exposed.agent.admin + "/metrics", headers={"Host": "rebound.example"})
    assert response.status_code == 403


def test_row9_a_page_on_the_proxy_s_port_cannot_post_to_the_admin_listener(exposed: Exposed) -> None:
    agent = exposed.agent
    page = f"http://127.0.0.1:{agent.proxy_port}"  # an app the proxy serves, in the operator's browser
    for path in ("/suspend", "/sync", "/rollback"):
        response = agent.http.post(agent.admin + path, headers={**BEARER, "Origin": page})
        assert response.status_code == 403 and "cross-origin" in response.json()["error"], path
    assert agent.http.get(agent.admin + "/status", headers=BEARER).json()["status"] != "Suspended"
    # The admin listener's own page may: with the CSRF token the page was given (`/session` answers it too).
    csrf = agent.http.get(agent.admin + "/session", headers=BEARER).json()["csrf"]
    forged = agent.http.post(agent.admin + "/sync", headers={**BEARER, "Origin": agent.admin})
    assert forged.status_code == 403 and "X-CSRF-Token" in forged.json()["error"], forged.text
    own = agent.http.post(agent.admin + "/sync", headers={**BEARER, "Origin": agent.admin, "X-CSRF-Token": csrf})
    assert own.status_code == 202, own.text
