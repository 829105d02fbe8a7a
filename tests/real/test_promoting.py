"""Promotions carried out against real remotes: `git http-backend` on loopback
for the pushes, and loopback servers posing as the GitHub and GitLab APIs."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from gitops.commands.run_environment import SettingsPromoter
from gitops.delivery.gates import PromotionSettings, parse_requirement
from gitops.delivery.promotion import PromotionError, PromotionRequest
from gitops.sources.repos import GitSource
from tests.conftest import GitRepo
from tests.support.forges import Forge
from tests.support.gitservers import HttpGitServer, Remote

pytestmark = pytest.mark.real

TOKEN = "promote-token-0123456789"


@pytest.fixture
def remote(tmp_path: Path, repo: GitRepo) -> Iterator[tuple[Remote, HttpGitServer]]:
    repo.write("deployments/echo.toml", "")
    repo.commit("first")
    remote = Remote(tmp_path / "served", repo)
    subprocess.run(["git", "--git-dir", str(remote.path), "config", "http.receivepack", "true"], check=True)
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/staging", "HEAD:refs/heads/env/prod")
    server = HttpGitServer(remote.root)
    try:
        yield remote, server
    finally:
        server.stop()


def remote_head(remote: Remote, branch: str) -> str:
    done = subprocess.run(
        ["git", "--git-dir", str(remote.path), "rev-parse", f"refs/heads/{branch}"], capture_output=True, text=True
    )
    return done.stdout.strip()


def settings(mode: str = "push", provider: str | None = None, api_url: str | None = None) -> PromotionSettings:
    return PromotionSettings(
        source="staging",
        to="prod",
        branch="env/prod",
        soak_s=60,
        require=(parse_requirement("rollouts"),),
        mode=mode,
        provider=provider,
        repository="acme/serving" if provider else None,
        api_url=api_url,
    )


def request(commit: str, promotion: PromotionSettings, body: str = "plan and evidence") -> PromotionRequest:
    return PromotionRequest(commit=commit, summary="v2", settings=promotion, title=f"Promote {commit[:7]}", body=body)


def staging_source(server: HttpGitServer, tmp_path: Path) -> GitSource:
    source = GitSource(server.url("remote.git"), "env/staging", tmp_path / "cache")
    source.newest()
    return source


def test_push_mode_fast_forwards_the_target_branch(remote: tuple[Remote, HttpGitServer], repo: GitRepo, tmp_path: Path) -> None:
    bare, server = remote
    repo.write("deployments/echo.toml", "# v2\n")
    commit = repo.commit("v2")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/staging")
    where = SettingsPromoter(staging_source(server, tmp_path), TOKEN).promote(request(commit, settings()))
    assert where == f"pushed {commit[:7]} to env/prod (fast-forward)"
    assert remote_head(bare, "env/prod") == commit


def test_push_mode_says_when_the_target_already_had_the_commit(
    remote: tuple[Remote, HttpGitServer], repo: GitRepo, tmp_path: Path
) -> None:
    """Issue 49 row 9: history said `pushed ... (fast-forward)` when nothing moved."""
    bare, server = remote
    commit = repo.head()  # env/staging and env/prod are both at it
    where = SettingsPromoter(staging_source(server, tmp_path), TOKEN).promote(request(commit, settings()))
    assert where == f"env/prod already at {commit[:7]} (nothing pushed)"
    assert remote_head(bare, "env/prod") == commit


def test_push_mode_refuses_what_is_not_a_fast_forward(
    remote: tuple[Remote, HttpGitServer], repo: GitRepo, tmp_path: Path
) -> None:
    bare, server = remote
    first = repo.head()
    repo.write("deployments/echo.toml", "# hotfix on prod\n")
    hotfix = repo.commit("hotfix")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/prod")
    repo.git("checkout", "-q", first)
    repo.write("deployments/echo.toml", "# v2\n")
    commit = repo.commit("v2")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/staging")
    with pytest.raises(
        PromotionError, match="env/prod has commits that .* does not \\(not a fast-forward\\); nothing was pushed"
    ):
        SettingsPromoter(staging_source(server, tmp_path), TOKEN).promote(request(commit, settings()))
    assert remote_head(bare, "env/prod") == hotfix


def test_pull_request_mode_opens_then_updates_a_github_pull_request(
    remote: tuple[Remote, HttpGitServer], repo: GitRepo, tmp_path: Path
) -> None:
    bare, server = remote
    forge = Forge("github")
    try:
        commit = repo.commit("v2")
        repo.git("push", "-q", "origin", "HEAD:refs/heads/env/staging")
        source = staging_source(server, tmp_path)  # the agent has served the commit: its cache holds it
        promoter = SettingsPromoter(source, TOKEN, api_urls=(forge.url,))
        where = promoter.promote(request(commit, settings("pull_request", "github", forge.url), "body one"))
        assert where == "opened pull request https://github.example/acme/pull/1"
        newer = repo.commit("v3")
        repo.git("push", "-q", "origin", "HEAD:refs/heads/env/staging")
        source.newest()
        where = promoter.promote(request(newer, settings("pull_request", "github", forge.url), "body two"))
        assert where == "updated pull request https://github.example/acme/pull/1"
    finally:
        forge.close()
    assert [(c.method, c.path) for c in forge.calls] == [
        ("GET", "/repos/acme/serving/pulls"),
        ("POST", "/repos/acme/serving/pulls"),
        ("GET", "/repos/acme/serving/pulls"),
        ("PATCH", "/repos/acme/serving/pulls/1"),
    ]
    for call in forge.calls:
        assert call.headers["authorization"] == f"Bearer {TOKEN}"
        assert call.headers["accept"] == "application/vnd.github+json"
        assert call.headers["x-github-api-version"] == "2022-11-28"
    assert forge.calls[0].query == {"head": "acme:gitops/promote-prod", "base": "env/prod", "state": "open"}
    assert forge.calls[1].body == {
        "title": f"Promote {commit[:7]}",
        "body": "body one",
        "head": "gitops/promote-prod",
        "base": "env/prod",
    }
    assert forge.calls[3].body == {"title": f"Promote {newer[:7]}", "body": "body two"}
    # The pull request's head is the promoted commit exactly, moved forward, never forced.
    assert remote_head(bare, "gitops/promote-prod") == newer
    assert remote_head(bare, "env/prod") != newer


def test_pull_request_mode_opens_then_updates_a_gitlab_merge_request(
    remote: tuple[Remote, HttpGitServer], repo: GitRepo, tmp_path: Path
) -> None:
    bare, server = remote
    forge = Forge("gitlab")
    try:
        commit = repo.commit("v2")
        repo.git("push", "-q", "origin", "HEAD:refs/heads/env/staging")
        api = forge.url + "/api/v4"
        promoter = SettingsPromoter(staging_source(server, tmp_path), TOKEN, api_urls=(api,))
        assert promoter.promote(request(commit, settings("pull_request", "gitlab", api), "one")) == (
            "opened merge request https://gitlab.example/merge_requests/1"
        )
        assert promoter.promote(request(commit, settings("pull_request", "gitlab", api), "two")) == (
            "updated merge request https://gitlab.example/merge_requests/1"
        )
    finally:
        forge.close()
    assert [(c.method, c.raw_path) for c in forge.calls] == [
        ("GET", "/api/v4/projects/acme%2Fserving/merge_requests"),
        ("POST", "/api/v4/projects/acme%2Fserving/merge_requests"),
        ("GET", "/api/v4/projects/acme%2Fserving/merge_requests"),
        ("PUT", "/api/v4/projects/acme%2Fserving/merge_requests/1"),
    ]
    assert all(call.headers["private-token"] == TOKEN for call in forge.calls)
    assert forge.calls[0].query == {"source_branch": "gitops/promote-prod", "target_branch": "env/prod", "state": "opened"}
    assert forge.calls[1].body == {
        "source_branch": "gitops/promote-prod",
        "target_branch": "env/prod",
        "title": f"Promote {commit[:7]}",
        "description": "one",
    }
    assert forge.calls[3].body == {"title": f"Promote {commit[:7]}", "description": "two"}
    assert remote_head(bare, "gitops/promote-prod") == commit


def test_an_api_error_is_a_promotion_error_with_the_status(
    remote: tuple[Remote, HttpGitServer], repo: GitRepo, tmp_path: Path
) -> None:
    _, server = remote
    forge = Forge("github")
    try:
        promoter = SettingsPromoter(staging_source(server, tmp_path), TOKEN, api_urls=(forge.url,))
        promotion = PromotionSettings(
            source="staging",
            to="prod",
            branch="env/prod",
            soak_s=1,
            mode="pull_request",
            provider="github",
            repository="acme",
            api_url=forge.url,  # no repository name: the API answers 404
        )
        with pytest.raises(PromotionError, match="GET /repos/acme/pulls: HTTP 404"):
            promoter.promote(request(repo.head(), promotion))
    finally:
        forge.close()


def test_the_plan_is_the_target_environments_against_its_branch_and_an_invalid_commit_is_not_promoted(
    remote: tuple[Remote, HttpGitServer], repo: GitRepo, tmp_path: Path
) -> None:
    from gitops.commands.run_environment import target_plan
    from gitops.specs.environments import EnvironmentSettings

    _, server = remote
    repo.write("deployments/apps/__init__.py", "")
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/apps/echo.py", "class Echo:\n    def __call__(self, request):\n        return 'hi'\n")
    repo.write(
        "deployments/echo.toml",
        '[backends.echo]\nimport_path = "deployments.apps.echo:Echo"\n\n'
        '[endpoints.echo]\nroute = "/echo"\ntraffic = { echo = 1.0 }\n',
    )
    repo.write("environments/prod.toml", "[backends.echo]\nnum_replicas = 3\n")
    base = repo.commit("echo")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/prod")
    repo.write("environments/prod.toml", "[backends.echo]\nnum_replicas = 5\n")
    commit = repo.commit("prod: 5 replicas")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/staging")
    text = target_plan(staging_source(server, tmp_path), "deployments", commit, EnvironmentSettings("staging", settings()))
    assert text.startswith(f"### ray-gitops plan (`prod`): `{base[:12]}` → `{commit[:12]}`"), text
    assert "| 0 | 1 | 0 | 0 |" in text  # one update, in place
    assert "`num_replicas: 3 → 5`" in text, text

    repo.write("environments/prod.toml", '[backends.echo]\nimport_path = "deployments.apps.other:Echo"\n')
    invalid = repo.commit("prod: a key no environment may set")
    repo.git("push", "-q", "origin", "HEAD:refs/heads/env/staging")
    with pytest.raises(PromotionError, match=f"{invalid[:7]} is invalid in prod: environments/prod.toml:2:1: "):
        target_plan(
            staging_source(server, tmp_path / "again"), "deployments", invalid, EnvironmentSettings("staging", settings())
        )
