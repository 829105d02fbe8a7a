"""Who may use the agent's admin API: bearer tokens, Host allow-list, Origin check.

`check` is a function of the policy and one request's method, path and
headers, and answers with the `Refusal` to send or None; `authenticate`
finds who a request's bearer is (`gitops.admin.auth.roles.Principal`) or the 401
to send. The admin server (`gitops.admin.api`) applies both to every request
before any route runs, then `gitops.admin.auth.roles.refusal` with the route's row.

- Tokens: with any configured (`--admin-token-file`, one admin token;
  `--admin-tokens-file`, named tokens with roles, `gitops.admin.auth.tokens`; an
  OIDC issuer, `verifier`), every route the role table does not open needs
  `Authorization: Bearer TOKEN`, matched by its digest in constant time.
  Without any, every caller that passes the Host check is `anonymous`, admin.
- Host: against DNS rebinding, a request's `Host` must name an allowed host
  (loopback names, the bound address, `--admin-allowed-hosts`; `*` allows any).
- Origin: a POST from a browser page of another origin is refused (CSRF);
  a POST without `Origin` (a command-line client) passes. The admin
  listener's own origin is the scheme, host and port the request was sent
  to: an `Origin` passes only with `http` or `https`, the `Host` header's
  port (a scheme's default port when `Host` names none) and the `Host`
  header's name or another allowed name. A page on another port of the
  same host (an app the proxy serves on :8000) is another origin.
Must not: do I/O beyond reading the token file in `read_token` (the token
file's reload is `gitops.admin.auth.tokens`, the issuer's keys `verifier`'s).
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Iterable, Mapping
from urllib.parse import urlsplit

from gitops.admin.auth.login import COOKIE, CSRF_HEADER, Session
from gitops.admin.auth.roles import Principal, Role
from gitops.admin.auth.tokens import TokenTable
from gitops.errors import UserError

__all__ = ["AccessPolicy", "Refusal", "check", "authenticate", "is_loopback", "read_token",
           "ANONYMOUS", "BearerRefused"]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})
ANY_HOST = "*"
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str
    headers: tuple[tuple[str, str], ...] = ()


ANONYMOUS = Principal("anonymous", Role.ADMIN, via="loopback")  # no credentials configured at all


class BearerRefused(Exception):
    """A bearer a verifier refuses; the message says why, never the bearer."""


# An OIDC verifier (gitops.admin.auth.oidc): a JWT to its principal, or BearerRefused.
Verifier = Callable[[str], Awaitable[Principal]]


@dataclass(frozen=True)
class AccessPolicy:
    hosts: frozenset[str]
    tokens: tuple[Callable[[], TokenTable], ...] = ()
    environment: str | None = None
    verifier: Verifier | None = None
    sessions: Callable[[str | None], Session | None] | None = None  # the status page's sign-ins

    @classmethod
    def build(cls, token: bytes | None, bound_host: str, extra_hosts: Iterable[str] = (), *,
              tokens: Callable[[], TokenTable] | None = None, environment: str | None = None,
              verifier: Verifier | None = None,
              sessions: Callable[[str | None], Session | None] | None = None) -> AccessPolicy:
        """Loopback names, the bound address unless a wildcard, and `extra_hosts`; `token`
        is the old single admin token, `tokens` a token file's table, `verifier` OIDC."""
        hosts = set(LOOPBACK_NAMES) | {_bare(host) for host in extra_hosts if host.strip()}
        if bound_host not in _WILDCARDS:
            hosts.add(_bare(bound_host))
        sources: list[Callable[[], TokenTable]] = []
        if token is not None:
            single = TokenTable.single(token, legacy_name(token))
            sources.append(lambda: single)
        if tokens is not None:
            sources.append(tokens)
        return cls(frozenset(hosts), tuple(sources), environment, verifier, sessions)

    @property
    def guarded(self) -> bool:
        """Whether any credential is configured (else every caller is `ANONYMOUS`)."""
        return bool(self.tokens) or self.verifier is not None or self.sessions is not None


