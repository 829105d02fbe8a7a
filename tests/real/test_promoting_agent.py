"""`mode = "pull_request"` through a running agent: GitHub, then GitLab.

A staging agent (`gitops run --environment staging --promote-token-file`)
watches `env/staging` of a bare remote served by `git http-backend`;
`environments/staging.toml` promotes to prod by pull request, its API a
loopback server posing as GitHub's (`tests.support.forges`). A commit that
soaks and passes its gates is pushed to `gitops/promote-prod` and a pull
request from it to `env/prod` is opened; a newer passing commit updates
that pull request. A commit switching the file to GitLab (another loopback
server, posing as GitLab's API) opens a merge request, and the next one
updates it. The requests have the shapes each API documents; their bodies
hold the evidence (every gate with its numbers, the soak) and prod's plan
in markdown; the token is sent to the API and nowhere else: not in the
agent's log, status, status page, metrics or history. Both APIs are ones
the agent allows (`--promote-api-url`).

Issue 50, row 2: where the token goes is not the committer's to say. A
commit naming another `api_url` (a loopback receiver standing in for a
committer's server) gets no request at all, no push of the promotion
branch, and an error saying the setting is the agent's.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import httpx
import pytest
import ray

from tests.conftest import GitRepo
from tests.support.environments import APP, EnvironmentAgent, echo_spec, promoted, remote_head
from tests.support.forges import Call, Forge
from tests.support.gitservers import HttpGitServer, Remote

pytestmark = pytest.mark.real

TOKEN = "promote-pr-token-7d41a9c2e0b35f86"
SOAK_S = 2
PROD = """\
[backends.echo]
runtime_env = { env_vars = { ENVIRONMENT = "prod" } }
"""


def staging_file(provider: str, api_url: str) -> str:
    return f"""\
[backends.echo]
runtime_env = {{ env_vars = {{ ENVIRONMENT = "staging" }} }}

[promotion]
to = "prod"
branch = "env/prod"
soak_s = {SOAK_S}
require = ["rollouts", "no_backend_errors"]
mode = "pull_request"
provider = "{provider}"
repository = "acme/serving"
api_url = "{api_url}"
"""


class Setup(NamedTuple):
    repo: GitRepo
    remote: Remote
    agent: EnvironmentAgent
    github: Forge
    gitlab: Forge
    base: str  # env/prod's commit


@pytest.fixture
def setup(ray_session: str, repo: GitRepo, tmp_path: Path) -> Iterator[Setup]:
    github, gitlab = Forge("github"), Forge("gitlab")
    allowed = ("--promote-api-url", github.url, "--promote-api-url", gitlab.url + "/api/v4/")
    yield from _setup(repo, tmp_path, github, gitlab, staging_file("github", github.url), allowed)


@pytest.fixture
def hostile(ray_session: str, repo: GitRepo, tmp_path: Path) -> Iterator[Setup]:
    """The agent allows the public APIs only; the committer's file names the receiver."""
    receiver, unused = Forge("github"), Forge("gitlab")
    text = staging_file("github", receiver.url).replace('require = ["rollouts", "no_backend_errors"]', "require = []")
    yield from _setup(repo, tmp_path, receiver, unused, text, ())


def _setup(
    repo: GitRepo, tmp_path: Path, github: Forge, gitlab: Forge, staging: str, flags: tuple[str, ...]
) -> Iterator[Setup]:
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/apps/__init__.py", "")
    repo.write("deployments/apps/echo.py", APP)
    repo.write("deployments/echo.toml", echo_spec("v1"))
    repo.write("environments/staging.toml", staging)
    repo.write("environments/prod.toml", PROD)
    base = repo.commit("v1")
    remote = Remote(tmp_path / "served", repo)
    subprocess.run(["git", "--git-dir", str(remote.path), "config", "http.receivepack", "true"], check=True)
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/prod")
    repo.write("deployments/echo.toml", echo_spec("v2"))
    repo.commit("v2")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/staging")
    server = HttpGitServer(remote.root)
    token = tmp_path / "promote-token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    agent = EnvironmentAgent(
        server.url("remote.git"), tmp_path / "staging", ray.get_runtime_context().gcs_address, "staging",
        "--promote-token-file", str(token), *flags,
    )
    try:
        yield Setup(repo, remote, agent, github, gitlab, base)
    finally:
        agent.stop()
        server.stop()
        github.close()
        gitlab.close()


