"""Commit signatures (issue 11): only commits signed by an allowed key are applied.

Real keys made here (`ssh-keygen -t ed25519`; `gpg --quick-gen-key` in a
GNUPGHOME of the test), real signed commits (`git commit -S` with
`gpg.format=ssh`, or GPG's), git's own verification. Only SSH signatures
are checked against the allowed-signers file: a GPG-signed commit is
refused even when the keyring of the agent's user holds the key, since
that keyring is not what the operator allowed. First the verdicts, then a
real agent (`gitops run --verify-commits`, joined to the session's Ray)
that applies a signed commit and refuses an unsigned, an untrusted and a
GPG-signed one: not applied, `unverified` in history, Stalled with reason
`CommitNotVerified` in status, counted in
`gitops_commit_verification_total`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from gitops.cli import main
from gitops.sources.verifying import CommitVerifier, Verdict
from tests.conftest import GitRepo
from tests.support.signing_keys import allowed_signers, make_key, signed_commit
from tests.support.stack import AgentProcess


GPG_SIGNER = "ops@example.invalid"


@pytest.fixture
def gpg_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A GPG keyring holding one signing key, made the keyring of this process
    (and its children); the gpg-agent it starts is stopped afterwards."""
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("GNUPGHOME", str(home))
    subprocess.run(
        ["gpg", "--batch", "--quiet", "--passphrase", "", "--quick-gen-key", GPG_SIGNER, "ed25519", "sign", "never"],
        check=True, capture_output=True,
    )
    yield home
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], check=False, capture_output=True)


def gpg_signed_commit(repo: GitRepo, message: str) -> str:
    repo.git("add", "-A")
    repo.git("-c", "gpg.format=openpgp", "-c", f"user.signingkey={GPG_SIGNER}", "commit", "-q", "--allow-empty",
             "-S", "-m", message)
    return repo.head()


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(trusted key, stranger's key, allowed-signers file naming only the trusted one)."""
    trusted, stranger = make_key(tmp_path / "trusted"), make_key(tmp_path / "stranger")
    return trusted, stranger, allowed_signers(tmp_path / "allowed_signers", trusted)


def test_a_commit_signed_by_an_allowed_key_is_valid(repo: GitRepo, keys: tuple[Path, Path, Path]) -> None:
    trusted, _, allowed = keys
    sha = signed_commit(repo, trusted, "signed")
    assert CommitVerifier(allowed).verify(repo.root / ".git", sha).verdict is Verdict.VALID


def test_an_unsigned_commit_is_unsigned(repo: GitRepo, keys: tuple[Path, Path, Path]) -> None:
    sha = repo.commit("not signed")
    assert CommitVerifier(keys[2]).verify(repo.root / ".git", sha).verdict is Verdict.UNSIGNED


def test_a_commit_signed_by_another_key_is_untrusted_with_gits_reason(
    repo: GitRepo, keys: tuple[Path, Path, Path]
) -> None:
    _, stranger, allowed = keys
    sha = signed_commit(repo, stranger, "signed by a stranger")
    verification = CommitVerifier(allowed).verify(repo.root / ".git", sha)
    assert verification.verdict is Verdict.UNTRUSTED
    assert verification.reason


def test_a_gpg_signed_commit_is_refused_though_the_agent_users_keyring_holds_the_key(
    repo: GitRepo, keys: tuple[Path, Path, Path], gpg_home: Path
) -> None:
    sha = gpg_signed_commit(repo, "signed with gpg")
    # git alone accepts it: gpg finds the key in the keyring, whatever --allowed-signers says.
    assert subprocess.run(["git", "-C", str(repo.root), "verify-commit", sha], capture_output=True).returncode == 0
    verification = CommitVerifier(keys[2]).verify(repo.root / ".git", sha)
    assert verification.verdict is Verdict.UNTRUSTED
    assert verification.message(sha) == (
        f"commit {sha[:7]} has a signature the allowed signers do not accept: it is a GPG (OpenPGP) signature; "
        "--verify-commits checks only SSH signatures against --allowed-signers"
    )


def test_verification_writes_no_git_config(repo: GitRepo, keys: tuple[Path, Path, Path], tmp_path: Path) -> None:
    trusted, _, allowed = keys
    sha = signed_commit(repo, trusted, "signed")
    before = (repo.root / ".git" / "config").read_text()
    CommitVerifier(allowed).verify(repo.root / ".git", sha)
    assert (repo.root / ".git" / "config").read_text() == before


def test_verify_commits_without_allowed_signers_is_a_usage_error(
    repo: GitRepo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--repo", str(repo.root), "--state-dir", str(tmp_path / "state"), "--verify-commits"])
    assert code == 2
    assert "--verify-commits needs --allowed-signers" in capsys.readouterr().err


@pytest.mark.real
def test_a_real_agent_applies_signed_commits_and_refuses_unsigned_untrusted_and_gpg_signed_ones(
    ray_session: str, tmp_path: Path, keys: tuple[Path, Path, Path], gpg_home: Path
) -> None:
    import ray

    trusted, stranger, allowed = keys
    repo = GitRepo(tmp_path / "repo")
    repo.write("deployments/empty.toml", "")
    good = signed_commit(repo, trusted, "signed by the operator")
    (tmp_path / "agent").mkdir()
    agent = AgentProcess(repo.root, tmp_path / "agent", ray.get_runtime_context().gcs_address,
                         ["--verify-commits", "--allowed-signers", str(allowed)])
    try:
        agent.wait("the signed commit applied", lambda: agent.get("/status")["last_applied_revision"] == good)

        unsigned = repo.commit("not signed")
        status = agent_status_for(agent, unsigned)
        assert status["last_applied_revision"] == good
        stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
        assert stalled["reason"] == "CommitNotVerified"
        assert "not signed" in stalled["message"]
        result, error = history_result(agent, unsigned)
        assert result == "unverified" and error.startswith(f"commit {unsigned[:7]} is not signed")

        untrusted = signed_commit(repo, stranger, "signed by a stranger")
        status = agent_status_for(agent, untrusted)
        assert status["last_applied_revision"] == good
        result, error = history_result(agent, untrusted)
        assert result == "unverified" and "signature the allowed signers do not accept" in error

        gpg_signed = gpg_signed_commit(repo, "signed with a key of the agent user's gpg keyring")
        status = agent_status_for(agent, gpg_signed)
        assert status["last_applied_revision"] == good
        result, error = history_result(agent, gpg_signed)
        assert result == "unverified" and "it is a GPG (OpenPGP) signature" in error

        metrics = agent.metrics()
        for verdict in ("valid", "unsigned", "untrusted"):
            assert f'gitops_commit_verification_total{{result="{verdict}"}}' in metrics, verdict
    finally:
        agent.stop()


def agent_status_for(agent: AgentProcess, commit: str) -> dict[str, Any]:
    agent.wait(f"{commit[:7]} refused", lambda: agent.get("/status")["last_attempted_revision"] == commit)
    return agent.get("/status")


def history_result(agent: AgentProcess, commit: str) -> tuple[str, str]:
    """The commit's result in /history and its first error."""
    body = agent.get("/history")
    entries = body["entries"] if isinstance(body, dict) else body
    entry = next(e for e in entries if e["commit"] == commit)
    return entry["result"], (entry["errors"] or [""])[0]