def legacy_name(token: bytes) -> str:
    """The old single token's name in history: its fingerprint, never its value."""
    return f"admin token sha256:{hashlib.sha256(token).hexdigest()[:12]}"


async def authenticate(policy: AccessPolicy, headers: Mapping[str, str], method: str = "GET") -> Principal | Refusal:
    """Who the request's bearer (or its sign-in session's cookie) is, or the 401 (403) to send.
    A POST on a session must carry the session's CSRF token in `X-CSRF-Token`."""
    if not policy.guarded:
        return ANONYMOUS
    scheme, _, given = (headers.get("authorization") or "").partition(" ")
    given = given.strip()
    if not given and policy.sessions is not None:
        session = policy.sessions(_cookie(headers.get("cookie"), COOKIE))
        if session is not None:
            if method not in ("GET", "HEAD") and not session.csrf_matches(headers.get(CSRF_HEADER)):
                return Refusal(403, "missing or wrong X-CSRF-Token for this session")
            return session.principal
    if scheme.lower() == "bearer" and given:
        for table in policy.tokens:
            found = table().find(given)
            if found is not None:
                return found
        if policy.verifier is not None and given.count(".") == 2:
            try:
                return await policy.verifier(given)
            except BearerRefused as error:
                return _unauthorized(f"bearer token refused: {error}")
    return _unauthorized("missing or wrong bearer token (gitops: --token-file or GITOPS_TOKEN)")


def _cookie(header: str | None, name: str) -> str | None:
    for part in (header or "").split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            return value
    return None


def _unauthorized(message: str) -> Refusal:
    return Refusal(401, message, (("www-authenticate", "Bearer"),))


def check(policy: AccessPolicy, method: str, path: str, headers: Mapping[str, str]) -> Refusal | None:
    """The Host and Origin refusal for this request, or None when it may go on to authentication."""
    if path == "/hooks/git":
        return None  # a forge's push names whatever host it was given; the HMAC signature guards it
    host = headers.get("host")
    if ANY_HOST not in policy.hosts and (host is None or _host_name(host) not in policy.hosts):
        return Refusal(403, f"Host {host!r} is not allowed (add it with --admin-allowed-hosts)")
    if method == "POST" and not _origin_allowed(headers.get("origin"), host, policy.hosts):
        return Refusal(403, f"cross-origin POST from {headers.get('origin')!r} refused")
    return None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(_bare(host)).is_loopback
    except ValueError:
        return False


def read_token(path: str | Path, flag: str) -> bytes:
    """The token file's content without surrounding whitespace; errors name the flag and file."""
    try:
        token = Path(path).read_bytes().strip()
    except OSError as error:
        raise UserError(f"{flag} {path}: {error.strerror}") from None
    if not token:
        raise UserError(f"{flag} {path}: the file is empty")
    return token


def _origin_allowed(origin: str | None, host: str | None, hosts: frozenset[str]) -> bool:
    """Whether `origin` is this listener's own: its scheme is http(s), its port the
    request's and its host the request's or another allowed name."""
    if origin is None:
        return True
    try:
        parts = urlsplit(origin.strip())
        name, port = parts.hostname, parts.port  # "null" (sandboxed pages, file://) has no host
    except ValueError:  # a port that is not a number
        return False
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not name:
        return False
    listener_port = _host_port(host or "") or _DEFAULT_PORTS[scheme]
    if (port or _DEFAULT_PORTS[scheme]) != listener_port:
        return False
    return name == _host_name(host or "") or name in hosts - {ANY_HOST}


def _host_port(value: str) -> int | None:
    """The port of a `Host` header, or None when it names none (or none that is a number)."""
    value = value.strip()
    tail = value.rpartition("]")[2] if value.startswith("[") else (value if value.count(":") == 1 else "")
    digits = tail.rpartition(":")[2] if ":" in tail else ""
    return int(digits) if digits.isdigit() else None


def _host_name(value: str) -> str:
    """`Host` header to host name: port and IPv6 brackets dropped, lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


def _bare(host: str) -> str:
    return host.strip().strip("[]").lower()
