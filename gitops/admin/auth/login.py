"""The status page's sign-in: OIDC authorization code with PKCE, and its sessions.

Pure (a clock is given). `begin` makes the `state` and the PKCE code
verifier of one sign-in (S256 challenge); `finish` takes them back once,
within 10 minutes. `open` makes a session for the principal the issuer's
ID token names: a random id (the `gitops_session` cookie: HttpOnly,
SameSite=Lax so that the issuer's redirect back carries it, Secure over
https) and a CSRF token the page sends back
in `X-CSRF-Token` on every POST. A session ends at the token's `exp` or
after 8 hours, whichever is first. Bounded: 256 sign-ins pending, 1,024
sessions (the oldest go first). Must not: hold a token (the ID token is
verified and dropped; only its principal stays).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from gitops.admin.auth.roles import Principal

__all__ = ["Logins", "Session", "Pending", "COOKIE", "CSRF_HEADER", "challenge_of"]

COOKIE = "gitops_session"
CSRF_HEADER = "x-csrf-token"
PENDING_TTL_S = 600.0
SESSION_MAX_S = 8 * 3600.0


@dataclass(frozen=True)
class Pending:
    verifier: str
    redirect_uri: str
    started: float


@dataclass(frozen=True)
class Session:
    id: str
    principal: Principal
    csrf: str
    expires_at: float

    def csrf_matches(self, given: str | None) -> bool:
        return hmac.compare_digest(self.csrf.encode(), (given or "").encode())


def challenge_of(verifier: str) -> str:
    """PKCE's S256: base64url(SHA-256(verifier)) without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


class Logins:
    def __init__(self, clock: Callable[[], float] = time.time, max_pending: int = 256, max_sessions: int = 1024) -> None:
        self._clock = clock
        self._pending: OrderedDict[str, Pending] = OrderedDict()
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._max_pending = max_pending
        self._max_sessions = max_sessions

    def begin(self, redirect_uri: str) -> tuple[str, str]:
        """A new sign-in: its `state` and its PKCE code verifier."""
        state, verifier = secrets.token_urlsafe(24), secrets.token_urlsafe(48)
        self._pending[state] = Pending(verifier, redirect_uri, self._clock())
        while len(self._pending) > self._max_pending:
            self._pending.popitem(last=False)
        return state, verifier

    def finish(self, state: str) -> Pending | None:
        """The sign-in `state` names, once, if not older than 10 minutes."""
        found = self._pending.pop(state, None)
        if found is None or self._clock() - found.started > PENDING_TTL_S:
            return None
        return found

    def open(self, principal: Principal, token_expires_at: float) -> Session:
        now = self._clock()
        session = Session(secrets.token_urlsafe(32), principal, secrets.token_urlsafe(24),
                          min(token_expires_at, now + SESSION_MAX_S))
        self._sessions[session.id] = session
        while len(self._sessions) > self._max_sessions:
            self._sessions.popitem(last=False)
        return session

    def session(self, session_id: str | None) -> Session | None:
        found = self._sessions.get(session_id or "")
        if found is not None and self._clock() >= found.expires_at:
            del self._sessions[found.id]
            return None
        return found

    def close(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
