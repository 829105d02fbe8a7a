"""A loopback OIDC issuer made by a test: its keys generated in the test.

Serves, on 127.0.0.1 and a free port, the discovery document, the JWKS
(`keys` can be rotated), a minimal authorization endpoint (it redirects at
once with a code for the user the test chose, keeping the PKCE challenge)
and a token endpoint (it checks the code verifier against the challenge and
answers an `id_token`). `mint` signs a JWT with the current key, or with
whatever the test asks for (another algorithm, key, audience, times).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

__all__ = ["Issuer", "unsigned"]


def unsigned(header: dict[str, Any], claims: dict[str, Any]) -> str:
    """A JWT with no signature (`alg: none`, or made by hand), as an attacker sends it."""
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part(header)}.{part(claims)}."


class Issuer:
    def __init__(self, audience: str = "ray-gitops") -> None:
        self.audience = audience
        self.keys: list[tuple[str, Any]] = []
        self.rotate()
        self.jwks_fetches = 0
        self.login_user: dict[str, Any] = {"sub": "alice", "groups": ["ops"]}
        self._codes: dict[str, dict[str, Any]] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def rotate(self, kind: str = "RSA") -> str:
        """A new signing key, published beside the old ones; returns its key id."""
        kid = f"k{len(self.keys) + 1}-{secrets.token_hex(4)}"
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048) if kind == "RSA" \
            else ec.generate_private_key(ec.SECP256R1())
        self.keys.append((kid, key))
        return kid

    def jwks(self) -> dict[str, Any]:
        found = []
        for kid, key in self.keys:
            algorithm = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
            jwk = json.loads(algorithm.to_jwk(key.public_key()))
            found.append({**jwk, "kid": kid, "use": "sig"})
        return {"keys": found}

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        return {"iss": self.url, "aud": self.audience, "sub": "alice", "groups": ["ops"], "iat": now,
                "nbf": now - 5, "exp": now + 300, **overrides}

    def mint(self, *, alg: str | None = None, kid: str | None = None, key: Any = None, **claims: Any) -> str:
        kid, signer = (kid, key) if key is not None else self.keys[-1]
        if alg is None:
            alg = "RS256" if isinstance(signer, rsa.RSAPrivateKey) else "ES256"
        body = {k: v for k, v in self.claims(**claims).items() if v is not None}
        return jwt.encode(body, signer, algorithm=alg, headers={"kid": kid})

    def public_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.keys[-1][1].public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, data: dict[str, Any], status: int = 200) -> None:
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                parts = urlsplit(self.path)
                if parts.path == "/.well-known/openid-configuration":
                    self._json({"issuer": issuer.url, "jwks_uri": issuer.url + "/jwks",
                                "authorization_endpoint": issuer.url + "/authorize",
                                "token_endpoint": issuer.url + "/token"})
                elif parts.path == "/jwks":
                    issuer.jwks_fetches += 1
                    self._json(issuer.jwks())
                elif parts.path == "/authorize":
                    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                    if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
                        self._json({"error": "invalid_request"}, 400)
                        return
                    code = secrets.token_urlsafe(16)
                    issuer._codes[code] = {**query, "user": dict(issuer.login_user)}
                    target = query["redirect_uri"] + "?" + urlencode({"code": code, "state": query.get("state", "")})
                    self.send_response(302)
                    self.send_header("Location", target)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self._json({"error": "not found"}, 404)

            def do_POST(self) -> None:  # noqa: N802
                if urlsplit(self.path).path != "/token":
                    self._json({"error": "not found"}, 404)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                grant = issuer._codes.pop(form.get("code", ""), None)
                verifier = form.get("code_verifier", "")
                challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
                if (grant is None or challenge != grant["code_challenge"]
                        or form.get("redirect_uri") != grant["redirect_uri"] or form.get("client_id") != grant["client_id"]):
                    self._json({"error": "invalid_grant"}, 400)
                    return
                token = issuer.mint(**{"aud": grant["client_id"], **grant["user"]})
                self._json({"id_token": token, "access_token": token, "token_type": "Bearer", "expires_in": 300})

        return Handler
