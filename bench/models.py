"""Models: fetching into a node's cache (docs/guides/models.md), against an S3-compatible server.

moto's S3 server on 127.0.0.1 holds one model of `--mb` MiB. Measured:

- cold fetch: `replica.models.ModelCache.stage` (obstore's parallel ranged
  reads, then the digest verified) in MB/s, beside boto3's `download_file`
  with its default transfer settings (the ordinary client; no verification);
- cache hit: a second stage (0 bytes fetched, the digest verified again)
  beside reading the file from local disk once;
- 4 processes staging the model at once on one node: the bytes fetched
  (the model's size once) and the slowest one's seconds.

moto serves from Python, so the absolute MB/s are the server's as much as
the client's: read the two clients side by side.

OCI (`oci://`): Debian's docker-registry on 127.0.0.1 holds a modelcar of
`--mb` MiB (its weights in one plain tar layer under /models, as weights do
not compress). Measured: the cold fetch into the cache
(`ModelCache.stage`: the blob verified as it streams, its members hashed
by their spans, the tar extracted, the model directory's digest checked
from those hashes) and the fetch alone (`replica.fetching.oci.fetch_oci`),
each beside a plain HTTP download of the same blob from the same registry
(httpx, its chunks written as they come, nothing checked: the fastest
plain client, since re-chunking to 1 MiB made it about 2x slower here),
and their ratios (target: at least 0.8). The three are interleaved, each
begun with the previous one's writes flushed (`os.sync`, not timed), and
each figure is the best of three.

Hugging Face (`hf://`): a loopback Hub (`tests.support.hub`, its HTTP API
and LFS redirects) holds a repository of `--mb` MiB of weights and a config.
Measured the same way: the cold fetch into the cache (`ModelCache.stage`:
each file hashed as it is written, the manifest digest checked) and the
fetch alone (`replica.fetching.hub.fetch_hub`), each beside a plain HTTP
download of the weights file from the same server (httpx, following the
Hub's redirect, written as it comes, no checks); target at least 0.8. The
Hub runs in a process of its own (a real one shares no GIL with the client).

Multiplexing (`[backends.X.multiplex]`): 8 models, 2 replicas,
`max_models_per_replica = 4`, a skewed mix (model k drawn with weight
1/(k+1)^1.1, one seeded sequence for every run): model loads per 1,000
requests,

- through the real stack (`gitops run`, its proxy, 2 real replicas whose
  `@ray_gitops.serving.multiplexed` loader counts its loads), affinity routing
  as shipped;
- in process, the same sequence through the proxy's own pool
  (`proxy.pool.replicas.ReplicaPool`, its model affinity) and the replica's own
  loader (`ray_gitops.model_slots.ModelSlots`, 4 slots each), against a random
  choice of replica feeding the same loaders (what routing without
  affinity does).

    python -m bench.models [--tiny] [--json PATH] [--mb N] [--requests N]
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

from bench import results

_KEY = "model/weights.bin"


def _stage(root: str, digest: str, out: str) -> None:
    from replica.models import ModelCache

    staged = ModelCache(Path(root)).stage("bench", f"s3://bench/{_KEY}", digest, time.monotonic() + 600)
    Path(out).write_text(f"{staged.fetched_bytes} {staged.seconds}")


def measure(mb: int) -> dict[str, Any]:
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1")
    import boto3
    from moto.server import ThreadedMotoServer

    from replica.models import ModelCache

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ["AWS_ENDPOINT_URL"] = f"http://{host}:{port}"
    work = Path(tempfile.mkdtemp(prefix="bench-models-"))
    try:
        s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
        s3.create_bucket(Bucket="bench")
        data = os.urandom(mb * 1024 * 1024)
        s3.put_object(Bucket="bench", Key=_KEY, Body=data)
        digest = hashlib.sha256(data).hexdigest()
        size = len(data)
        del data

        started = time.monotonic()
        s3.download_file("bench", _KEY, str(work / "boto3.bin"))
        boto3_s = time.monotonic() - started

        cache = ModelCache(work / "cache")
        cold = cache.stage("bench", f"s3://bench/{_KEY}", digest, time.monotonic() + 600)
        hit = ModelCache(work / "cache").stage("bench", f"s3://bench/{_KEY}", digest, time.monotonic() + 600)
        started = time.monotonic()
        (work / "boto3.bin").read_bytes()
        disk_s = time.monotonic() - started

        context = multiprocessing.get_context("spawn")
        outs = [work / f"stage{i}" for i in range(4)]
        processes = [
            context.Process(target=_stage, args=(str(work / "together"), digest, str(out))) for out in outs
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(600)
        together = [tuple(float(x) for x in out.read_text().split()) for out in outs]
        return {
            "model_mb": size / 1e6,
            "cold_fetch_mb_s": size / 1e6 / cold.seconds,
            "boto3_download_file_mb_s": size / 1e6 / boto3_s,
            "cold_fetched_bytes": cold.fetched_bytes,
            "hit_fetched_bytes": hit.fetched_bytes,
            "hit_stage_s": hit.seconds,
            "local_disk_read_s": disk_s,
            "four_at_once_fetched_bytes": sum(fetched for fetched, _ in together),
            "four_at_once_slowest_s": max(seconds for _, seconds in together),
        }
    finally:
        server.stop()
        _remove_tree(work)


MODELS = [f"model-{k}" for k in range(8)]
REPLICAS = 2
SLOTS = 4

MANY_APP = '''\
from ray_gitops import serving


class Many:
    def __init__(self):
        self.loads = 0

    @serving.multiplexed
    async def model(self, model_id):
        self.loads += 1
        return model_id

    async def __call__(self, request):
        await self.model(serving.model_id())
        return {"replica": serving.context().replica_id, "loads": self.loads}
'''

MANY_SPEC = f"""\
[backends.many]
import_path = "apps.many:Many"
num_replicas = {REPLICAS}
ray_actor_options = {{ num_cpus = 0 }}

