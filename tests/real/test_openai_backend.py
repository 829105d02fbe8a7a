"""The built-in OpenAI backend end to end: a real agent, our controller and proxy, a
`[backends.NAME.llm]` backend on the CPU engine trained on a `[models.NAME]` text pinned
by digest, and the official `openai` client through the proxy: models, chat, streaming
chat, completions and embeddings, OpenAI's error shape, a client that leaves a stream
early stopping the request in the engine, and the engine's token metrics per model on the
proxy's /metrics."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import httpx
import openai
import pytest
import ray
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import GitRepo
from tests.support.stack import AgentProcess

pytestmark = pytest.mark.real

TEXT = (
    "the agent watches the branch and the cluster follows it . a replica serves the model . "
    "the proxy routes each request to a replica . the model is pinned by digest in git . "
) * 30


def test_the_official_openai_client_through_the_proxy(ray_session: str, repo: GitRepo, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    repo.write("deployments/chat.toml", f"""\
[models.corpus]
source = "file://{corpus}"
sha256 = "{hashlib.sha256(TEXT.encode()).hexdigest()}"

[backends.chat]
models = ["corpus"]
ray_actor_options = {{ num_cpus = 0 }}

[backends.chat.llm]
engine = "ngram"
model = "corpus"
served_model_name = "tiny-ngram"
max_model_len = 1_100_000

[endpoints.chat]
route = "/v1"
traffic = {{ chat = 1.0 }}
""")
    commit = repo.commit("an OpenAI backend on the CPU engine")
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address,
                         extra_args=["--model-cache-dir", str(tmp_path / "model-cache")])
    try:
        agent.wait_applied(commit)
        api = openai.OpenAI(base_url=agent.proxy + "/v1", api_key="unused", max_retries=0, timeout=30)
        assert [m.id for m in api.models.list().data] == ["tiny-ngram"]

        chat = api.chat.completions.create(
            model="tiny-ngram", messages=[{"role": "user", "content": "what does the proxy do ?"}],
            max_tokens=12, temperature=0,
        )
        answer = chat.choices[0].message.content or ""
        assert len(answer.split()) >= 8 and set(answer.replace(".", " ").split()) <= set(TEXT.split())
        assert chat.usage is not None and chat.usage.completion_tokens == 12 and chat.usage.prompt_tokens == 10

        stream = api.chat.completions.create(
            model="tiny-ngram", messages=[{"role": "user", "content": "what does the proxy do ?"}],
            max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True},
        )
        chunks = list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer
        assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 22

        text = api.completions.create(model="tiny-ngram", prompt="the proxy routes", max_tokens=4, temperature=0)
        assert text.choices[0].text == " each request to a"

        vectors = api.embeddings.create(model="tiny-ngram", input=["the agent", "the proxy"])
        assert [len(d.embedding) for d in vectors.data] == [64, 64]

        with pytest.raises(openai.NotFoundError) as missing:
            api.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        assert missing.value.code == "model_not_found"
        with pytest.raises(openai.BadRequestError) as too_long:
            api.completions.create(model="tiny-ngram", prompt="the proxy", max_tokens=1_100_000)
        assert too_long.value.code == "context_length_exceeded"

        # A client that leaves a long stream after reading some of it: the engine stops the request.
        # A million tokens take the engine half a minute (~35,000 tokens/s), longer than the wait
        # below, which is shorter than the 30 s after which a replica closes a stream no proxy
        # claimed (replica.calling.streams): only the client's leaving can end this request in time.
        with httpx.Client(timeout=30) as http:
            with http.stream("POST", agent.proxy + "/v1/completions",
                             json={"model": "tiny-ngram", "prompt": "the", "max_tokens": 1_000_000, "stream": True}) as r:
                assert r.status_code == 200
                events = (line for line in r.iter_lines() if line.startswith("data: "))
                assert all(next(events) for _ in range(200))

        def stats() -> dict:
            return httpx.get(agent.proxy + "/v1/stats", timeout=10).json()["models"]["tiny-ngram"]

        deadline = time.monotonic() + 20
        while stats()["cancelled"] < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        measured = stats()
        assert (measured["cancelled"], measured["running"], measured["refused"]) == (1, 0, 1), measured
        assert measured["requests"] == 3  # chat, streamed chat, completion (embeddings are not generations)
        assert measured["ttft_s"]["count"] >= 3 and measured["tokens_per_s"] > 0

        # The same numbers reach Prometheus through the node's proxy, per backend and model
        # (published by the replica within a second, read from the node's file at a scrape).
        def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
            text = httpx.get(f"http://127.0.0.1:{agent.metrics_port}/metrics", timeout=10).text
            return {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))): s.value
                    for family in text_string_to_metric_families(text) if family.name.startswith("gitops_llm_")
                    for s in family.samples if s.labels.get("le", "+Inf") == "+Inf"}

        def series(name: str, **labels: str) -> float | None:
            return scraped().get((name, tuple(sorted({"backend": "chat", "model": "tiny-ngram", **labels}.items()))))

        deadline = time.monotonic() + 20
        while series("gitops_llm_requests_total", result="cancelled") != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert series("gitops_llm_requests_total", result="cancelled") == 1, scraped()
        assert series("gitops_llm_requests_total", result="finished") == 3
        assert series("gitops_llm_requests_total", result="refused") == 1
        assert series("gitops_llm_tokens_total", direction="completion") == 12 + 12 + 4 == measured["completion_tokens"]
        assert series("gitops_llm_tokens_total", direction="prompt") == measured["prompt_tokens"] > 20
        # Every generation that made a token has a time to first token: the three, and the one left early.
        assert series("gitops_llm_time_to_first_token_seconds_count") == 4
        assert series("gitops_llm_time_to_first_token_seconds_bucket") == 4  # le="+Inf"
        assert (series("gitops_llm_inter_token_seconds_count") or 0) >= 11 + 11 + 3 + 199
        assert (series("gitops_llm_inter_token_seconds_sum") or 0) > 0
    finally:
        agent.stop()
