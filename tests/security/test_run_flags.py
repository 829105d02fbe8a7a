"""`gitops run` refuses to expose its admin API or webhook unguarded (issue 11 row 3).

Usage errors: exit 2, one line on stderr, before anything starts (no state
dir, no Ray, no listener).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def gitops_run(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitops", "run", "--repo", str(tmp_path / "repo"), "--state-dir",
         str(tmp_path / "state"), *flags],
        capture_output=True, text=True, timeout=60,
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "gitops.example"])
def test_a_non_loopback_admin_host_without_a_token_is_a_usage_error(tmp_path: Path, host: str) -> None:
    done = gitops_run(tmp_path, "--admin-host", host)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--admin-token-file" in done.stderr and host in done.stderr
    assert not (tmp_path / "state").exists()


def test_a_webhook_listener_without_a_secret_is_a_usage_error(tmp_path: Path) -> None:
    done = gitops_run(tmp_path, "--webhook-port", "0")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--webhook-secret-file" in done.stderr


def test_an_empty_admin_token_file_is_a_one_line_error(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("\n")
    done = gitops_run(tmp_path, "--admin-host", "0.0.0.0", "--admin-token-file", str(token))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "--admin-token-file" in done.stderr and "empty" in done.stderr


def test_row7_an_ssh_url_with_a_password_is_refused_without_showing_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gitops", "run", "--repo", "ssh://git:ssh-secret-81f0@git.example/specs.git",
         "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "ssh-agent" in done.stderr, done.stderr
    assert "ssh-secret-81f0" not in done.stderr + done.stdout
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("pattern, problem", [("GITOPS_*", "GITOPS_"), ("BAD-NAME", "not an environment variable")])
def test_row16_a_bad_replica_env_is_a_usage_error(tmp_path: Path, pattern: str, problem: str) -> None:
    done = gitops_run(tmp_path, "--replica-env", pattern)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--replica-env" in done.stderr and problem in done.stderr, done.stderr
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(("flags", "code", "says"), [
    (["--oidc-issuer", "http://id.example.com", "--oidc-audience", "a", "--oidc-group-role", "g=viewer"], 1,
     "must be an https:// URL (http:// only to a loopback address)"),
    (["--oidc-issuer", "https://id.example.com"], 2, "--oidc-issuer needs --oidc-audience"),
    (["--oidc-issuer", "https://id.example.com", "--oidc-audience", "a"], 2, "at least one --oidc-group-role"),
    (["--oidc-issuer", "https://id.example.com", "--oidc-audience", "a", "--oidc-group-role", "g=root"], 1,
     "unknown role 'root'"),
    (["--oidc-audience", "a"], 2, "need --oidc-issuer"),
])
def test_bad_oidc_flags_are_one_line_errors_before_anything_starts(tmp_path: Path, flags: list[str], code: int,
                                                                   says: str) -> None:
    done = gitops_run(tmp_path, *flags)
    assert done.returncode == code and done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert not (tmp_path / "state").exists()


def test_a_bad_tokens_file_line_stops_run_at_its_line(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("ada admin not-a-digest\n")
    done = gitops_run(tmp_path, "--admin-tokens-file", str(tokens))
    assert done.returncode == 1 and f"{tokens}:1: the third field must be the token's SHA-256" in done.stderr
    assert not (tmp_path / "state").exists()
