"""LoRA adapters by name, end to end: a real agent, our controller and proxy, an `[llm]` backend
of two replicas on the CPU engine whose base model and two adapters are `[models.NAME]`
directories in S3 (moto on 127.0.0.1), pinned by digest. The official `openai` client asks for
an adapter by `model` and gets the adapter's text; /v1/models lists the base and the adapters;
each adapter is loaded on one replica, which then takes all of its requests (the proxy reads
the JSON `model`), and no replica's engine is started again (same processes, one engine each)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import ray

from tests.conftest import GitRepo
from tests.support.s3 import s3_server
from tests.support.stack import AgentProcess
from vocabulary.replicas.model_digests import manifest_digest

pytestmark = pytest.mark.real

BASE = "the cat sat on the mat . the dog sat on the log . " * 20
ADAPTERS = {
    "laser": "the cat chased a red laser dot across the kitchen floor . " * 5,
    "poet": "the cat dreamed of moonlight and silver rivers . " * 5,
}


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    with s3_server("models") as client:
        yield client


def _upload(s3: Any, name: str, text: str) -> str:
    """`text` as the one file of the model directory s3://models/NAME/; its digest."""
    data = text.encode()
    s3.put_object(Bucket="models", Key=f"{name}/{name}.txt", Body=data)
    return manifest_digest([(f"{name}.txt", len(data), hashlib.sha256(data).hexdigest())])


def _stats_by_replica(proxy: str, replicas: int = 2) -> dict[int, dict[str, Any]]:
    """Each replica's /v1/stats by its process id (the proxy picks a replica per request: ask until all answered)."""
    seen: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + 30
    while len(seen) < replicas and time.monotonic() < deadline:
        stats = httpx.get(proxy + "/v1/stats", timeout=10).json()
        seen[stats["engine"]["pid"]] = stats
    assert len(seen) == replicas, seen
    return seen


def test_an_adapter_selected_by_model_is_served_on_the_replica_that_loaded_it_without_a_restart(
    node_env_ray: str, s3: Any, repo: GitRepo, tmp_path: Path
) -> None:
    digests = {name: _upload(s3, name, text) for name, text in {"base": BASE, **ADAPTERS}.items()}
    models = "\n".join(f'[models.{name}]\nsource = "s3://models/{name}/"\nsha256 = "{digest}"\n'
                       for name, digest in digests.items())
    repo.write("deployments/chat.toml", f"""\
{models}
[backends.chat]
models = ["base", "laser", "poet"]
num_replicas = 2
ray_actor_options = {{ num_cpus = 0 }}

[backends.chat.llm]
engine = "ngram"
model = "base"
served_model_name = "tiny"
lora_adapters = ["laser", "poet"]
max_loras = 2

[endpoints.chat]
route = "/v1"
traffic = {{ chat = 1.0 }}
""")
    commit = repo.commit("an OpenAI backend with two LoRA adapters")
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address,
                         extra_args=["--model-cache-dir", str(tmp_path / "model-cache")])
    try:
        agent.wait_applied(commit)
        api = openai.OpenAI(base_url=agent.proxy + "/v1", api_key="unused", max_retries=0, timeout=30)
        listed = api.models.list().data
        assert [m.id for m in listed] == ["tiny", "laser", "poet"]
        assert [getattr(m, "parent", None) for m in listed] == [None, "tiny", "tiny"]

        before = _stats_by_replica(agent.proxy)
        assert all(s["engine"]["starts"] == 1 and s["adapters"]["loaded"] == [] for s in before.values()), before

        def complete(model: str) -> str:
            done = api.completions.create(model=model, prompt="the cat", max_tokens=6, temperature=0)
            assert done.model == model
            return done.choices[0].text

        for _ in range(10):
            assert complete("laser") == " chased a red laser dot across"
            assert complete("tiny") == " sat on the log. the"
        for _ in range(5):
            assert complete("poet") == " dreamed of moonlight and silver rivers"
        chat = api.chat.completions.create(model="laser", messages=[{"role": "user", "content": "the cat"}],
                                           max_tokens=4, temperature=0)
        assert chat.model == "laser" and chat.choices[0].message.content == "the cat chased a"

        with pytest.raises(openai.NotFoundError) as unknown:
            api.completions.create(model="lasers", prompt="the cat", max_tokens=2)
        assert unknown.value.code == "model_not_found"

        after = _stats_by_replica(agent.proxy)
        # No engine restarted: the same two processes, each still on its first engine.
        assert set(after) == set(before), (before, after)
        assert all(s["engine"]["starts"] == 1 for s in after.values()), after
        # Each adapter was loaded once, on one replica, which took every request for it; the base model
        # is everywhere and went to both.
        for adapter, requests in (("laser", 11), ("poet", 5)):
            holders = [pid for pid, s in after.items() if adapter in s["adapters"]["loaded"]]
            assert len(holders) == 1, (adapter, after)
            served = {pid: s["models"].get(adapter, {}).get("requests", 0) for pid, s in after.items()}
            assert served == {pid: (requests if pid == holders[0] else 0) for pid in after}, (adapter, after)
        assert sum(s["adapters"]["loads"] for s in after.values()) == 2
        assert all(s["models"].get("tiny", {}).get("requests", 0) > 0 for s in after.values()), after
    finally:
        agent.stop()
