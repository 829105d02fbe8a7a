"""Where an event points people: the forge's commit page and the status page's
history entry. Pure.

`--commit-url-template` (e.g. `https://github.com/you/specs/commit/{sha}`)
and `--public-url` (how people reach the agent's status page) are checked
here once, at start-up; the status page draws the same anchors
(`#commit-<sha>`) that `history_url` links to. Must not: do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["Links", "SHA_PLACEHOLDER", "check_commit_url_template", "check_public_url", "history_anchor"]

SHA_PLACEHOLDER = "{sha}"


def history_anchor(sha: str) -> str:
    """The id of a commit's row in the status page's history table."""
    return f"commit-{sha}"


def _check_http_url(flag: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{flag} must be an http:// or https:// URL with a host (got '{url}')")
    return url


def check_commit_url_template(template: str) -> str:
    if SHA_PLACEHOLDER not in template:
        raise ValueError(f"--commit-url-template must contain {SHA_PLACEHOLDER} (got '{template}')")
    _check_http_url("--commit-url-template", template.replace(SHA_PLACEHOLDER, "0"))
    return template


def check_public_url(url: str) -> str:
    return _check_http_url("--public-url", url).rstrip("/")


@dataclass(frozen=True)
class Links:
    """Both settings, already checked; either may be absent."""

    public_url: str | None = None
    commit_url_template: str | None = None

    def commit_url(self, sha: str) -> str | None:
        if self.commit_url_template is None:
            return None
        return self.commit_url_template.replace(SHA_PLACEHOLDER, sha)

    def history_url(self, sha: str) -> str | None:
        if self.public_url is None:
            return None
        return f"{self.public_url}/#{history_anchor(sha)}"
