"""Single sign-on on the admin API: OIDC bearer tokens (JWTs) from one issuer.

Owns verifying a JWT against the issuer's published keys and mapping its
groups to a role (`gitops.admin.auth.roles.Role`). The issuer, the audience, the
groups claim and the group → role map come from `gitops run`'s flags,
never from the watched repository.

- Keys: the issuer's discovery document (`ISSUER/.well-known/openid-configuration`)
  names its `jwks_uri`; both are fetched over HTTPS (plain HTTP only to a
  loopback issuer, for tests and local set-ups), within 5 s and 256 KiB,
  and cached. A token signed with a key id the cache lacks makes one
  refetch (key rotation), at most once every `refetch_every_s`, so a flood
  of made-up key ids cannot turn into a flood of fetches; the cache is also
  refreshed after `max_age_s`.
- Checks (PyJWT's, with our pins): the header's `alg` must be RS256 or
  ES256 and match the key's type (`none`, HS*: refused before any key is
  used, so an HMAC "signed" with the public key cannot pass); signature,
  `iss`, `aud`, `exp` and `nbf` (all required but `nbf`) with 30 s of
  clock skew; a token at most 16 KiB.
- Role: the highest role any of the token's groups maps to; none, refused.
  The principal is named by the token's `sub` (history records it).
Must not: log or keep a token; accept keys from anywhere but the issuer.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

import httpx
import jwt

from gitops.admin.auth.access import BearerRefused
from gitops.admin.auth.login import Logins
from gitops.admin.auth.roles import Principal, Role
from gitops.errors import UserError

__all__ = ["OidcSettings", "OidcVerifier", "ALGORITHMS", "parse_group_roles", "check_issuer_url"]

ALGORITHMS = ("RS256", "ES256")
_KEY_TYPES = {"RS256": "RSA", "ES256": "EC"}
MAX_TOKEN_CHARS = 16 * 1024
MAX_DOCUMENT_BYTES = 256 * 1024
MAX_KEYS = 100
FETCH_TIMEOUT_S = 5.0
LEEWAY_S = 30


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    audience: str
    group_roles: Mapping[str, Role]
    groups_claim: str = "groups"
    client_id: str | None = None  # for the status page's login (authorization code + PKCE)
    refetch_every_s: float = 60.0
    max_age_s: float = 3600.0


def check_issuer_url(url: str, flag: str = "--oidc-issuer") -> str:
    """`url` without a trailing slash, if HTTPS or HTTP to a loopback host; `UserError` otherwise."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme == "https" and host:
        return url.rstrip("/")
    if parts.scheme == "http" and _loopback(host):
        return url.rstrip("/")
    raise UserError(f"{flag} {url}: must be an https:// URL (http:// only to a loopback address)")


def parse_group_roles(pairs: list[str]) -> dict[str, Role]:
    """`GROUP=ROLE` flags to the map; `UserError` naming the bad one."""
    found: dict[str, Role] = {}
    for pair in pairs:
        group, sep, role = pair.rpartition("=")
        if not sep or not group:
            raise UserError(f"--oidc-group-role {pair!r}: expected GROUP=ROLE")
        try:
            found[group] = Role.parse(role)
        except ValueError as error:
            raise UserError(f"--oidc-group-role {pair!r}: {error}") from None
    return found


@dataclass
class _Keys:
    by_kid: dict[str, jwt.PyJWK] = field(default_factory=dict)
    fetched_at: float = float("-inf")
    jwks_uri: str | None = None


