"""Secrets stay secret (issue 11 row 2): a real agent, a real git HTTP server.

A token is planted in the repository URL (`http://user:TOKEN@127.0.0.1/…`)
and another in the admin token file. The agent runs through a failing
fetch (the server refuses everyone) and a successful one; neither secret
may appear in /status, /history, /metrics, the status page, `gitops status
--json`, the agent's log, or any process's command line while the fetches
run once the agent has started (the URL git is given carries no userinfo;
git gets the password from a credential helper for that host only; the
agent's own command line is rewritten without it). Issue 27's rows 5 and 6
(a token as the user name, redirects) are in test_git_credentials.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from gitops.cli import main
from tests.conftest import GitRepo
from tests.support.gitserver import CommandLines, GitHttpServer, serving
from tests.support.stack import AgentProcess

pytestmark = pytest.mark.real

URL_TOKEN = "url-token-7d3f0a9c51e2"
ADMIN_TOKEN = "admin-token-b84e62c01f9d"
SECRETS = (URL_TOKEN, ADMIN_TOKEN)
BEARER = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


class Run:
    def __init__(self, agent: AgentProcess, server: GitHttpServer, token_file: Path, cmdlines: set[str], head: str,
                 git_error: str) -> None:
        self.agent = agent
        self.server = server
        self.token_file = token_file
        self.cmdlines = cmdlines
        self.head = head
        self.git_error = git_error


@pytest.fixture(scope="module")
def run(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    import ray

    root = tmp_path_factory.mktemp("credentials")
    work = GitRepo(root / "work")
    work.write("deployments/empty.toml", "")
    head = work.commit("nothing to serve yet")
    (root / "served").mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(work.root), str(root / "served" / "specs.git")], check=True)
    (root / "admin-token").write_text(ADMIN_TOKEN + "\n")
    with serving(root / "served", URL_TOKEN) as server:
        server.accepting = False
        agent = AgentProcess(
            server.url("specs.git", f"deploy:{URL_TOKEN}"),  # type: ignore[arg-type]  # a URL string where a path is typed
            root,
            ray.get_runtime_context().gcs_address,
            ["--branch", "main", "--admin-token-file", str(root / "admin-token")],
        )
        # From start-up on: before it, the agent's own argv still has the URL as given.
        agent.wait("the admin API", lambda: agent.http.get(agent.admin + "/healthz").status_code == 200)
        cmdlines = CommandLines()
        try:
            status = lambda: agent.http.get(agent.admin + "/status", headers=BEARER).json()  # noqa: E731  # a one-line callback reads best as a lambda
            agent.wait("a failing fetch in the status", lambda: bool(status()["errors"]))
            git_error = status()["errors"][0]
            server.accepting = True
            agent.wait("the commit applied", lambda: status()["last_applied_revision"] == head)
            yield Run(agent, server, root / "admin-token", cmdlines.stop(), head, git_error)
        finally:
            cmdlines.stop()
            agent.stop()


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret} leaked in {where}"


def test_the_failing_fetch_is_reported_without_the_token(run: Run) -> None:
    assert "Authentication failed" in run.git_error or "401" in run.git_error, run.git_error
    assert f"127.0.0.1:{run.server.port}/specs.git" in run.git_error
    assert_no_secret(run.git_error, "the fetch error")


def test_status_shows_the_repository_without_userinfo(run: Run) -> None:
    body = run.agent.http.get(run.agent.admin + "/status", headers=BEARER).text
    assert f'"repo":"http://127.0.0.1:{run.server.port}/specs.git"' in body.replace(" ", "")
    assert_no_secret(body, "/status")


def test_history_carries_no_secret(run: Run) -> None:
    body = run.agent.http.get(run.agent.admin + "/history", headers=BEARER).text
    assert run.head in body
    assert_no_secret(body, "/history")


def test_metrics_carry_no_secret(run: Run) -> None:
    body = run.agent.metrics()
    assert "gitops_" in body
    assert_no_secret(body, "/metrics")


def test_the_status_page_carries_no_secret(run: Run) -> None:
    page = run.agent.http.get(run.agent.admin + "/", headers=BEARER)
    assert page.status_code == 200
    assert_no_secret(page.text, "the status page")


def test_gitops_status_json_carries_no_secret(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--agent", run.agent.admin, "--token-file", str(run.token_file), "--json"]) == 0
    out = capsys.readouterr().out
    assert run.head in out
    assert_no_secret(out, "gitops status --json")


def test_the_log_carries_no_secret(run: Run) -> None:
    log = run.agent.log_path.read_text()
    assert f"127.0.0.1:{run.server.port}/specs.git" in log
    assert_no_secret(log, "the agent's log")


def test_no_command_line_carries_the_token_while_fetches_run(run: Run) -> None:
    fetches = [line for line in run.cmdlines if " fetch " in line and f"127.0.0.1:{run.server.port}" in line]
    assert fetches, "no git fetch was seen in /proc: the sampler proves nothing"
    agents = [line for line in run.cmdlines if "gitops run" in line or "-m gitops run" in line]
    assert agents, "the agent's own command line was not seen"
    for line in run.cmdlines:
        assert_no_secret(line, f"the command line {line!r}")
