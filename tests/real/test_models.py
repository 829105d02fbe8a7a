"""Models end to end: an S3-compatible server (moto's, on 127.0.0.1), a real
agent and real Ray replicas (docs/guides/models.md). Several replicas on one node
fetch a model once; a new digest in git rolls the backend with no failed
request; a wrong digest fails the commit naming the model, its source and
both digests, and nothing that serves changes; a corrupt cache entry is
fetched again by the next replica that needs it."""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray

from controller.state.backend_state import REPLICA_PREFIX
from tests.conftest import GitRepo
from tests.support.s3 import s3_server
from tests.support.stack import AgentProcess, agent_namespace, named_actors
from vocabulary.replicas.model_digests import manifest_digest

pytestmark = pytest.mark.real

# Replicas inherit the Ray session's environment, which starts after collection:
# the S3 endpoint and throwaway credentials are set before it by tests.support.s3
# (one endpoint for every module that needs S3), as an operator sets them on each node.
# Its directory goes when the process that collected this module exits (every worker collects it).
_RECORDING_DIR = tempfile.mkdtemp(prefix="moto-recording-")
atexit.register(shutil.rmtree, _RECORDING_DIR, ignore_errors=True)
_RECORDING = os.path.join(_RECORDING_DIR, "requests")
os.environ.update(MOTO_RECORDER_FILEPATH=_RECORDING)

APP = '''\
import hashlib
from pathlib import Path

from ray_gitops import serving


class Sentiment:
    def __init__(self):
        self.root = Path(serving.model_path("sentiment"))
        self.weights = (self.root / "weights.bin").read_bytes()

    def __call__(self, request):
        writable = (self.root / "weights.bin").stat().st_mode & 0o222
        return {"weights": hashlib.sha256(self.weights).hexdigest(), "writable": bool(writable),
                "replica": serving.context().replica_id}
'''
SPEC = """\
[models.sentiment]
source = "s3://models/{prefix}/"
sha256 = "{digest}"
load_timeout_s = 60

[backends.sentiment]
import_path = "apps.sentiment:Sentiment"
models = ["sentiment"]
num_replicas = 3
ray_actor_options = {{ num_cpus = 0 }}

[endpoints.sentiment]
route = "/sentiment"
traffic = {{ sentiment = 1.0 }}
"""


def _model(weights: bytes) -> tuple[dict[str, bytes], str]:
    files = {"weights.bin": weights, "config.json": b'{"labels": ["neg", "pos"]}'}
    digest = manifest_digest([(path, len(data), hashlib.sha256(data).hexdigest()) for path, data in files.items()])
    return files, digest


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    with s3_server("models") as client:
        yield client


def _put(s3: Any, prefix: str, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        s3.put_object(Bucket="models", Key=f"{prefix}/{path}", Body=data)


def _gets(key: str) -> int:
    """GET requests the S3 server received for `key` since recording started."""
    count = 0
    for line in Path(_RECORDING).read_text().splitlines():
        entry = json.loads(line)
        if entry["method"] == "GET" and entry["url"].split("?")[0].endswith(f"/models/{key}"):
            count += 1
    return count


def _samples(text: str) -> dict[str, float]:
    """A Prometheus exposition's samples, by name and labels."""
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines() if line and not line.startswith("#")
    }


def _write_spec(repo: GitRepo, prefix: str, digest: str) -> None:
    repo.write("deployments/sentiment.toml", SPEC.format(prefix=prefix, digest=digest))


def _answers(agent: AgentProcess, count: int = 12) -> list[dict[str, Any]]:
    return [httpx.get(agent.proxy + "/sentiment", timeout=10).json() for _ in range(count)]


