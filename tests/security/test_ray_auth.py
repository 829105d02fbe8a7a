"""Ray's token auth on the embedded cluster (issue 11 row 1).

The token file's life (made once, private, found again) is checked on disk;
the refusal of a driver without the token against the tests' real session
Ray, which is started the way `gitops run` starts its own.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from controller.cluster import TOKEN_FILE, ray_token_path
from tests.conftest import GitRepo

JOIN = "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); print('joined')"


def test_the_token_is_made_once_private_and_found_again(tmp_path: Path) -> None:
    first = ray_token_path(tmp_path / "state")
    token = first.read_text()
    assert first == tmp_path / "state" / TOKEN_FILE and len(token) == 64
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert ray_token_path(tmp_path / "state").read_text() == token


def test_the_token_path_is_absolute_for_workers_that_start_elsewhere(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = ray_token_path(Path(".gitops-state"))
    assert path.is_absolute() and path == tmp_path / ".gitops-state" / TOKEN_FILE


def test_a_token_file_readable_by_others_is_made_private(tmp_path: Path) -> None:
    path = ray_token_path(tmp_path)
    path.chmod(0o644)
    ray_token_path(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_empty_token_file_gets_a_fresh_token(tmp_path: Path) -> None:
    (tmp_path / TOKEN_FILE).write_text("")
    assert len(ray_token_path(tmp_path).read_text()) == 64


def join(address: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", JOIN, address], env=env, capture_output=True, text=True, timeout=120)


def without_auth() -> dict[str, str]:
    """The environment without Ray's auth settings. A refused driver gives up after two tries to
    reach the GCS (Ray's `RAY_gcs_server_port_wait_time_s`) instead of its default twenty, one a
    second: the refusal is the same, 18 s sooner."""
    kept = {key: value for key, value in os.environ.items() if not key.startswith("RAY_AUTH")}
    return {**kept, "RAY_gcs_server_port_wait_time_s": "2"}


@pytest.mark.real
def test_a_driver_without_the_token_cannot_join_the_embedded_ray(ray_session: str, tmp_path: Path) -> None:
    import ray

    env = {**without_auth(), "HOME": str(tmp_path)}  # nor Ray's default ~/.ray/auth_token
    done = join(ray.get_runtime_context().gcs_address, env)
    assert done.returncode != 0 and "joined" not in done.stdout
    assert "AuthenticationError" in done.stderr or "Authentication" in done.stderr


@pytest.mark.real
def test_a_driver_with_a_wrong_token_cannot_join(ray_session: str, tmp_path: Path) -> None:
    import ray

    env = {**without_auth(), "HOME": str(tmp_path), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}
    done = join(ray.get_runtime_context().gcs_address, env)
    assert done.returncode != 0 and "joined" not in done.stdout


@pytest.mark.real
def test_a_driver_with_the_state_dirs_token_joins(ray_session: str) -> None:
    import ray

    token_path = os.environ["RAY_AUTH_TOKEN_PATH"]  # the session's state dir, as gitops run sets it
    env = {**without_auth(), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path}
    done = join(ray.get_runtime_context().gcs_address, env)
    assert done.returncode == 0 and "joined" in done.stdout


@pytest.mark.real
def test_an_agent_joining_without_the_token_ends_with_one_line_naming_the_settings(
    ray_session: str, repo: GitRepo, tmp_path: Path
) -> None:
    import ray

    repo.write("deployments/empty.toml", "")
    repo.commit()
    env = {**without_auth(), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "gitops", "run", "--ray-address", ray.get_runtime_context().gcs_address,
         "--repo", str(repo.root), "--state-dir", str(tmp_path / "state"), "--admin-port", "0"],
        env=env, capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gitops run: Ray at ") and "RAY_AUTH_TOKEN_PATH" in last and "internal error" not in last