def wait_promoted(agent: EnvironmentAgent, commit: str) -> dict[str, Any]:
    agent.wait(f"{commit[:7]} promoted", lambda: promoted(agent, commit) is not None, timeout_s=120)
    row = promoted(agent, commit)
    assert row is not None
    return row


def push(repo: GitRepo, message: str) -> str:
    commit = repo.commit(message)
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/staging")
    return commit


def assert_body(body: str, commit: str, subject: str, label: str, base: str) -> None:
    """The evidence, gate by gate with its numbers, then prod's plan of `commit` (serving `label`) against env/prod."""
    assert body.startswith(f"Promotes `{commit[:12]}` ({subject}) from `staging` to `prod`"), body
    assert re.search(rf"\| `soak` \| passed \| served \d+s of {SOAK_S}s \|", body), body
    assert "| `rollouts` | passed | no rollout stopped |" in body, body
    answered = re.search(r"\| `no_backend_errors` \| passed \| 0 of (\d+) answers were 5xx \|", body)
    assert answered is not None and int(answered.group(1)) > 0, body
    assert re.search(rf"Soak: served \d+s applied and Synced \(required {SOAK_S}s\)\.", body), body
    assert f"### ray-gitops plan (`prod`): `{base[:12]}` → `{commit[:12]}`" in body, body
    assert "| update backend `echo` | **restart** (rolling update) |" in body, body
    assert f'`init_args: ["v1"] → ["{label}"]`' in body, body


def test_pull_request_mode_opens_and_updates_github_then_gitlab_requests(setup: Setup) -> None:
    repo, remote, agent, github, gitlab, base = setup
    stop = threading.Event()

    def traffic() -> None:  # evidence for no_backend_errors: answers, none 5xx
        while not stop.is_set():
            try:
                httpx.get(agent.proxy + "/echo", timeout=5)
            except httpx.HTTPError:
                pass
            time.sleep(0.1)

    sender = threading.Thread(target=traffic, daemon=True)
    sender.start()
    try:
        run(repo, remote, agent, github, gitlab, base)
    finally:
        stop.set()
        sender.join(10)
    # The token went to the APIs, and nowhere a person or a scraper reads.
    shown = [
        agent.log_path.read_text(),
        json.dumps(agent.get("/status")),
        json.dumps(agent.history()),
        agent.http.get(agent.admin + "/").text,
        agent.metrics(),
        *(json.dumps(call.body) for call in github.calls + gitlab.calls),
    ]
    assert not [text[:200] for text in shown if TOKEN in text]


def run(repo: GitRepo, remote: Remote, agent: EnvironmentAgent, github: Forge, gitlab: Forge, base: str) -> None:
    first = repo.head()
    row = wait_promoted(agent, first)
    assert row["plan_summary"].startswith("promoted to prod (env/prod): opened pull request https://github.example/acme/pull/1")
    assert remote_head(remote, "gitops/promote-prod") == first
    assert remote_head(remote, "env/prod") == base  # a person merges the pull request

    repo.write("deployments/echo.toml", echo_spec("v3"))
    second = push(repo, "v3")
    row = wait_promoted(agent, second)
    assert "updated pull request https://github.example/acme/pull/1" in row["plan_summary"]
    assert remote_head(remote, "gitops/promote-prod") == second
    assert [(c.method, c.path) for c in github.calls] == [
        ("GET", "/repos/acme/serving/pulls"),
        ("POST", "/repos/acme/serving/pulls"),
        ("GET", "/repos/acme/serving/pulls"),
        ("PATCH", "/repos/acme/serving/pulls/1"),
    ]
    assert_github(github.calls, first, second, base)
    assert github.opened[0]["body"] == github.calls[3].body["body"]  # the pull request holds the newest body

    repo.write("environments/staging.toml", staging_file("gitlab", gitlab.url + "/api/v4"))
    third = push(repo, "staging: promote through GitLab")
    row = wait_promoted(agent, third)
    assert "opened merge request https://gitlab.example/merge_requests/1" in row["plan_summary"]
    repo.write("deployments/echo.toml", echo_spec("v4"))
    fourth = push(repo, "v4")
    row = wait_promoted(agent, fourth)
    assert "updated merge request https://gitlab.example/merge_requests/1" in row["plan_summary"]
    assert remote_head(remote, "gitops/promote-prod") == fourth
    assert [(c.method, c.raw_path) for c in gitlab.calls] == [
        ("GET", "/api/v4/projects/acme%2Fserving/merge_requests"),
        ("POST", "/api/v4/projects/acme%2Fserving/merge_requests"),
        ("GET", "/api/v4/projects/acme%2Fserving/merge_requests"),
        ("PUT", "/api/v4/projects/acme%2Fserving/merge_requests/1"),
    ]
    assert_gitlab(gitlab.calls, third, fourth, base)
    assert len(github.calls) == 4  # GitHub heard nothing more once the file named GitLab
    assert remote_head(remote, "env/prod") == base


