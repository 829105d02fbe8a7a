"""`gitops validate` and `gitops plan` with environments, as a user runs them: subprocesses on a real git repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GitRepo

pytestmark = pytest.mark.real

PROJECT = Path(__file__).resolve().parents[2]

APP = """\
class Echo:
    def __init__(self, label="v1"):
        self.label = label

    def __call__(self, request):
        return self.label
"""

SPEC = """\
[backends.echo-v1]
import_path = "deployments.apps.echo:Echo"
num_replicas = 1

[endpoints.echo]
route = "/echo"
traffic = { echo-v1 = 1.0 }
"""

PROD = """\
[backends.echo-v1]
num_replicas = 3
runtime_env = { env_vars = { MODE = "prod" } }
"""

STAGING = """\
[backends.echo-v1]
import_path = "deployments.apps.other:Echo"

[[sync_windows]]
kind = "deny"
schedule = "* * * * *"
duration_s = 120
timezone = "Europe/Berlin"
"""


def gitops(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    return subprocess.run([sys.executable, "-m", "gitops", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def envs_repo(repo: GitRepo) -> GitRepo:
    repo.write("deployments/apps/echo.py", APP)
    repo.write("deployments/echo.toml", SPEC)
    repo.write("environments/prod.toml", PROD)
    repo.commit("echo with a prod environment")
    return repo


def test_validate_checks_the_tree_and_every_environment_file(envs_repo: GitRepo) -> None:
    done = gitops("validate", cwd=envs_repo.root)
    assert (done.returncode, done.stdout.splitlines()[-1], done.stderr) == (0, "deployments: 1 backend, 1 endpoint, valid", "")
    envs_repo.write("environments/staging.toml", STAGING)
    done = gitops("validate", cwd=envs_repo.root)
    assert done.returncode == 1
    assert done.stderr.startswith(
        "environments/staging.toml:2:1: backends.echo-v1.import_path: not overridable per environment"
    ), done.stderr
    # One environment at a time: prod alone is valid.
    assert gitops("validate", "--environment", "prod", cwd=envs_repo.root).returncode == 0
    done = gitops("validate", "--environment", "qa", cwd=envs_repo.root)
    assert (done.returncode, done.stderr) == (1, "environments/qa.toml:1:1: environment 'qa' has no file environments/qa.toml\n")


def test_plan_with_an_environment_shows_its_effective_state(envs_repo: GitRepo) -> None:
    plain = gitops("plan", "--to", "HEAD", cwd=envs_repo.root)
    prod = gitops("plan", "--to", "HEAD", "--environment", "prod", cwd=envs_repo.root)
    assert plain.returncode == prod.returncode == 0, (plain.stderr, prod.stderr)
    assert "    num_replicas: 1\n" in plain.stdout, plain.stdout
    assert "    num_replicas: 3\n" in prod.stdout, prod.stdout
    as_json = json.loads(gitops("plan", "--environment", "prod", "--format", "json", cwd=envs_repo.root).stdout)
    created = next(action["backend"] for action in as_json["actions"] if action["backend"])
    assert created["runtime_env"] == {"env_vars": {"MODE": "prod"}}
    markdown = gitops("plan", "--to", "HEAD", "--environment", "prod", "--format", "markdown", cwd=envs_repo.root)
    assert markdown.stdout.startswith("### ray-gitops plan (`prod`): `nothing` → `HEAD`"), markdown.stdout


def test_plan_says_when_a_sync_window_holds_new_commits(envs_repo: GitRepo) -> None:
    envs_repo.write(
        "environments/staging.toml", STAGING.replace('import_path = "deployments.apps.other:Echo"', "num_replicas = 2")
    )
    envs_repo.commit("staging, frozen")
    done = gitops("plan", "--environment", "staging", cwd=envs_repo.root)
    assert done.returncode == 0, done.stderr
    assert "Held (SyncWindow): deny window deny '* * * * *' for 120s (Europe/Berlin) is open until " in done.stdout, done.stdout


def test_a_promotion_token_without_an_environment_is_a_usage_error(envs_repo: GitRepo, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("secret-promotion-token\n")
    token.chmod(0o600)
    done = gitops("run", "--promote-token-file", str(token), cwd=envs_repo.root)
    assert done.returncode == 2
    assert done.stderr.strip() == "gitops run: --promote-token-file promotes from an environment: give --environment too"
    assert "secret-promotion-token" not in done.stderr + done.stdout
