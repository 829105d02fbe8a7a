"""Commit signature verdicts from git's answers (issue 11, commit signatures)."""

from __future__ import annotations

from gitops.sources.verifying import SignatureKind, Verdict, Verification, classify, signature_kind


def commit_with(signature_first_line: str) -> str:
    return f"tree abc\nauthor a <a@x> 1 +0000\ngpgsig {signature_first_line}\n U1NIU0lH\n -----END-----\n\nmsg\n"


SSH_SIGNED = commit_with("-----BEGIN SSH SIGNATURE-----")
GPG_SIGNED = commit_with("-----BEGIN PGP SIGNATURE-----")
UNSIGNED = "tree abc\nauthor a <a@x> 1 +0000\n\ngpgsig -----BEGIN SSH SIGNATURE----- in the message is not a header\n"


def test_a_signature_header_is_found_only_in_the_header() -> None:
    assert signature_kind(SSH_SIGNED) is SignatureKind.SSH
    assert signature_kind(UNSIGNED) is None


def test_a_signature_is_told_apart_by_its_armor() -> None:
    assert signature_kind(GPG_SIGNED) is SignatureKind.GPG
    assert signature_kind(commit_with("-----BEGIN SIGNED MESSAGE-----")) is SignatureKind.X509
    assert signature_kind(commit_with("something else")) is SignatureKind.UNKNOWN


def test_a_sha256_repositorys_signature_header_counts_too() -> None:
    assert signature_kind(SSH_SIGNED.replace("gpgsig ", "gpgsig-sha256 ")) is SignatureKind.SSH


def test_an_unsigned_commit_is_unsigned_whatever_git_says() -> None:
    assert classify(None, 1, "error: no signature found").verdict is Verdict.UNSIGNED


def test_an_ssh_signed_commit_git_accepts_is_valid() -> None:
    assert classify(SignatureKind.SSH, 0, 'Good "git" signature for ops@x').ok


def test_an_ssh_signed_commit_git_refuses_is_untrusted_with_gits_last_line() -> None:
    verification = classify(SignatureKind.SSH, 1, "Could not verify signature.\nNo principal matched.\n")
    assert verification == Verification(Verdict.UNTRUSTED, "No principal matched.")


def test_a_gpg_signature_is_untrusted_even_when_git_accepts_it() -> None:
    verification = classify(SignatureKind.GPG, 0, 'gpg: Good signature from "Ops"')
    assert verification.verdict is Verdict.UNTRUSTED
    assert verification.message("0123456789") == (
        "commit 0123456 has a signature the allowed signers do not accept: it is a GPG (OpenPGP) signature; "
        "--verify-commits checks only SSH signatures against --allowed-signers"
    )
