"""Commit signature verdicts from git's answers (issue 11, commit signatures)."""

from __future__ import annotations

from gitops.sources.verifying import Verdict, Verification, classify, has_signature

SIGNED = "tree abc\nauthor a <a@x> 1 +0000\ngpgsig -----BEGIN SSH SIGNATURE-----\n U1NIU0lH\n -----END SSH SIGNATURE-----\n\nmsg\n"
UNSIGNED = "tree abc\nauthor a <a@x> 1 +0000\n\ngpgsig in the message is not a header\n"


def test_a_signature_header_is_found_only_in_the_header() -> None:
    assert has_signature(SIGNED)
    assert not has_signature(UNSIGNED)


def test_an_unsigned_commit_is_unsigned_whatever_git_says() -> None:
    assert classify(False, 1, "error: no signature found").verdict is Verdict.UNSIGNED


def test_a_signed_commit_git_accepts_is_valid() -> None:
    assert classify(True, 0, 'Good "git" signature for ops@x').ok


def test_a_signed_commit_git_refuses_is_untrusted_with_gits_last_line() -> None:
    verification = classify(True, 1, "Could not verify signature.\nNo principal matched.\n")
    assert verification == Verification(Verdict.UNTRUSTED, "No principal matched.")
