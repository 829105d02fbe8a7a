"""A composed pipeline: one backend calls others through handles.

`pipeline` (on /pipeline) splits the text with the `words` backend, then
tags the words through the `tagger` endpoint, whose traffic is split between
two tagger versions; each answer says which version tagged it. The tagger
also answers HTTP on its own route: a handler may serve both. A handle
passes its arguments to the callee's handler as they are (not as an HTTP
request) and returns the handler's return value. When every replica of a
callee is busy the handle raises `BackpressureError` at once, which the
pipeline turns into a 503 its client may retry.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from ray_gitops import serving


class Words:
    async def __call__(self, text: str, pause_s: float = 0.0) -> list[str]:
        await asyncio.sleep(pause_s)  # stands in for slow work
        return text.split()


class Tagger:
    def __init__(self, label: str) -> None:
        self.label = label

    async def __call__(self, words: list[str] | Request) -> dict[str, Any]:
        if isinstance(words, Request):  # over HTTP: {"words": [...]}
            words = (await words.json())["words"]
        return {"tagger": self.label, "tags": [f"{word}/{len(word)}" for word in words]}


class Pipeline:
    def __init__(self) -> None:
        self.words = serving.handle("words")
        self.tagger = serving.handle("tagger")

    async def __call__(self, request: Request) -> Any:
        body = await request.json()
        try:
            words = await self.words.remote(body["text"], pause_s=body.get("pause_s", 0.0))
        except serving.BackpressureError as error:
            return JSONResponse({"error": str(error)}, status_code=503, headers={"retry-after": "1"})
        tagged = await self.tagger.remote(words)
        context = serving.context()  # backend, replica id, version and the commit applied
        return {**tagged, "by": context.backend, "commit": context.commit}