def assert_github(calls: list[Call], first: str, second: str, base: str) -> None:
    for call in calls:
        assert call.headers["authorization"] == f"Bearer {TOKEN}"
        assert call.headers["accept"] == "application/vnd.github+json"
        assert call.headers["x-github-api-version"] == "2022-11-28"
    for lookup in (calls[0], calls[2]):
        assert lookup.query == {"head": "acme:gitops/promote-prod", "base": "env/prod", "state": "open"}
    opened, updated = calls[1].body, calls[3].body
    assert set(opened) == {"title", "body", "head", "base"}
    assert (opened["head"], opened["base"]) == ("gitops/promote-prod", "env/prod")
    assert opened["title"] == f"Promote {first[:7]} from staging to prod: v2"
    assert_body(opened["body"], first, "v2", "v2", base)
    assert set(updated) == {"title", "body"}  # head and base stay: the branch moved forward
    assert updated["title"] == f"Promote {second[:7]} from staging to prod: v3"
    assert_body(updated["body"], second, "v3", "v3", base)


def assert_gitlab(calls: list[Call], third: str, fourth: str, base: str) -> None:
    assert all(call.headers["private-token"] == TOKEN and "authorization" not in call.headers for call in calls)
    for lookup in (calls[0], calls[2]):
        assert lookup.query == {"source_branch": "gitops/promote-prod", "target_branch": "env/prod", "state": "opened"}
    opened, updated = calls[1].body, calls[3].body
    assert set(opened) == {"source_branch", "target_branch", "title", "description"}
    assert (opened["source_branch"], opened["target_branch"]) == ("gitops/promote-prod", "env/prod")
    assert opened["title"] == f"Promote {third[:7]} from staging to prod: staging: promote through GitLab"
    assert_body(opened["description"], third, "staging: promote through GitLab", "v3", base)
    assert set(updated) == {"title", "description"}
    assert updated["title"] == f"Promote {fourth[:7]} from staging to prod: v4"
    assert_body(updated["description"], fourth, "v4", "v4", base)


def test_row2_an_api_url_the_committer_names_never_receives_the_token(hostile: Setup) -> None:
    repo, remote, agent, receiver, _, _ = hostile
    commit = repo.head()
    said = "is not an API this agent sends its promotion token to"
    agent.wait("the promotion refused", lambda: said in agent.log_path.read_text(), timeout_s=120)
    status = json.dumps(agent.get("/status"))
    assert said in status and "gitops run --promote-api-url URL" in status, status[:2000]
    assert f"api_url '{receiver.url}' in environments/staging.toml" in status
    time.sleep(2)  # a retry, had there been one, would have come by now
    assert receiver.calls == []  # not a request, let alone the token
    assert remote_head(remote, "gitops/promote-prod") == ""  # and nothing pushed either
    assert promoted(agent, commit) is None
    shown = [agent.log_path.read_text(), status, json.dumps(agent.history())]
    assert not [text[:200] for text in shown if TOKEN in text]
