"""Who may use the agent's admin API: bearer token, Host allow-list, Origin check.

Pure: `check` is a function of the policy and one request's method, path and
headers, and answers with the `Refusal` to send or None. The admin server
(`gitops.admin.api`) applies it to every request before any route runs.

- Token: with one configured, every path but the open ones (`/metrics`,
  `/healthz`, and `/hooks/git`, which has its own HMAC signature) needs
  `Authorization: Bearer TOKEN`, compared in constant time.
- Host: against DNS rebinding, a request's `Host` must name an allowed host
  (loopback names, the bound address, `--admin-allowed-hosts`; `*` allows any).
- Origin: a POST from a browser page of another origin is refused (CSRF);
  a POST without `Origin` (a command-line client) passes. The admin
  listener's own origin is the scheme, host and port the request was sent
  to: an `Origin` passes only with `http` or `https`, the `Host` header's
  port (a scheme's default port when `Host` names none) and the `Host`
  header's name or another allowed name. A page on another port of the
  same host (an app the proxy serves on :8000) is another origin.
Must not: do I/O beyond reading the token file in `read_token`.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping
from urllib.parse import urlsplit

from gitops.errors import UserError

__all__ = ["AccessPolicy", "Refusal", "check", "is_loopback", "read_token", "OPEN_PATHS"]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})
OPEN_PATHS = frozenset({"/metrics", "/healthz", "/hooks/git"})
ANY_HOST = "*"
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class AccessPolicy:
    token: bytes | None
    hosts: frozenset[str]

    @classmethod
    def build(cls, token: bytes | None, bound_host: str, extra_hosts: Iterable[str] = ()) -> AccessPolicy:
        """Loopback names, the bound address unless a wildcard, and `extra_hosts`."""
        hosts = set(LOOPBACK_NAMES) | {_bare(host) for host in extra_hosts if host.strip()}
        if bound_host not in _WILDCARDS:
            hosts.add(_bare(bound_host))
        return cls(token, frozenset(hosts))


def check(policy: AccessPolicy, method: str, path: str, headers: Mapping[str, str]) -> Refusal | None:
    """The refusal for this request, or None when it may proceed."""
    if path == "/hooks/git":
        return None  # a forge's push names whatever host it was given; the HMAC signature guards it
    host = headers.get("host")
    if ANY_HOST not in policy.hosts and (host is None or _host_name(host) not in policy.hosts):
        return Refusal(403, f"Host {host!r} is not allowed (add it with --admin-allowed-hosts)")
    if method == "POST" and not _origin_allowed(headers.get("origin"), host, policy.hosts):
        return Refusal(403, f"cross-origin POST from {headers.get('origin')!r} refused")
    if policy.token is not None and path not in OPEN_PATHS and not _bearer_matches(policy.token, headers.get("authorization")):
        return Refusal(401, "missing or wrong bearer token (gitops: --token-file or GITOPS_TOKEN)",
                       (("www-authenticate", "Bearer"),))
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


def _bearer_matches(expected: bytes, header: str | None) -> bool:
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    # Digests first: equal lengths, so the comparison leaks nothing, not even the length.
    return hmac.compare_digest(hashlib.sha256(expected).digest(), hashlib.sha256(given.strip().encode()).digest())


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