[backends.many.multiplex]
max_models_per_replica = {SLOTS}

[endpoints.many]
route = "/many"
traffic = {{ many = 1.0 }}
"""


def skewed_mix(requests: int, seed: int = 29) -> list[str]:
    """`requests` model ids, model k drawn with weight 1/(k+1)^1.1."""
    import random

    rng = random.Random(seed)
    weights = [1 / (k + 1) ** 1.1 for k in range(len(MODELS))]
    return rng.choices(MODELS, weights, k=requests)


def loads_in_process(mix: list[str], affinity: bool, seed: int = 7) -> int:
    """Loads when the proxy's pool (affinity) or a random pick routes `mix` to 2 replicas' real loaders."""
    import asyncio
    import random

    from ray_gitops.model_slots import ModelSlots
    from proxy.pool.replicas import ReplicaPool
    from vocabulary.spec.routing import MultiplexConfig
    from vocabulary.request_path.multiplexing import RequestModels

    async def load(model_id: str) -> str:
        return model_id

    slots = [ModelSlots(load, SLOTS) for _ in range(REPLICAS)]
    rng = random.Random(seed)
    pool = ReplicaPool("many", rng, max_queued=10, max_concurrent=100)
    ids = [f"many#{n}" for n in range(REPLICAS)]
    pool.update(100, [(rid, object()) for rid in ids], multiplex=MultiplexConfig(max_models_per_replica=SLOTS))  # type: ignore[misc]

    async def run() -> None:
        for model in mix:
            if not affinity:
                await slots[rng.randrange(REPLICAS)].get(model, RequestModels(model))
                continue
            slot = pool.try_acquire(model.encode())
            assert slot is not None
            index = ids.index(slot.replica_id)
            await slots[index].get(model, RequestModels(model))
            slot.models = frozenset(slots[index].loaded())  # what the replica's answer reports
            pool.release(slot)

    asyncio.run(run())
    return sum(s.loads for s in slots)


def loads_real_stack(mix: list[str]) -> dict[str, Any]:
    """Loads when the real proxy routes `mix` to 2 real replicas (`gitops run`, affinity as shipped)."""
    import httpx
    import ray

    from bench.stacks import own_ray
    from controller.cluster import init_ray, shutdown_ray
    from tests.conftest import GitRepo
    from tests.support.stack import AgentProcess

    work = Path(tempfile.mkdtemp(prefix="bench-multiplex-"))
    own_ray()
    init_ray(namespace="bench-multiplex")
    agent = None
    try:
        repo = GitRepo(work / "repo")
        repo.write("apps/__init__.py", "")
        repo.write("apps/many.py", MANY_APP)
        repo.write("deployments/many.toml", MANY_SPEC)
        commit = repo.commit("8 models on 2 replicas")
        agent = AgentProcess(repo.root, work, ray.get_runtime_context().gcs_address)
        agent.wait_applied(commit)
        loads: dict[str, int] = {}
        started = time.monotonic()
        with httpx.Client(base_url=agent.proxy, timeout=30) as client:
            for model in mix:
                answer = client.get("/many", headers={"x-model-id": model}).json()
                loads[answer["replica"]] = max(loads.get(answer["replica"], 0), answer["loads"])
        seconds = time.monotonic() - started
        return {"loads": sum(loads.values()), "replicas_used": len(loads), "requests_per_s": len(mix) / seconds}
    finally:
        if agent is not None:
            agent.stop()
        shutdown_ray()
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def _against_plain(
    work: Path, url: str, size: int, fetch: Callable[[Path], None], stage: Callable[[Path], Any]
) -> dict[str, float]:
    """MB/s of the plain download of `url` (`plain_mb_s`), of `fetch` and of a cold `stage` of `size`
    bytes, their ratios to the plain download, and the bytes a cold stage and a cache hit fetched.

    The plain download is httpx writing `url`'s chunks as they come (re-chunking them to 1 MiB
    made it about 2x slower here). The three are interleaved, each begun with no write of the one
    before still queued for the disk (`os.sync`, not timed); the best of three of each."""
    import httpx

    def plain() -> float:
        started = time.monotonic()
        with httpx.Client(timeout=600, trust_env=False, follow_redirects=True) as client, \
                (work / "plain.bin").open("wb") as out:
            with client.stream("GET", url) as answer:
                for chunk in answer.iter_bytes():
                    out.write(chunk)
        seconds = time.monotonic() - started
        (work / "plain.bin").unlink()
        return seconds

    plain_runs, fetch_runs, stages = [], [], []
    for run in range(3):
        os.sync()
        plain_runs.append(plain())
        os.sync()
        started = time.monotonic()
        fetch(work / f"fetch{run}")
        fetch_runs.append(time.monotonic() - started)
        shutil.rmtree(work / f"fetch{run}")
        os.sync()
        stages.append(stage(work / f"cache{run}"))
    plain_s, fetch_s = min(plain_runs), min(fetch_runs)
    cold = min(stages, key=lambda staged: staged.seconds)
    again = stage(work / "cache0")
    return {
        "plain_mb_s": size / 1e6 / plain_s,
        "fetch_mb_s": size / 1e6 / fetch_s,
        "cold_stage_mb_s": size / 1e6 / cold.seconds,
        "fetch_vs_plain": plain_s / fetch_s,
        "cold_stage_vs_plain": plain_s / cold.seconds,
        "cold_fetched_bytes": cold.fetched_bytes,
        "hit_fetched_bytes": again.fetched_bytes,
    }


def measure_oci(mb: int) -> dict[str, Any]:
    """A modelcar of `mb` MiB in a loopback docker-registry: our cold fetch beside a plain blob download."""
    from replica.fetching.sources import FetchProgress
    from replica.models import ModelCache
    from replica.fetching.oci import fetch_oci
    from tests.support.oci_registry import modelcar_layer, oci_registry
    from vocabulary.replicas.model_digests import manifest_digest

    work = Path(tempfile.mkdtemp(prefix="bench-oci-"))
    try:
        with oci_registry(work / "registry") as registry:
            weights = os.urandom(mb * 1024 * 1024)
            files = {"config.json": b'{"bench": true}', "model.safetensors": weights}
            layer = modelcar_layer(files, compress=False)
            manifest = registry.push_image("bench/model", "v1", [("application/vnd.oci.image.layer.v1.tar", layer)])
            blob = f"sha256:{hashlib.sha256(layer).hexdigest()}"
            digest = manifest_digest([(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in files.items()])
            size = len(layer)
            del weights, files, layer
            source = f"oci://{registry.host}/bench/model@{manifest}"

            figures = _against_plain(
                work, f"{registry.url}/v2/bench/model/blobs/{blob}", size,
                lambda dest: fetch_oci(source, dest, time.monotonic() + 600, FetchProgress(), None),
                lambda root: ModelCache(root).stage("bench", source, digest, time.monotonic() + 600),
            )
            return {"layer_mb": size / 1e6, "plain_blob_download_mb_s": figures.pop("plain_mb_s"), **figures}
    finally:
        _remove_tree(work)


def _serve_hub(mb: int, conn: Any) -> None:
    """The loopback Hub in a process of its own (as a real Hub is: not sharing the client's GIL)."""
    from tests.support.hub import FakeHub
    from vocabulary.replicas.model_digests import manifest_digest

    hub = FakeHub().start()
    files = {"config.json": b'{"bench": true}', "model.safetensors": os.urandom(mb * 1024 * 1024)}
    commit = hub.commit("bench/model", files)
    digest = manifest_digest([(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in files.items()])
    conn.send((hub.url, commit, digest, sum(len(data) for data in files.values())))
    conn.recv()  # until the bench is done
    hub.stop()


def measure_hub(mb: int) -> dict[str, Any]:
    """A repository of `mb` MiB on a loopback Hugging Face Hub: our cold fetch beside a plain download."""
    from replica.fetching.hub import HubOptions, fetch_hub
    from replica.fetching.sources import FetchProgress
    from replica.models import ModelCache

    work = Path(tempfile.mkdtemp(prefix="bench-hub-"))
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    server = context.Process(target=_serve_hub, args=(mb, theirs), daemon=True)
    server.start()
    endpoint = os.environ.get("HF_ENDPOINT")
    try:
        url, commit, digest, size = ours.recv()
        os.environ["HF_ENDPOINT"] = url
        weights_url = f"{url}/bench/model/resolve/{commit}/model.safetensors"
        source = f"hf://bench/model@{commit}"

        figures = _against_plain(
            work, weights_url, size,
            lambda dest: fetch_hub(source, dest, time.monotonic() + 600, FetchProgress(), HubOptions()),
            lambda root: ModelCache(root).stage("bench", source, digest, time.monotonic() + 600, HubOptions()),
        )
        return {"model_mb": size / 1e6, "plain_download_mb_s": figures.pop("plain_mb_s"), **figures}
    finally:
        ours.send("done")
        server.join(30)
        if endpoint is None:
            os.environ.pop("HF_ENDPOINT", None)
        else:
            os.environ["HF_ENDPOINT"] = endpoint
        _remove_tree(work)


def _remove_tree(work: Path) -> None:
    for folder, dirs, _files in os.walk(work):
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o755)
    shutil.rmtree(work, ignore_errors=True)


def measure_multiplexing(requests: int) -> dict[str, Any]:
    mix = skewed_mix(requests)
    per_1000 = 1000 / requests
    real = loads_real_stack(mix)
    affinity = loads_in_process(mix, affinity=True)
    spread = loads_in_process(mix, affinity=False)
    return {
        "requests": requests,
        "models": len(MODELS),
        "replicas": REPLICAS,
        "max_models_per_replica": SLOTS,
        "hottest_model_share": mix.count(MODELS[0]) / requests,
        "real_affinity_loads_per_1000": real["loads"] * per_1000,
        "real_replicas_used": real["replicas_used"],
        "real_requests_per_s": real["requests_per_s"],
        "affinity_loads_per_1000": affinity * per_1000,
        "random_loads_per_1000": spread * per_1000,
    }


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="the model's size in MiB")
    parser.add_argument("--requests", type=int, default=10_000, help="requests in the multiplexing mix")
    args = parser.parse_args()
    figures = measure(8 if args.tiny else args.mb)
    figures["oci"] = measure_oci(8 if args.tiny else args.mb)
    figures["hub"] = measure_hub(8 if args.tiny else args.mb)
    figures["multiplexing"] = measure_multiplexing(300 if args.tiny else args.requests)
    for name, value in figures.items():
        if isinstance(value, dict):
            for key, number in value.items():
                print(f"{name}.{key:<32} {number:,.2f}")
        else:
            print(f"{name:<28} {value:,.2f}")
    results.write(args.json, "models", args.tiny, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
