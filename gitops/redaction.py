"""Secrets kept out of everything the agent shows: status, history, logs, errors.

Owns the one redaction every surface applies (`redact`): the userinfo of
any URL in a text is stripped (`https://user:TOKEN@host/x.git` becomes
`https://host/x.git`) and every secret registered at start-up (tokens read
from files, every part of a URL's userinfo: `register_url_credentials`) is
masked as `***`; a decrypted secret value in every form it may take in
text (`register_secret_value`: repr, base64, percent-encoding ...,
`vocabulary.replicas.secret_forms`). Passwords and tokens are masked wherever they appear; a
URL's user name only where it stands as a word of its own: it is the token
in `https://TOKEN@host`, but a user `deploy` must not mask the word in
`deployments`. Also owns splitting a repository URL into the URL git is
given and the credentials it is not (`split_credentials`), which refuses
a password in an ssh URL: ssh takes no password from a URL, so it would
only reach command lines. Must not: read files, or know which surface
calls it.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

from vocabulary.replicas.secret_forms import secret_forms

__all__ = [
    "Credentials",
    "MASK",
    "SshPasswordError",
    "redact",
    "register_secret",
    "register_secret_value",
    "register_url_credentials",
    "split_credentials",
]

MASK = "***"
# scheme://userinfo@ — the userinfo is everything up to the last @ before the host.
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/?#\s@]+@)+")
_MIN_SECRET = 4  # shorter "secrets" would mask ordinary words
_SSH_SCHEMES = frozenset({"ssh", "git+ssh", "ssh+git"})
# git's scp-like form with a password: `user:password@host:path`.
_SCP_USERINFO = re.compile(r"^(?P<userinfo>[^/@]+)@[^/@:]+:(?!//)")

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()  # masked wherever they appear
_names: frozenset[str] = frozenset()  # masked as whole words
_names_pattern: re.Pattern[str] | None = None


@dataclass(frozen=True)
class Credentials:
    """The user and password a repository URL carried (never shown, never in argv)."""

    username: str
    password: str


class SshPasswordError(ValueError):
    """An ssh URL carried a password; the message says where ssh's secrets go instead."""


def register_secret(secret: str | bytes, whole_word: bool = False) -> None:
    """Mask `secret` (and its percent-decoded form) in everything `redact` sees from now on.

    `whole_word`: only where it is not part of a longer word (for user names).
    """
    global _secrets, _names, _names_pattern
    text = secret.decode(errors="replace") if isinstance(secret, bytes) else secret
    forms = {form.strip() for form in (text, unquote(text))}
    forms = {form for form in forms if len(form) >= _MIN_SECRET}
    if not forms:
        return
    with _lock:
        if whole_word:
            _names = _names | forms
            # Longest first, so a name containing another is masked whole.
            alternatives = "|".join(re.escape(name) for name in sorted(_names, key=len, reverse=True))
            _names_pattern = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)")
        else:
            _secrets = tuple(sorted(set(_secrets) | forms, key=len, reverse=True))


def register_secret_value(value: bytes) -> None:
    """Mask a decrypted value, and each form of it (`vocabulary.replicas.secret_forms`), from now on."""
    global _secrets
    forms = secret_forms(value)
    if not forms:
        return
    with _lock:
        _secrets = tuple(sorted(set(_secrets) | forms, key=len, reverse=True))


def register_url_credentials(url: str) -> None:
    """Mask every part of `url`'s userinfo: its password anywhere, its user name as a word."""
    userinfo = _userinfo(url)
    if not userinfo:
        return
    username, _, password = userinfo.partition(":")
    if password:
        register_secret(password)
    if username:
        register_secret(username, whole_word=True)


def redact(text: str) -> str:
    """`text` with URL userinfo stripped and every registered secret masked."""
    text = _USERINFO.sub(lambda match: match.group("scheme"), text)
    for secret in _secrets:
        text = text.replace(secret, MASK)
    if _names_pattern is not None:
        text = _names_pattern.sub(MASK, text)
    return text


def split_credentials(url: str) -> tuple[str, Credentials | None]:
    """An http(s) URL without its userinfo, and the credentials it held.

    Other URLs (ssh's `git@host`, file://, paths) are returned unchanged:
    their user is not a secret and ssh needs it. An ssh URL with a password
    (`ssh://user:PASS@host/x`, `user:PASS@host:x`) raises `SshPasswordError`.
    """
    parts = urlsplit(url)
    if _is_ssh(url, parts.scheme) and ":" in _userinfo(url):
        raise SshPasswordError(
            f"{_without_userinfo(url)}: a password in an ssh URL would reach ssh's and git's command lines, and ssh "
            "does not read it; keep the user name only, and give ssh the key: load it into ssh-agent "
            "(SSH_AUTH_SOCK), or pick a deploy key with GIT_SSH_COMMAND='ssh -i KEY -o IdentitiesOnly=yes'"
        )
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    clean = urlunsplit(parts._replace(netloc=host))
    return clean, Credentials(unquote(username), unquote(password))


def _userinfo(url: str) -> str:
    """The userinfo of a URL or of git's scp-like `user@host:path` ('' when none)."""
    if "://" in url:
        netloc = urlsplit(url).netloc
        return netloc.rpartition("@")[0]
    scp = _SCP_USERINFO.match(url)
    return scp.group("userinfo") if scp else ""


def _without_userinfo(url: str) -> str:
    if "://" in url:
        return redact(url)
    return url.partition("@")[2] if _SCP_USERINFO.match(url) else url


def _is_ssh(url: str, scheme: str) -> bool:
    return scheme.lower() in _SSH_SCHEMES if "://" in url else bool(_SCP_USERINFO.match(url))
