"""An API guarded by a token kept in git as an age secret (docs/guides/secrets.md).

The backend lists the secret `api-token` (`[secrets.api-token]`, an age file
in the repository, `gitops init --example secrets`): the agent decrypts it and
only this backend's replicas receive it. A request is answered only when it
carries `Authorization: Bearer TOKEN` with that token (compared in constant
time); any other gets 401. No answer holds the token. A commit of a new
`secrets/api-token.age` rotates it in place, with no restart: the class
defines `reconfigure_secrets()`, and `serving.secret()` is read per request.
"""

from __future__ import annotations

import hmac

from starlette.requests import Request
from starlette.responses import JSONResponse

from ray_gitops import serving

_ORDERS = [{"id": 1, "item": "tea", "quantity": 2}, {"id": 2, "item": "scones", "quantity": 6}]


class Orders:
    def __init__(self) -> None:
        self.rotations = 0

    def reconfigure_secrets(self) -> None:
        # Called when a commit changes a secret this backend lists; secret() already returns the new value.
        self.rotations += 1

    async def __call__(self, request: Request) -> JSONResponse:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        expected = serving.secret("api-token")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), bytes(expected).strip()):
            return JSONResponse({"error": "send Authorization: Bearer <the token in secrets/api-token.age>"}, 401)
        return JSONResponse({"orders": _ORDERS, "token_rotations": self.rotations})
