"""Server-sent events from a plain handler: a ticker that streams as it goes.

A handler that returns a Starlette `StreamingResponse` (or an async
generator) streams: each chunk reaches the client as it is produced, so the
first event arrives before the last one exists. A client that disconnects
stops the generator in the replica (it sees `CancelledError`), so a stream
nobody reads costs nothing; `GET /ticker/stats` counts the streams that ran
to the end and those cut short.

    curl -N 'http://127.0.0.1:8000/ticker?count=5&interval_s=0.2'
"""

from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse


class Ticker:
    def __init__(self) -> None:
        self.finished = 0
        self.cut_short = 0

    async def __call__(self, request: Request) -> Response:
        if request.url.path.endswith("/stats"):
            return JSONResponse({"finished": self.finished, "cut_short": self.cut_short})
        count = int(request.query_params.get("count", "5"))
        interval_s = float(request.query_params.get("interval_s", "0.2"))
        return StreamingResponse(self.events(count, interval_s), media_type="text/event-stream")

    async def events(self, count: int, interval_s: float) -> AsyncIterator[str]:
        try:
            for tick in range(count):
                if tick:
                    await asyncio.sleep(interval_s)
                yield f"id: {tick}\ndata: {json.dumps({'tick': tick})}\n\n"
        except asyncio.CancelledError:
            self.cut_short += 1
            raise
        self.finished += 1