class OidcVerifier:
    """`await verifier(token)`: the token's principal, or `BearerRefused` saying why."""

    def __init__(self, settings: OidcSettings, *, client: httpx.AsyncClient | None = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self._client = client
        self._clock = clock
        self._wall = wall
        self._keys = _Keys()
        self._lock = asyncio.Lock()
        self.fetches = 0  # how many times the keys were fetched (tests read it)
        self.logins = Logins(wall)  # the status page's sign-ins and sessions, with --oidc-client-id
        self.discovery: dict[str, Any] = {}

    async def __call__(self, token: str) -> Principal:
        return (await self.check(token))[0]

    async def check(self, token: str, audience: str | None = None) -> tuple[Principal, dict[str, Any]]:
        """The token's principal and its verified claims, or `BearerRefused`; `audience`
        instead of the settings' (an ID token's is the client id)."""
        if len(token) > MAX_TOKEN_CHARS:
            raise BearerRefused(f"longer than {MAX_TOKEN_CHARS} characters")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise BearerRefused("not a JWT") from None
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ALGORITHMS:
            raise BearerRefused(f"algorithm {str(alg)[:16]!r} is not allowed (only {', '.join(ALGORITHMS)})")
        key = await self._key(kid if isinstance(kid, str) else "")
        if key.key_type != _KEY_TYPES[alg]:
            raise BearerRefused(f"key {kid!r} is not a key for {alg}")
        try:
            claims = jwt.decode(
                token, key.key, algorithms=[alg], audience=audience or self.settings.audience, issuer=self.settings.issuer,
                leeway=LEEWAY_S, options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise BearerRefused("expired (exp)") from None
        except jwt.ImmatureSignatureError:
            raise BearerRefused("not valid yet (nbf)") from None
        except jwt.InvalidAudienceError:
            raise BearerRefused("wrong audience (aud)") from None
        except jwt.InvalidIssuerError:
            raise BearerRefused("wrong issuer (iss)") from None
        except jwt.PyJWTError as error:
            raise BearerRefused(type(error).__name__) from None
        return self.principal(claims), claims

    @property
    def client_id(self) -> str:
        return self.settings.client_id or ""

    def principal(self, claims: Mapping[str, Any]) -> Principal:
        """The role of the claims' groups (the highest), named by `sub`."""
        groups = claims.get(self.settings.groups_claim, [])
        if isinstance(groups, str):
            groups = [groups]
        roles = [self.settings.group_roles[g] for g in groups if isinstance(g, str) and g in self.settings.group_roles]
        subject = str(claims.get("sub", ""))[:128]
        if not roles:
            raise BearerRefused(f"no group of {subject!r} maps to a role (--oidc-group-role)")
        return Principal(subject, max(roles), via="oidc")

    async def endpoints(self) -> tuple[str, str]:
        """The issuer's authorization and token endpoints (from its discovery document)."""
        if not self.discovery:
            async with self._lock:
                if not self.discovery:
                    try:
                        self.discovery = await self._fetch_json(
                            self.settings.issuer + "/.well-known/openid-configuration")
                    except (httpx.HTTPError, ValueError) as error:
                        raise BearerRefused(f"the issuer could not be read: {type(error).__name__}") from None
        try:
            return (check_issuer_url(str(self.discovery.get("authorization_endpoint", "")), "authorization_endpoint"),
                    check_issuer_url(str(self.discovery.get("token_endpoint", "")), "token_endpoint"))
        except UserError as error:
            raise BearerRefused(str(error)) from None

    async def exchange(self, code: str, verifier: str, redirect_uri: str) -> tuple[Principal, dict[str, Any]]:
        """Authorization code + PKCE verifier to the ID token's principal and claims (the token is dropped)."""
        _, token_endpoint = await self.endpoints()
        form = {"grant_type": "authorization_code", "code": code, "code_verifier": verifier,
                "redirect_uri": redirect_uri, "client_id": self.settings.client_id or ""}
        client = self._client or httpx.AsyncClient(timeout=FETCH_TIMEOUT_S, follow_redirects=False)
        try:
            response = await client.post(token_endpoint, data=form, timeout=FETCH_TIMEOUT_S)
        except httpx.HTTPError as error:
            raise BearerRefused(f"the issuer's token endpoint failed: {type(error).__name__}") from None
        finally:
            if self._client is None:
                await client.aclose()
        if response.status_code != 200 or len(response.content) > MAX_DOCUMENT_BYTES:
            raise BearerRefused(f"the issuer refused the code (HTTP {response.status_code})")
        try:
            id_token = str(response.json()["id_token"])
        except (ValueError, KeyError, TypeError):
            raise BearerRefused("the issuer's answer holds no id_token") from None
        return await self.check(id_token, audience=self.settings.client_id)

    async def _key(self, kid: str) -> jwt.PyJWK:
        now = self._clock()
        key = self._keys.by_kid.get(kid)
        if key is not None and now - self._keys.fetched_at < self.settings.max_age_s:
            return key
        async with self._lock:
            now = self._clock()
            stale = now - self._keys.fetched_at >= self.settings.max_age_s
            if (kid not in self._keys.by_kid or stale) and now - self._keys.fetched_at >= self.settings.refetch_every_s:
                await self._refresh(now)
        key = self._keys.by_kid.get(kid)
        if key is None:
            raise BearerRefused(f"unknown key id {kid[:64]!r}")
        return key

    async def _refresh(self, now: float) -> None:
        self._keys.fetched_at = now  # also when it fails: the rate bound holds for failures
        try:
            if self._keys.jwks_uri is None:
                self.discovery = await self._fetch_json(self.settings.issuer + "/.well-known/openid-configuration")
                if self.discovery.get("issuer", self.settings.issuer).rstrip("/") != self.settings.issuer:
                    raise BearerRefused("the issuer's discovery document names another issuer")
                self._keys.jwks_uri = check_issuer_url(str(self.discovery.get("jwks_uri", "")), "jwks_uri")
            document = await self._fetch_json(self._keys.jwks_uri)
        except (httpx.HTTPError, ValueError, UserError) as error:
            raise BearerRefused(f"the issuer's keys could not be read: {type(error).__name__}") from None
        keys: dict[str, jwt.PyJWK] = {}
        for entry in (document.get("keys") or [])[:MAX_KEYS]:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            try:
                keys[str(entry.get("kid", ""))] = jwt.PyJWK(entry)
            except jwt.PyJWTError:
                continue  # a key type or curve we do not use
        self._keys.by_kid = keys
        self.fetches += 1

    async def _fetch_json(self, url: str) -> dict[str, Any]:
        client = self._client or httpx.AsyncClient(timeout=FETCH_TIMEOUT_S, follow_redirects=False)
        try:
            async with client.stream("GET", url, timeout=FETCH_TIMEOUT_S) as response:
                response.raise_for_status()
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_DOCUMENT_BYTES:
                        raise ValueError("document too large")
        finally:
            if self._client is None:
                await client.aclose()
        data = json.loads(bytes(body))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return data


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
