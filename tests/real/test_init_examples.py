"""`gitops init --example NAME` served: the examples as a user takes them from
the box to answered requests.

One fresh git repository gets every example (`gitops init --example` run as
a command, one after another: they share a repository without a clash), the
steps each prints (the model uploaded to an S3-compatible server, moto's on
127.0.0.1; an age key made with `gitops secret keygen` and the token
encrypted with `gitops secret encrypt`), one commit, and a real agent
(`gitops run --environment dev`, the session's Ray). Then HTTP on 127.0.0.1
shows each example serving what its guide says: the sentiment model answers
with the lexicon fetched from S3 (a word only the model knows), the
translators answer per `X-Model-Id`, the orders API only to the bearer of
the decrypted token, the LLM simulator a chat completion, and the echo
backend with dev's environment on top.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray

from gitops.commands.init import EXAMPLES
from tests.conftest import GitRepo
from tests.support.s3 import s3_server
from tests.support.stack import AgentProcess, eventually

pytestmark = pytest.mark.real

TOKEN = "example-token-5d0c2e"


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    with s3_server("models") as client:
        yield client


def gitops(repo: GitRepo, *args: str, stdin: bytes | None = None) -> bytes:
    """`gitops ARGS` run in the repository, as a user types it; its standard output (an age file is binary)."""
    done = subprocess.run([sys.executable, "-m", "gitops", *args], cwd=repo.root, input=stdin,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, f"gitops {' '.join(args)}: {done.stderr.decode()}"
    return done.stdout


def test_every_example_serves_from_a_fresh_repository(node_env_ray: str, s3: Any, repo: GitRepo, tmp_path: Path) -> None:
    for name in EXAMPLES:
        assert b"created deployments/" in gitops(repo, "init", "--example", name)

    # models: the bytes the spec pins, uploaded where its source says.
    digest = gitops(repo, "models", "digest", "models/sentiment/v1/").decode().strip()
    assert f'sha256 = "{digest}"' in (repo.root / "deployments" / "sentiment.toml").read_text()
    for path in sorted((repo.root / "models" / "sentiment" / "v1").iterdir()):
        s3.put_object(Bucket="models", Key=f"sentiment/v1/{path.name}", Body=path.read_bytes())
    # secrets: a key, its recipient listed, the token encrypted to it.
    key = tmp_path / "age-identity.txt"
    (repo.root / ".gitops-recipients").write_bytes(gitops(repo, "secret", "keygen", "--output", str(key)))
    (repo.root / "secrets").mkdir()
    (repo.root / "secrets" / "api-token.age").write_bytes(gitops(repo, "secret", "encrypt", stdin=TOKEN.encode()))
    assert gitops(repo, "validate", "--age-identity", str(key)).rstrip().endswith(b", valid")
    commit = repo.commit("Add the examples")

    agent = AgentProcess(
        repo.root, tmp_path, ray.get_runtime_context().gcs_address, cwd=tmp_path,
        extra_args=["--age-identity", str(key), "--model-cache-dir", str(tmp_path / "models"), "--environment", "dev"],
    )
    try:
        try:  # 8-20 s on a quiet machine; well inside the test's own timeout, so a failure shows why
            took = agent.wait(f"{commit[:7]} applied", lambda: (s := agent.get("/status"))["last_applied_revision"]
                              == commit and s["status"] == "Synced", timeout_s=150)
        except AssertionError as error:
            raise AssertionError(f"{error}\nstatus: {agent.get('/status')}\n"
                                 f"Ray's free resources: {ray.available_resources()}") from None
        print(f"every example applied {took:.1f} s after the agent started")
        http = httpx.Client(base_url=agent.proxy, timeout=30)

        # models: "delicious" is in the model's lexicon only (not in the app's default one).
        assert http.get("/sentiment", params={"text": "delicious"}).json() == {"label": "positive", "score": 1.0}
        assert http.get("/sentiment", params={"text": "a great day"}).json() == {"label": "positive", "score": 0.3333}

        # multiplexing: the model each request names.
        assert http.get("/translate", params={"text": "hello world"}, headers={"X-Model-Id": "en-fr"}).json() == {
            "pair": "en-fr", "text": "bonjour monde"}
        assert http.get("/translate", params={"text": "cat"}, headers={"X-Model-Id": "en-de"}).json()["text"] == "Katze"

        # secrets: only the token's bearer is answered, and no answer holds the token.
        refused = http.get("/orders", headers={"authorization": "Bearer not-the-token"})
        assert refused.status_code == 401 and TOKEN not in refused.text
        answered = http.get("/orders", headers={"authorization": f"Bearer {TOKEN}"})
        assert answered.status_code == 200 and answered.json()["orders"][0]["item"] == "tea"
        assert TOKEN not in answered.text
        assert TOKEN not in agent.log_path.read_text()

        # llm: a chat completion from the simulator, through prefix-affinity routing and the tenant limit.
        body = {"model": "sim", "max_tokens": 4, "messages": [{"role": "user", "content": "hello there"}]}
        chat = http.post("/v1/chat/completions", json=body, headers={"authorization": "Bearer me"})
        assert chat.status_code == 200, chat.text
        assert chat.json()["object"] == "chat.completion" and chat.json()["usage"]["completion_tokens"] == 4

        # environments: the tree's echo backend, served by the dev agent.
        echo = eventually(lambda: (r := http.get("/echo", params={"a": "1"})).status_code == 200 and r.json(),
                          what="/echo answered")
        assert echo["version"] == "v1" and echo["query"] == {"a": "1"}
        assert agent.get("/status")["environment"]["name"] == "dev"
    finally:
        agent.stop()
