"""Commit signatures: is a commit signed by a key the operator trusts?

Owns `gitops run --verify-commits --allowed-signers FILE`: git's own
verification (`git verify-commit`), with `gpg.format=ssh` and
`gpg.ssh.allowedSignersFile` given per call with `-c` (no config file is
ever written), and the verdict in plain values: `valid`, `unsigned` (no
signature header) or `untrusted` (a signature git does not accept: an
unknown key, a bad signature, a signer the allowed-signers file does not
name), with git's reason. `classify` is pure; `CommitVerifier` runs git and
remembers verdicts per commit (a commit never changes). Must not: decide
what happens to an unverified commit (the agent does not apply it).
"""

from __future__ import annotations

import enum
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gitops.errors import UserError

__all__ = ["CommitVerifier", "Verdict", "Verification", "classify", "has_signature"]


class Verdict(str, enum.Enum):
    VALID = "valid"
    UNSIGNED = "unsigned"
    UNTRUSTED = "untrusted"


@dataclass(frozen=True)
class Verification:
    verdict: Verdict
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.VALID

    def message(self, sha: str) -> str:
        """The one line status and history show for a commit that is not applied."""
        if self.verdict is Verdict.UNSIGNED:
            return f"commit {sha[:7]} is not signed; --verify-commits applies only signed commits"
        return f"commit {sha[:7]} has a signature the allowed signers do not accept: {self.reason}"


def has_signature(raw_commit: str) -> bool:
    """Whether a commit object (`git cat-file commit`) carries a signature header."""
    header = raw_commit.split("\n\n", 1)[0]
    return any(line.startswith(("gpgsig ", "gpgsig-sha256 ")) for line in header.splitlines())


def classify(signed: bool, returncode: int, stderr: str) -> Verification:
    """The verdict from whether the commit is signed and how `git verify-commit` ended."""
    if not signed:
        return Verification(Verdict.UNSIGNED, "no signature")
    if returncode == 0:
        return Verification(Verdict.VALID)
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return Verification(Verdict.UNTRUSTED, lines[-1] if lines else f"git verify-commit exited {returncode}")


class CommitVerifier:
    """Verifies commits of one git dir against one allowed-signers file."""

    def __init__(self, allowed_signers: Path) -> None:
        if not allowed_signers.is_file():
            raise UserError(f"--allowed-signers {allowed_signers}: no such file")
        self._allowed = allowed_signers.absolute()
        self._known: dict[str, Verification] = {}

    def verify(self, git_dir: Path, sha: str) -> Verification:
        if sha not in self._known:
            self._known[sha] = self._run(git_dir, sha)
        return self._known[sha]

    def _run(self, git_dir: Path, sha: str) -> Verification:
        raw = _git(git_dir, "cat-file", "commit", sha)
        done = _git(
            git_dir, "-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={self._allowed}",
            "verify-commit", sha,
        )
        return classify(has_signature(raw.stdout), done.returncode, done.stderr)


def _git(git_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True, check=False)
