"""Many small models on few replicas (multiplexing): one word-for-word translator per language pair.

Each request names its language pair in `X-Model-Id` (`en-fr`, `en-de`, ...).
`translator` is the loader: `@serving.multiplexed` keeps at most
`max_models_per_replica` pairs loaded on a replica, least recently used out
first, and the proxy sends a pair's requests to the replica that has it
loaded. A real loader would look the pair up in what it knows (a table from
id to file, never a path built from the id: ids come from clients, and the
proxy only checks them against `model_pattern` and `models`) and read that
file under `serving.model_path("translators")` (docs/guides/models.md); this
one builds a tiny dictionary, after a pause that stands for the load.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse

from ray_gitops import serving

_WORDS = {
    "en-fr": {"hello": "bonjour", "world": "monde", "model": "modèle", "cat": "chat"},
    "en-de": {"hello": "hallo", "world": "Welt", "model": "Modell", "cat": "Katze"},
    "en-es": {"hello": "hola", "world": "mundo", "model": "modelo", "cat": "gato"},
    "en-it": {"hello": "ciao", "world": "mondo", "model": "modello", "cat": "gatto"},
    "en-nl": {"hello": "hallo", "world": "wereld", "model": "model", "cat": "kat"},
    "en-pt": {"hello": "olá", "world": "mundo", "model": "modelo", "cat": "gato"},
}
_LOAD_S = 0.2  # what loading weights would take


class Translators:
    @serving.multiplexed
    async def translator(self, model_id: str) -> dict[str, str]:
        await asyncio.sleep(_LOAD_S)
        return dict(_WORDS[model_id])

    async def __call__(self, request: Request) -> JSONResponse:
        pair = serving.model_id()
        if pair not in _WORDS:
            return JSONResponse({"error": f"name a language pair in X-Model-Id: one of {sorted(_WORDS)}"}, 404)
        words = await self.translator(pair)
        text = request.query_params.get("text", "")
        return JSONResponse({"pair": pair, "text": " ".join(words.get(w, w) for w in text.lower().split())})
