"""The status page's CSRF tokens: bound to the principal, checked on a browser's every POST.

Pure but for the key (random per agent start, never written anywhere).
`CsrfKey.token(principal)` is `ISSUED.MAC`: the time it was made and an
HMAC-SHA256 over that time and the principal (its name, role, scope and how
it was known); `valid` takes it back only for the same principal and within
8 hours, compared in constant time. The page gets its token in its markup
(and `GET /session` answers it), and sends it in `X-CSRF-Token` with every
action. A sign-in session (`gitops.admin.auth.login`) has its own token, checked
by `gitops.admin.auth.access.authenticate`; this one covers every other browser:
one behind a reverse proxy that adds the bearer header, and the loopback
agent without credentials. `from_browser` says whether a request came from a
browser (it carries `Origin`, `Sec-Fetch-*` or a cookie): the command-line
client sends none of them, and needs no token.
Must not: hold or see a bearer token (a principal is a name and a role).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Callable, Mapping

from gitops.admin.auth.roles import Principal

__all__ = ["CsrfKey", "from_browser", "CSRF_LIFETIME_S"]

CSRF_LIFETIME_S = 8 * 3600.0
_BROWSER_HEADERS = ("origin", "sec-fetch-site", "sec-fetch-mode", "cookie")


class CsrfKey:
    def __init__(self, key: bytes | None = None, clock: Callable[[], float] = time.time) -> None:
        self._key = key if key is not None else secrets.token_bytes(32)
        self._clock = clock

    def token(self, principal: Principal) -> str:
        issued = str(int(self._clock()))
        return f"{issued}.{self._mac(issued, principal)}"

    def valid(self, principal: Principal, given: str | None) -> bool:
        issued, sep, mac = (given or "").partition(".")
        if not sep or not issued.isdigit() or len(issued) > 12:
            return False
        if not 0 <= self._clock() - int(issued) <= CSRF_LIFETIME_S:
            return False
        return hmac.compare_digest(mac.encode(), self._mac(issued, principal).encode())

    def _mac(self, issued: str, principal: Principal) -> str:
        bound = "\0".join([issued, principal.via, principal.name, principal.role.label, str(principal.scope or "")])
        return hmac.new(self._key, bound.encode(), hashlib.sha256).hexdigest()


def from_browser(headers: Mapping[str, str]) -> bool:
    """Whether a request carries what only browsers send (the CLI sends none of it)."""
    return any(name in headers for name in _BROWSER_HEADERS)
