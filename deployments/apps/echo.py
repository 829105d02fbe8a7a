"""An echo service: answers with what it received, tagged with its label.

`echo-v1` and `echo-v2` run this class with different `init_args`, so a
client can see which version of the 90/10 split answered.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request


class Echo:
    def __init__(self, label: str, greeting: str = "hello") -> None:
        self.label = label
        self.greeting = greeting

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        # Called on every running replica when user_config changes: no restart.
        self.greeting = str(user_config.get("greeting", self.greeting))

    async def __call__(self, request: Request) -> dict[str, Any]:
        body = await request.body()
        return {
            "version": self.label,
            "greeting": self.greeting,
            "method": request.method,
            "path": request.url.path,
            "query": dict(request.query_params),
            "body": body.decode("utf-8", errors="replace"),
        }

    def check_health(self) -> None:
        if not self.label:
            raise RuntimeError("echo replica has no label")
