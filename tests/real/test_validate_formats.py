"""`gitops validate --format text|json|github` on a real repository: exact outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import GitRepo

pytestmark = pytest.mark.real

PROJECT = Path(__file__).resolve().parents[2]

APP = "class Echo:\n    def __call__(self, request):\n        return 'hi'\n"
GOOD = """\
[backends.echo]
import_path = "deployments.apps.echo:Echo"

[endpoints.echo]
route = "/echo"
traffic = { echo = 1.0 }
"""
# A newline in a quoted name, a '%' in a value and a ',' in the file name:
# each must be escaped in a GitHub workflow command.
BROKEN = """\
[backends.echo]
import_path = "deployments.apps.echo:Echo"

[backends."Echo\\nv2"]
import_path = "deployments.apps.echo:Echo"

[endpoints.echo]
route = "/echo"
traffic = { echo = "100%" }
"""
NAME_RULE = "name must match [a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?"


def validate(repo: GitRepo, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops", "validate", *args],
        cwd=repo.root, env={**os.environ, "PYTHONPATH": str(PROJECT)}, capture_output=True, text=True, timeout=60,
    )


@pytest.fixture
def broken_repo(repo: GitRepo) -> GitRepo:
    repo.write("deployments/apps/echo.py", APP)
    repo.write("deployments/echo,v2.toml", BROKEN)
    repo.commit("broken")
    return repo


@pytest.fixture
def good_repo(repo: GitRepo) -> GitRepo:
    repo.write("deployments/apps/echo.py", APP)
    repo.write("deployments/echo.toml", GOOD)
    repo.commit("good")
    return repo


def test_github_format_prints_one_escaped_error_annotation_per_error(broken_repo: GitRepo) -> None:
    done = validate(broken_repo, "--format", "github")
    assert (done.returncode, done.stderr) == (1, "")
    assert done.stdout == (
        "::error file=deployments/echo%2Cv2.toml,line=4,col=1,title=gitops validate::"
        f"backends.Echo\\nv2: {NAME_RULE}\n"
        "::error file=deployments/echo%2Cv2.toml,line=9,col=20,title=gitops validate::"
        "endpoints.echo.traffic.echo: must be a number (got '100%25')\n"
        "deployments: 2 errors, invalid\n"
    )


def test_github_format_of_a_valid_tree_prints_only_the_summary(good_repo: GitRepo) -> None:
    done = validate(good_repo, "--format", "github")
    assert (done.returncode, done.stdout) == (0, "deployments: 1 backend, 1 endpoint, valid\n")


def test_json_format_prints_one_document_with_every_error(broken_repo: GitRepo) -> None:
    done = validate(broken_repo, "--format", "json")
    assert (done.returncode, done.stderr) == (1, "")
    assert json.loads(done.stdout) == {
        "path": "deployments",
        "valid": False,
        "backends": None,
        "endpoints": None,
        "checked": None,
        "errors": [
            {"file": "deployments/echo,v2.toml", "line": 4, "col": 1, "message": f"backends.Echo\nv2: {NAME_RULE}"},
            {"file": "deployments/echo,v2.toml", "line": 9, "col": 20,
             "message": "endpoints.echo.traffic.echo: must be a number (got '100%')"},
        ],
    }


def test_json_format_of_a_valid_tree_counts_what_it_declares(good_repo: GitRepo) -> None:
    done = validate(good_repo, "--format", "json")
    assert done.returncode == 0
    assert json.loads(done.stdout) == {
        "path": "deployments", "valid": True, "backends": 1, "endpoints": 1, "errors": [],
        "checked": {"spec_files": 1, "environments": [], "secrets": [], "secrets_decrypted": False, "models": [],
                    "promotions": [], "sync_windows": 0},
    }


def test_text_format_keeps_errors_on_stderr_and_the_summary_on_stdout(broken_repo: GitRepo) -> None:
    done = validate(broken_repo, "--format", "text")
    assert (done.returncode, done.stdout) == (1, "deployments: 2 errors, invalid\n")
    assert done.stderr == (
        f"deployments/echo,v2.toml:4:1: backends.Echo\\nv2: {NAME_RULE}\n"
        "deployments/echo,v2.toml:9:20: endpoints.echo.traffic.echo: must be a number (got '100%')\n"
    )


def run_hook(repo: GitRepo) -> subprocess.CompletedProcess[str]:
    """The hook as pre-commit runs it: its entry and args, no file names."""
    (hook,) = yaml.safe_load((PROJECT / ".pre-commit-hooks.yaml").read_text())
    assert (hook["id"], hook["pass_filenames"]) == ("gitops-validate", False)
    program, verb, *args = [*hook["entry"].split(), *hook.get("args", [])]
    assert (program, verb) == ("gitops", "validate")
    return validate(repo, *args)


def test_the_pre_commit_hook_refuses_a_tree_with_errors(broken_repo: GitRepo) -> None:
    done = run_hook(broken_repo)
    assert done.returncode == 1
    assert done.stderr.startswith("deployments/echo,v2.toml:4:1: ")


def test_the_pre_commit_hook_passes_a_valid_tree(good_repo: GitRepo) -> None:
    assert run_hook(good_repo).returncode == 0
