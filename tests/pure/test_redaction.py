"""The one redaction every surface applies (issue 11 row 2; issue 27 rows 5 and 7)."""

from __future__ import annotations

import pytest

from gitops.redaction import (
    MASK,
    Credentials,
    SshPasswordError,
    redact,
    register_secret,
    register_url_credentials,
    split_credentials,
)


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


def test_row5_every_part_of_a_url_s_userinfo_is_registered() -> None:
    register_url_credentials("https://ghp-user-token-41aa:x-oauth-basic@git.example/specs.git")
    assert redact("user ghp-user-token-41aa, password x-oauth-basic") == f"user {MASK}, password {MASK}"


def test_row5_a_token_alone_in_the_url_is_masked() -> None:
    register_url_credentials("https://tok-only-9f3e2d@git.example/specs.git")
    assert redact("Password for 'https://git.example' as tok-only-9f3e2d") == f"Password for 'https://git.example' as {MASK}"


def test_row5_a_user_name_is_masked_as_a_word_only() -> None:
    register_url_credentials("https://builder:pw-5b1d0c@git.example/specs.git")
    assert redact("builder said: path buildermost/x, builders") == f"{MASK} said: path buildermost/x, builders"
    assert redact("pw-5b1d0c") == MASK


def test_row7_a_password_in_an_ssh_url_is_refused_without_showing_it() -> None:
    for url in ("ssh://git:ssh-pass-77c1@git.example/specs.git", "git:ssh-pass-77c1@git.example:specs.git",
                "git+ssh://git:ssh-pass-77c1@git.example/specs.git"):
        with pytest.raises(SshPasswordError) as raised:
            split_credentials(url)
        assert "ssh-pass-77c1" not in str(raised.value)
        assert "ssh-agent" in str(raised.value) and "GIT_SSH_COMMAND" in str(raised.value)


def test_row7_an_ssh_password_is_registered_for_redaction() -> None:
    register_url_credentials("ssh://git:ssh-pass-2e90@git.example/specs.git")
    assert redact("ssh-pass-2e90") == MASK
