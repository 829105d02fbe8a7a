"""Secrets kept out of everything the agent shows: status, history, logs, errors.

Owns the one redaction every surface applies (`redact`): the userinfo of
any URL in a text is stripped (`https://user:TOKEN@host/x.git` becomes
`https://host/x.git`) and every secret registered at start-up (tokens read
from files, a URL's password) is masked as `***`. Also owns splitting a
repository URL into the URL git is given and the credentials it is not
(`split_credentials`). Must not: read files, or know which surface calls it.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["Credentials", "MASK", "redact", "register_secret", "split_credentials"]

MASK = "***"
# scheme://userinfo@ — the userinfo is everything up to the last @ before the host.
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/?#\s@]+@)+")
_MIN_SECRET = 4  # shorter "secrets" would mask ordinary words

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Credentials:
    """The user and password a repository URL carried (never shown, never in argv)."""

    username: str
    password: str


def register_secret(secret: str | bytes) -> None:
    """Mask `secret` (and its percent-decoded form) in everything `redact` sees from now on."""
    global _secrets
    text = secret.decode(errors="replace") if isinstance(secret, bytes) else secret
    forms = {form.strip() for form in (text, unquote(text))}
    with _lock:
        known = set(_secrets) | {form for form in forms if len(form) >= _MIN_SECRET}
        # Longest first, so a secret containing another is masked whole.
        _secrets = tuple(sorted(known, key=len, reverse=True))


def redact(text: str) -> str:
    """`text` with URL userinfo stripped and every registered secret masked."""
    text = _USERINFO.sub(lambda match: match.group("scheme"), text)
    for secret in _secrets:
        text = text.replace(secret, MASK)
    return text


def split_credentials(url: str) -> tuple[str, Credentials | None]:
    """An http(s) URL without its userinfo, and the credentials it held.

    Other URLs (ssh's `git@host`, file://, paths) are returned unchanged:
    their user is not a secret and ssh needs it.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    clean = urlunsplit(parts._replace(netloc=host))
    return clean, Credentials(unquote(username), unquote(password))
