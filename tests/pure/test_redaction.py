"""The one redaction every surface applies (issue 11 row 2)."""

from __future__ import annotations

from gitops.redaction import MASK, Credentials, redact, register_secret, split_credentials


def test_userinfo_is_stripped_from_every_url_in_a_text() -> None:
    text = "fetch https://deploy:s3cr3t@git.example/specs.git failed; see http://tok@host/x"
    assert redact(text) == "fetch https://git.example/specs.git failed; see http://host/x"


def test_a_registered_secret_is_masked_wherever_it_appears() -> None:
    register_secret("registered-secret-91c2\n")
    assert redact("token registered-secret-91c2 refused") == f"token {MASK} refused"


def test_a_percent_encoded_secret_is_masked_in_both_forms() -> None:
    register_secret("pa%2Fss-7e1f")
    assert redact("pa/ss-7e1f and pa%2Fss-7e1f") == f"{MASK} and {MASK}"


def test_an_https_url_is_split_into_the_url_git_gets_and_its_credentials() -> None:
    assert split_credentials("https://deploy:pa%40ss@git.example:8443/specs.git") == (
        "https://git.example:8443/specs.git",
        Credentials("deploy", "pa@ss"),
    )


def test_an_ssh_url_keeps_its_user_and_has_no_credentials() -> None:
    assert split_credentials("ssh://git@git.example/specs.git") == ("ssh://git@git.example/specs.git", None)
    assert split_credentials("git@git.example:specs.git") == ("git@git.example:specs.git", None)