def test_models_from_s3_fetch_once_roll_by_digest_fail_whole_and_heal(
    node_env_ray: str, s3: Any, repo: GitRepo, tmp_path: Path
) -> None:
    v1, v2 = os.urandom(3 * 1024 * 1024), os.urandom(3 * 1024 * 1024)
    files1, digest1 = _model(v1)
    files2, digest2 = _model(v2)
    _put(s3, "sentiment/v1", files1)
    _put(s3, "sentiment/v2", files2)
    httpx.post(os.environ["AWS_ENDPOINT_URL"] + "/moto-api/recorder/start-recording")
    repo.write("apps/__init__.py", "")
    repo.write("apps/sentiment.py", APP)
    _write_spec(repo, "sentiment/v1", digest1)
    first = repo.commit("a backend with a model")
    cache = tmp_path / "model-cache"
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address,
                         extra_args=["--model-cache-dir", str(cache)])
    failures: list[str] = []
    served: list[str] = []
    stop = threading.Event()
    try:
        agent.wait_applied(first)
        answers = _answers(agent)
        assert {a["weights"] for a in answers} == {hashlib.sha256(v1).hexdigest()}
        assert not any(a["writable"] for a in answers)
        # Three replicas started at once on one node: one download.
        assert _gets("sentiment/v1/weights.bin") == 1
        # The node's proxies export what its cache did.
        scraped = _samples(httpx.get(f"http://127.0.0.1:{agent.metrics_port}/metrics", timeout=10).text)
        size = sum(len(data) for data in files1.values())
        assert scraped['gitops_model_fetch_bytes_total{model="sentiment"}'] == size
        assert scraped['gitops_model_fetch_seconds_count{model="sentiment"}'] == 1
        assert scraped["gitops_model_cache_hits_total"] == 2
        assert scraped["gitops_model_cache_bytes"] == size

        def light_load() -> None:
            with httpx.Client(timeout=10) as client:
                while not stop.is_set():
                    response = client.get(agent.proxy + "/sentiment")
                    if response.status_code != 200:
                        failures.append(f"{response.status_code} {response.text[:200]}")
                    else:
                        served.append(response.json()["weights"])
                    stop.wait(0.05)

        load = threading.Thread(target=light_load)
        load.start()
        # A new digest in git: a rolling update, no failed request.
        _write_spec(repo, "sentiment/v2", digest2)
        second = repo.commit("new weights")
        agent.wait_applied(second)
        new = {hashlib.sha256(v2).hexdigest()}
        agent.wait("the new weights", lambda: {a["weights"] for a in _answers(agent)} == new)
        stop.set()
        load.join(30)
        assert failures == []
        assert served[-1] == hashlib.sha256(v2).hexdigest()
        assert _gets("sentiment/v2/weights.bin") == 1
        # A digest that the bytes do not have: the commit fails with one line naming the
        # model, its source and both digests; the replicas serving v2 keep serving.
        wrong = "0" * 64
        _write_spec(repo, "sentiment/v2", wrong)
        bad = repo.commit("a wrong digest")
        agent.wait_attempted(bad)
        agent.wait("the failed commit in the status", lambda: wrong in json.dumps(agent.get("/status")))
        status = json.dumps(agent.get("/status"))
        assert agent.get("/status")["last_applied_revision"] == second
        line = f"model sentiment (s3://models/sentiment/v2/): its bytes have sha256 {digest2}, but git pins {wrong}"
        assert line in status
        assert {a["weights"] for a in _answers(agent)} == {hashlib.sha256(v2).hexdigest()}
        # Back to the good commit's content; then a corrupt cache entry: the next
        # replica to start on the node finds it, fetches it again and serves the right bytes.
        _write_spec(repo, "sentiment/v2", digest2)
        good = repo.commit("the right digest again")
        agent.wait_applied(good)
        weights = cache / "entries" / digest2 / "weights.bin"
        os.chmod(weights.parent, 0o755)
        os.chmod(weights, 0o644)
        weights.write_bytes(b"tampered")
        before = _gets("sentiment/v2/weights.bin")
        for name in named_actors(agent_namespace(), REPLICA_PREFIX):
            ray.kill(ray.get_actor(name, namespace=agent_namespace()), no_restart=True)
        agent.wait(
            "replacement replicas with the right bytes",
            lambda: {a["weights"] for a in _answers(agent, 6)} == {hashlib.sha256(v2).hexdigest()},
            timeout_s=120,
        )
        assert _gets("sentiment/v2/weights.bin") == before + 1
        assert weights.read_bytes() == v2
        assert list((cache / "tmp").iterdir()) == []
    finally:
        stop.set()
        agent.stop()


