"""LoRA adapters through the OpenAI layer over the CPU engine, in-process, with the official
`openai` client: the `model` field selects the base or an adapter, /v1/models lists both, an
adapter loads on its first request into the same engine (never a new one) and at most
`max_loras` stay loaded, every answer reports the adapters loaded to the proxy, and what it
refuses is in OpenAI's error shape."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import openai
import pytest

from ray_gitops.llm.adapters import Adapters
from ray_gitops.llm.app import build_adapters, build_engine
from ray_gitops.llm.http import OpenAIApp
from ray_gitops.llm.ngram import NgramEngine
from vocabulary.request_path.multiplexing import parse_report
from vocabulary.request_path.wire import MODELS_HEADER
from vocabulary.spec.llm import LLMConfig

BASE = "the cat sat on the mat . the dog sat on the log . " * 20
LASER = "the cat chased a red laser dot across the kitchen floor . " * 5
POET = "the cat dreamed of moonlight and silver rivers . " * 5


def _files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "laser.txt").write_text(LASER)
    (tmp_path / "poet").mkdir()
    (tmp_path / "poet" / "verses.txt").write_text(POET)
    return {"laser": str(tmp_path / "laser.txt"), "poet": str(tmp_path / "poet")}


def _app(tmp_path: Path, max_loras: int = 4) -> tuple[OpenAIApp, NgramEngine]:
    engine = NgramEngine(BASE, "tiny")
    return OpenAIApp(engine, adapters=Adapters(engine, _files(tmp_path), max_loras)), engine


def _client(app: OpenAIApp) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
    return openai.AsyncOpenAI(base_url="http://test/v1", api_key="unused", http_client=http, max_retries=0)


def test_the_model_field_selects_the_base_or_an_adapter_loaded_once_into_the_same_engine(tmp_path: Path) -> None:
    app, engine = _app(tmp_path)

    async def run() -> None:
        api = _client(app)
        listed = (await api.models.list()).data
        assert [m.id for m in listed] == ["tiny", "laser", "poet"]
        assert [getattr(m, "parent", None) for m in listed] == [None, "tiny", "tiny"]
        assert (await api.models.retrieve("laser")).id == "laser"

        async def complete(model: str) -> str:
            done = await api.completions.create(model=model, prompt="the cat", max_tokens=6, temperature=0)
            assert done.model == model
            return done.choices[0].text

        assert await complete("tiny") == " sat on the log. the"
        assert engine.adapters() == []  # nothing loads before it is asked for
        assert await complete("laser") == " chased a red laser dot across"
        assert await complete("poet") == " dreamed of moonlight and silver rivers"
        assert await complete("laser") == " chased a red laser dot across"
        assert await complete("tiny") == " sat on the log. the"  # the base is untouched

        chat = await api.chat.completions.create(
            model="laser", messages=[{"role": "user", "content": "the cat"}], max_tokens=4, temperature=0,
        )
        assert chat.model == "laser" and chat.usage is not None and chat.usage.completion_tokens == 4
        stream = await api.chat.completions.create(
            model="laser", messages=[{"role": "user", "content": "the cat"}], max_tokens=4, temperature=0, stream=True,
        )
        assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == \
            chat.choices[0].message.content

    asyncio.run(run())
    assert sorted(engine.adapters()) == ["laser", "poet"] and app.engine is engine
    stats = app._stats()
    assert stats["adapters"] == {"served": ["laser", "poet"], "loaded": ["poet", "laser"], "loads": 2, "evictions": 0}
    assert stats["models"]["laser"]["requests"] == 4 and stats["models"]["tiny"]["requests"] == 2


def test_at_most_max_loras_stay_loaded_and_each_answer_reports_them_to_the_proxy(tmp_path: Path) -> None:
    app, engine = _app(tmp_path, max_loras=1)

    async def run() -> list[tuple[list[str], bool, list[str]]]:
        reports = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            for model in ("laser", "laser", "poet", "tiny"):
                answer = await http.post("/v1/completions", json={"model": model, "prompt": "the", "max_tokens": 2})
                assert answer.status_code == 200, answer.text
                # the report is the answer's last header (the proxy takes it off there)
                name, value = answer.headers.raw[-1]
                assert name == MODELS_HEADER
                found = parse_report(value)
                assert found is not None
                reports.append((sorted(found.loaded), found.loaded_now, list(found.evicted)))
        return reports

    assert asyncio.run(run()) == [
        (["laser"], True, []),  # loaded by this request
        (["laser"], False, []),  # already there
        (["poet"], True, ["laser"]),  # one at most: the least recently used goes
        (["poet"], False, []),  # the base model loads nothing
    ]
    assert engine.adapters() == ["poet"]


def test_an_app_without_adapters_adds_no_report() -> None:
    app = OpenAIApp(NgramEngine(BASE, "tiny"))

    async def run() -> list[bytes]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            answer = await http.post("/v1/completions", json={"model": "tiny", "prompt": "the", "max_tokens": 2})
            return [name for name, _ in answer.headers.raw]

    assert MODELS_HEADER not in asyncio.run(run())


def test_what_it_refuses_about_adapters_is_in_openai_s_error_shape(tmp_path: Path) -> None:
    engine = NgramEngine(BASE, "tiny")
    app = OpenAIApp(engine, adapters=Adapters(engine, {**_files(tmp_path), "gone": str(tmp_path / "gone.txt")}, 2))

    async def run() -> None:
        api = _client(app)
        with pytest.raises(openai.NotFoundError) as unknown:
            await api.completions.create(model="lasers", prompt="the", max_tokens=2)
        assert unknown.value.code == "model_not_found" and unknown.value.param == "model"
        assert "served: tiny, laser, poet, gone" in unknown.value.message
        with pytest.raises(openai.NotFoundError):
            await api.models.retrieve("lasers")
        with pytest.raises(openai.InternalServerError) as broken:
            await api.completions.create(model="gone", prompt="the", max_tokens=2)
        assert broken.value.code == "adapter_load_failed" and "gone.txt" in broken.value.message
        with pytest.raises(openai.BadRequestError) as embed:
            await api.embeddings.create(model="laser", input="the cat")
        assert embed.value.code == "embeddings_unsupported" and "`tiny`" in embed.value.message

    asyncio.run(run())
    assert engine.adapters() == []


def test_the_backend_builds_one_engine_and_its_adapters_from_the_llm_table(tmp_path: Path) -> None:
    files = _files(tmp_path)
    (tmp_path / "base.txt").write_text(BASE)
    config = LLMConfig.model_validate({"engine": "ngram", "model": "base", "served_model_name": "tiny",
                                       "lora_adapters": ["laser"], "max_loras": 3})
    engine = build_engine(config, str(tmp_path / "base.txt"))
    adapters = build_adapters(config, engine, files)
    assert adapters is not None and adapters.names() == ["laser"] and adapters.engine is engine
    assert build_adapters(config.model_copy(update={"lora_adapters": ()}), engine, files) is None

    class NoAdapters:
        def models(self) -> list[str]:
            return ["x"]

    with pytest.raises(ValueError, match="cannot load LoRA adapters"):
        build_adapters(config, NoAdapters(), files)  # type: ignore[arg-type]
