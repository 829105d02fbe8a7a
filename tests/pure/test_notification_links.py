"""`--public-url` and `--commit-url-template` (`gitops.notifications.links`)."""

from __future__ import annotations

import pytest

from gitops.notifications.links import Links, check_commit_url_template, check_public_url


def test_a_commit_url_fills_the_template() -> None:
    links = Links(commit_url_template="https://github.com/you/specs/commit/{sha}")
    assert links.commit_url("abc") == "https://github.com/you/specs/commit/abc"


def test_a_history_url_points_at_the_commits_row_on_the_status_page() -> None:
    links = Links(public_url=check_public_url("https://gitops.example.com/"))
    assert links.history_url("abc") == "https://gitops.example.com/#commit-abc"


def test_without_settings_there_are_no_links() -> None:
    assert (Links().commit_url("abc"), Links().history_url("abc")) == (None, None)


@pytest.mark.parametrize(
    "template, problem",
    [
        ("https://github.com/you/specs/commit/", "must contain {sha}"),
        ("ftp://forge/{sha}", "http:// or https://"),
        ("javascript:alert(1)//{sha}", "http:// or https://"),
        ("https:///{sha}", "with a host"),
    ],
)
def test_a_bad_commit_url_template_is_refused(template: str, problem: str) -> None:
    with pytest.raises(ValueError, match="--commit-url-template") as raised:
        check_commit_url_template(template)
    assert problem in str(raised.value)


def test_a_public_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="--public-url must be an http:// or https:// URL"):
        check_public_url("gitops.example.com")