FILE_APP = '''\
import hashlib
from pathlib import Path

from ray_gitops import serving


class Scorer:
    def __init__(self):
        self.path = Path(serving.model_path("scorer"))

    def __call__(self, request):
        try:
            serving.model_path("other")
        except serving.ModelMissing as missing:
            refused = str(missing)
        return {"name": self.path.name, "sha256": hashlib.sha256(self.path.read_bytes()).hexdigest(),
                "refused": refused}
'''


def test_a_single_file_from_a_plain_http_server_on_loopback(node_env_ray: str, repo: GitRepo, tmp_path: Path) -> None:
    import http.server

    served = tmp_path / "served"
    served.mkdir()
    data = os.urandom(1024 * 1024)
    (served / "scorer.onnx").write_bytes(data)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(served))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    repo.write("apps/__init__.py", "")
    repo.write("apps/scorer.py", FILE_APP)
    repo.write("deployments/scorer.toml", f"""\
[models.scorer]
source = "http://127.0.0.1:{server.server_address[1]}/scorer.onnx"
sha256 = "{hashlib.sha256(data).hexdigest()}"

[backends.scorer]
import_path = "apps.scorer:Scorer"
models = ["scorer"]
num_replicas = 2
ray_actor_options = {{ num_cpus = 0 }}

[endpoints.scorer]
route = "/scorer"
traffic = {{ scorer = 1.0 }}
""")
    commit = repo.commit("a model from an HTTP server")
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address,
                         extra_args=["--model-cache-dir", str(tmp_path / "cache")])
    try:
        agent.wait_applied(commit)
        answer = httpx.get(agent.proxy + "/scorer", timeout=10).json()
        assert answer["name"] == "scorer.onnx"
        assert answer["sha256"] == hashlib.sha256(data).hexdigest()
        assert answer["refused"] == "model 'other' is not in this backend's models (it lists: scorer)"
    finally:
        agent.stop()
        server.shutdown()
        server.server_close()


def test_status_says_how_far_a_slow_model_fetch_is(node_env_ray: str, repo: GitRepo, tmp_path: Path) -> None:
    import http.server
    import time

    data = os.urandom(6 * 1024 * 1024)

    class Slow(http.server.BaseHTTPRequestHandler):
        """Serves the model at ~1 MB/s, so its fetch takes about six seconds."""

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()

        def do_GET(self) -> None:
            self.do_HEAD()
            for start in range(0, len(data), 128 * 1024):
                self.wfile.write(data[start : start + 128 * 1024])
                self.wfile.flush()
                time.sleep(0.125)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    repo.write("apps/__init__.py", "")
    repo.write("apps/scorer.py", FILE_APP.replace('"other"', '"slow"').replace('"scorer"', '"slow"'))
    repo.write("deployments/slow.toml", f"""\
[models.slow]
source = "http://127.0.0.1:{server.server_address[1]}/slow.onnx"
sha256 = "{hashlib.sha256(data).hexdigest()}"

[backends.slow]
import_path = "apps.scorer:Scorer"
models = ["slow"]
num_replicas = 1
ray_actor_options = {{ num_cpus = 0 }}
""")
    commit = repo.commit("a model that takes a while to fetch")
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address,
                         extra_args=["--model-cache-dir", str(tmp_path / "cache")])
    messages: list[str] = []
    try:
        def staging_shown() -> bool:
            status = agent.get("/status")
            ready = next((c for c in status["conditions"] if c["type"] == "Ready"), None)
            if ready is not None and "Staging model" in ready["message"]:
                messages.append(ready["message"])
            return len(messages) >= 2 and messages[0] != messages[-1]

        agent.wait("the fetch's progress in the status", staging_shown, timeout_s=60)
        agent.wait_applied(commit)
        assert agent.get("/status")["backends"]["slow"]["staging"] == []
    finally:
        agent.stop()
        server.shutdown()
        server.server_close()
    line = messages[-1].split("; ")[-1]
    assert line.startswith("Staging model slow: ") and line.endswith(" / 6.3 MB on 1 node"), messages
    done = float(line.split(": ")[1].split(" /")[0])
    assert 0 < done < 6.3, messages
