"""Commit signatures: is a commit signed by a key the operator trusts?

Owns `gitops run --verify-commits --allowed-signers FILE`: git's own
verification (`git verify-commit`), with `gpg.format=ssh` and
`gpg.ssh.allowedSignersFile` given per call with `-c` (no config file is
ever written), and the verdict in plain values: `valid`, `unsigned` (no
signature header) or `untrusted` (a signature git does not accept: an
unknown key, a bad signature, a signer the allowed-signers file does not
name), with git's reason.

Only SSH signatures are verified. git picks the verifying program from the
signature itself, so it would check a GPG (OpenPGP) or X.509 signature
against the keyring of the user running the agent, which the allowed-signers
file does not govern: such a commit is `untrusted` from its header alone,
and git is never asked. `signature_kind` and `classify` are pure;
`CommitVerifier` runs git and remembers verdicts per commit (a commit never
changes). Must not: decide what happens to an unverified commit (the agent
does not apply it).
"""

from __future__ import annotations

import enum
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gitops.errors import UserError

__all__ = ["CommitVerifier", "SignatureKind", "Verdict", "Verification", "classify", "signature_kind"]


class Verdict(str, enum.Enum):
    VALID = "valid"
    UNSIGNED = "unsigned"
    UNTRUSTED = "untrusted"


class SignatureKind(str, enum.Enum):
    """What signed a commit, by the first line of its signature (as git tells them apart)."""

    SSH = "SSH"
    GPG = "GPG (OpenPGP)"
    X509 = "X.509"
    UNKNOWN = "unknown"


_ARMOR = {
    "-----BEGIN SSH SIGNATURE-----": SignatureKind.SSH,
    "-----BEGIN PGP SIGNATURE-----": SignatureKind.GPG,
    "-----BEGIN PGP MESSAGE-----": SignatureKind.GPG,
    "-----BEGIN SIGNED MESSAGE-----": SignatureKind.X509,
}


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


def signature_kind(raw_commit: str) -> SignatureKind | None:
    """What signed a commit object (`git cat-file commit`); None when its header has no signature."""
    header = raw_commit.split("\n\n", 1)[0]
    for line in header.splitlines():
        for prefix in ("gpgsig ", "gpgsig-sha256 "):
            if line.startswith(prefix):
                return _ARMOR.get(line.removeprefix(prefix).strip(), SignatureKind.UNKNOWN)
    return None


def classify(kind: SignatureKind | None, returncode: int, stderr: str) -> Verification:
    """The verdict from what signed the commit and how `git verify-commit` ended
    (the return code and stderr matter only for an SSH signature)."""
    if kind is None:
        return Verification(Verdict.UNSIGNED, "no signature")
    if kind is not SignatureKind.SSH:
        return Verification(
            Verdict.UNTRUSTED,
            f"it is a {kind.value} signature; --verify-commits checks only SSH signatures "
            "against --allowed-signers",
        )
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
        kind = signature_kind(_git(git_dir, "cat-file", "commit", sha).stdout)
        if kind is not SignatureKind.SSH:
            # Decided by the header: git would ask gpg and the agent user's keyring.
            return classify(kind, 1, "")
        done = _git(
            git_dir, "-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={self._allowed}",
            "verify-commit", sha,
        )
        return classify(kind, done.returncode, done.stderr)


def _git(git_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True, check=False)
