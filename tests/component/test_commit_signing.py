"""The commits the agent writes, signed with `--signing-key` (issue 44, item 4).

Real git and real keys made here with ssh-keygen (`tests.support.signing_keys`):

- `GitSource.commit_file` with a key writes a commit `git verify-commit` accepts
  against an allowed-signers file naming the key, and so does `--verify-commits`'
  own verifier (`gitops.sources.verifying`); without a key the commit is unsigned,
  as before;
- a key file that cannot sign (missing, a directory, readable by others, not a
  key, a public key, a key with a passphrase) is refused at start with one line
  naming the flag and never the file, by `gitops run` and `gitops automation run`
  alike (exit 2, nothing started);
- `allowed_by` says whether an allowed-signers file lists the key, and an agent
  that signs and verifies warns once when it does not.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
from pathlib import Path

import pytest

from gitops.cli import main
from gitops.errors import UsageError
from gitops.redaction import redact
from gitops.sources.repos import GitSource
from gitops.sources.signing import SigningKey, allowed_by, load_signing_key
from gitops.sources.verifying import CommitVerifier, Verdict
from tests.conftest import GitRepo
from tests.support.signing_keys import allowed_signers, make_key

FLAG = "--signing-key"


def pin_commit(repo: GitRepo, tmp_path: Path, key: SigningKey | None) -> str:
    """A commit `commit_file` writes on the repository's head, as artifact automation does."""
    source = GitSource(str(repo.root), "main", tmp_path / "state")
    return source.commit_file(repo.head(), "deployments/model.toml", b'sha256 = "new"\n', "pin the model", key)


def verify_commit(repo: GitRepo, sha: str, allowed: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo.root), "-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={allowed}",
         "verify-commit", sha],
        capture_output=True, text=True,
    )


def refusal(given: Path) -> str:
    with pytest.raises(UsageError) as raised:
        load_signing_key(str(given), FLAG)
    message = str(raised.value)
    assert "\n" not in message and str(given) not in message
    return message


@pytest.fixture
def repo_with_spec(repo: GitRepo) -> GitRepo:
    repo.write("deployments/model.toml", 'sha256 = "old"\n')
    repo.commit("the model")
    return repo


def test_a_commit_written_with_a_key_verifies_with_git_and_the_agents_verifier(
    repo_with_spec: GitRepo, tmp_path: Path
) -> None:
    key = make_key(tmp_path / "agent-key")
    sha = pin_commit(repo_with_spec, tmp_path, load_signing_key(str(key), FLAG))
    allowed = allowed_signers(tmp_path / "allowed_signers", key)
    verified = verify_commit(repo_with_spec, sha, allowed)
    assert verified.returncode == 0, verified.stderr
    assert 'Good "git" signature for agent-key@example.invalid' in verified.stderr
    assert CommitVerifier(allowed).verify(repo_with_spec.root / ".git", sha).verdict is Verdict.VALID
    assert repo_with_spec.git("show", f"{sha}:deployments/model.toml") == 'sha256 = "new"'


def test_a_commit_signed_by_a_key_the_file_does_not_list_is_untrusted(
    repo_with_spec: GitRepo, tmp_path: Path
) -> None:
    key, other = make_key(tmp_path / "agent-key"), make_key(tmp_path / "someone-else")
    sha = pin_commit(repo_with_spec, tmp_path, load_signing_key(str(key), FLAG))
    allowed = allowed_signers(tmp_path / "allowed_signers", other)
    assert CommitVerifier(allowed).verify(repo_with_spec.root / ".git", sha).verdict is Verdict.UNTRUSTED


def test_without_a_key_the_commit_is_unsigned_as_before(repo_with_spec: GitRepo, tmp_path: Path) -> None:
    key = make_key(tmp_path / "agent-key")
    sha = pin_commit(repo_with_spec, tmp_path, None)
    assert "gpgsig" not in repo_with_spec.git("cat-file", "commit", sha)
    allowed = allowed_signers(tmp_path / "allowed_signers", key)
    assert CommitVerifier(allowed).verify(repo_with_spec.root / ".git", sha).verdict is Verdict.UNSIGNED


def test_the_key_writes_no_git_config(repo_with_spec: GitRepo, tmp_path: Path) -> None:
    before = (repo_with_spec.root / ".git" / "config").read_text()
    pin_commit(repo_with_spec, tmp_path, load_signing_key(str(make_key(tmp_path / "agent-key")), FLAG))
    assert (repo_with_spec.root / ".git" / "config").read_text() == before


def test_a_missing_key_file_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    assert refusal(tmp_path / "absent") == "--signing-key: cannot read the key file (No such file or directory)"


def test_a_directory_is_not_a_key(tmp_path: Path) -> None:
    assert refusal(tmp_path) == "--signing-key: the key is not a regular file"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_key_others_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    key = make_key(tmp_path / "agent-key")
    key.chmod(mode)
    assert refusal(key) == (
        f"--signing-key: the key file can be read by others (mode {mode:04o}); chmod 600 it "
        "(ssh-keygen refuses such a key)"
    )


def test_a_file_that_is_not_a_key_is_refused_with_ssh_keygens_reason(tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.write_text("not a key\n")
    junk.chmod(0o600)
    # ssh-keygen's own words vary by OpenSSH build ("invalid format", "error in libcrypto").
    message = refusal(junk)
    assert message.startswith("--signing-key: not an SSH private key ssh-keygen can read (") and message[-1] == ")"
    assert message != "--signing-key: not an SSH private key ssh-keygen can read ()"


def test_a_public_key_is_not_a_private_key(tmp_path: Path) -> None:
    public = make_key(tmp_path / "agent-key").with_suffix(".pub")
    public.chmod(0o600)
    assert refusal(public).startswith("--signing-key: not an SSH private key ssh-keygen can read (")


def test_a_key_with_a_passphrase_is_refused_the_agent_signs_unattended(tmp_path: Path) -> None:
    key = tmp_path / "locked-key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "hunter22", "-f", str(key)], check=True)
    assert refusal(key) == (
        "--signing-key: the key has a passphrase; the agent signs unattended, give a key without one"
    )


def test_the_keys_path_is_masked_once_loaded(tmp_path: Path) -> None:
    key = make_key(tmp_path / "agent-key")
    load_signing_key(str(key), FLAG)
    assert str(key) not in redact(f"error: Couldn't load public key {key}: gone")


@pytest.mark.parametrize("command", [
    ["automation", "run", "--repo", "{repo}", "--state-dir", "{state}"],
    ["run", "--repo", "{repo}", "--state-dir", "{state}"],
])
def test_both_commands_refuse_a_bad_key_with_one_line_before_anything_starts(
    repo_with_spec: GitRepo, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    key = make_key(tmp_path / "agent-key")
    key.chmod(0o644)
    argv = [part.format(repo=repo_with_spec.root, state=tmp_path / "state") for part in command]
    assert main([*argv, "--signing-key", str(key)]) == 2
    err = capsys.readouterr().err
    assert err == f"gitops {command[0]}: --signing-key: the key file can be read by others (mode 0644); chmod 600 " \
                  "it (ssh-keygen refuses such a key)\n"
    assert not (tmp_path / "state").exists()  # nothing started: no state dir made


def test_allowed_by_finds_the_key_among_principals_and_options(tmp_path: Path) -> None:
    key, other = make_key(tmp_path / "agent-key"), make_key(tmp_path / "someone-else")
    signing = load_signing_key(str(key), FLAG)
    listed = tmp_path / "listed"
    listed.write_text(
        "# who may sign\n"
        f"ops@example.invalid,bot@example.invalid namespaces=\"git\" {key.with_suffix('.pub').read_text()}"
    )
    assert allowed_by(signing, listed)
    assert not allowed_by(signing, allowed_signers(tmp_path / "others", other))
    assert not allowed_by(signing, tmp_path / "absent")


def test_an_agent_that_signs_and_verifies_warns_when_its_key_is_not_allowed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from gitops.commands.run import _warn_unlisted_signing_key

    key, other = make_key(tmp_path / "agent-key"), make_key(tmp_path / "someone-else")
    signing = load_signing_key(str(key), FLAG)
    unlisted = allowed_signers(tmp_path / "others", other)
    with caplog.at_level(logging.WARNING, logger="gitops.run"):
        _warn_unlisted_signing_key(argparse.Namespace(signing=signing, verify_commits=True,
                                                      allowed_signers=str(unlisted)))
        _warn_unlisted_signing_key(argparse.Namespace(
            signing=signing, verify_commits=True, allowed_signers=str(allowed_signers(tmp_path / "both", key))))
        _warn_unlisted_signing_key(argparse.Namespace(signing=signing, verify_commits=False, allowed_signers=None))
    assert [record.getMessage() for record in caplog.records] == [
        "gitops: the --signing-key's public key is not in --allowed-signers: --verify-commits will refuse the "
        "commits artifact automation pushes (add the key to the file)"
    ]
