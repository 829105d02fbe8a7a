"""Staging progress: a starting replica's model fetch, rolled up per model over the nodes
fetching it, carried by the controller's status and shown by the agent's status."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Callable

from controller.state.backend_state import BackendState, Probe, ProbeStatus, StartReplica
from controller.testing import FakeAdapter
from gitops.commands.remote import render_status
from gitops.status.rollup import StatusFacts, roll_up
from replica.fetching.sources import FetchProgress, fetch
from replica.models import ModelCache
from vocabulary.control.status import BackendStatus, ClusterStatus, ModelStaging, staging_lines
from vocabulary.replicas.model_digests import manifest_digest
from vocabulary.spec.backends import BackendConfig, ModelConfig

DIGEST = "9f86d081" + "0" * 56


def test_one_line_per_model_over_its_nodes_in_a_readable_unit() -> None:
    lines = staging_lines([
        ModelStaging(model="sentiment", node_id="n1", done_bytes=700_000_000, total_bytes=2_000_000_000),
        ModelStaging(model="sentiment", node_id="n2", done_bytes=500_000_000, total_bytes=2_000_000_000),
        # A second report from n1 (another replica there, or an older answer): the furthest counts once.
        ModelStaging(model="sentiment", node_id="n1", done_bytes=600_000_000, total_bytes=2_000_000_000),
        ModelStaging(model="tokenizer", node_id="n1", done_bytes=1_500_000, total_bytes=3_000_000),
        ModelStaging(model="unsized", node_id="n1", done_bytes=2_048, total_bytes=0),
    ])
    assert lines == [
        "Staging model sentiment: 1.2 / 4.0 GB on 2 nodes",
        "Staging model tokenizer: 1.5 / 3.0 MB on 1 node",
        "Staging model unsized: 2.0 kB on 1 node",
    ]
    assert staging_lines([]) == []


def _backend() -> BackendConfig:
    model = ModelConfig(name="sentiment", source="s3://models/sentiment/", sha256=DIGEST)
    return BackendConfig(name="sentiment-v3", version="v1+m1", import_path="m:f", num_replicas=2,
                         models=("sentiment",), model_sources={"sentiment": model})


def test_the_controller_status_carries_what_starting_replicas_fetch_until_they_run() -> None:
    state, world = BackendState(), FakeAdapter()
    state.apply(_backend())
    started = [e for e in state.tick(0.0, world) if isinstance(e, StartReplica)]
    assert len(started) == 2 and state.status("sentiment-v3").staging == ()
    first, second = started
    world.stagings[first.actor_name] = (ModelStaging(model="sentiment", node_id="n1", done_bytes=5, total_bytes=10),)
    world.stagings[second.actor_name] = (ModelStaging(model="sentiment", node_id="n2", done_bytes=1, total_bytes=10),)
    state.tick(0.5, world)
    assert staging_lines(state.status("sentiment-v3").staging) == ["Staging model sentiment: 6.0 / 20.0 bytes on 2 nodes"]
    world.starts[first.actor_name] = Probe(ProbeStatus.OK)
    state.tick(1.0, world)
    assert [s.node_id for s in state.status("sentiment-v3").staging] == ["n2"]  # a running replica stages nothing
    # A backend without models is never asked.
    plain = BackendConfig(name="plain", version="v1", import_path="m:f", num_replicas=1)
    state.apply(plain)
    (start,) = [e for e in state.tick(2.0, world) if isinstance(e, StartReplica)]
    world.stagings[start.actor_name] = (ModelStaging(model="x"),)
    state.tick(2.5, world)
    assert state.status("plain").staging == ()


def test_the_agent_status_says_how_far_a_model_is_while_a_commit_applies() -> None:
    observed = BackendStatus(
        version="v1", target_replicas=2,
        staging=(
            ModelStaging(model="sentiment", node_id="n1", done_bytes=600_000_000, total_bytes=2_000_000_000),
            ModelStaging(model="sentiment", node_id="n2", done_bytes=600_000_000, total_bytes=2_000_000_000),
        ),
    )
    facts = StatusFacts(repo="r", branch="main", path="deployments", applying="3f2a9c1d",
                        progress="waiting for backend sentiment-v3",
                        cluster=ClusterStatus(backends={"sentiment-v3": observed}))
    status = roll_up(facts)
    ready = status.condition("Ready")
    assert ready is not None and ready.reason == "Progressing"
    assert ready.message == (
        "applying 3f2a9c1 waiting for backend sentiment-v3; Staging model sentiment: 1.2 / 4.0 GB on 2 nodes"
    )
    backend = status.backends["sentiment-v3"]
    assert backend.staging == ("Staging model sentiment: 1.2 / 4.0 GB on 2 nodes",)
    assert backend.problem() == "0/2 replicas ready: Staging model sentiment: 1.2 / 4.0 GB on 2 nodes"
    assert "sentiment-v3: Staging model sentiment: 1.2 / 4.0 GB on 2 nodes" in render_status(status)


def test_the_cache_shows_a_fetch_in_progress_with_its_expected_size_and_forgets_it_after(tmp_path: Path) -> None:
    weights = tmp_path / "model"
    weights.mkdir()
    (weights / "a.bin").write_bytes(b"a" * 3000)
    (weights / "b.bin").write_bytes(b"b" * 1000)
    digest = manifest_digest([
        ("a.bin", 3000, hashlib.sha256(b"a" * 3000).hexdigest()),
        ("b.bin", 1000, hashlib.sha256(b"b" * 1000).hexdigest()),
    ])
    seen: list[tuple[int, int]] = []
    board: dict[str, FetchProgress] = {}

    def watched(source: str, dest: Path, deadline: float, progress: Callable[[int], None]) -> None:
        """The real fetch, noting what the cache's board says after each chunk."""
        assert isinstance(progress, FetchProgress)

        class Relay(FetchProgress):
            def __call__(self, count: int) -> None:
                progress(count)
                seen.append((board["m"].done, board["m"].total))

            def expect(self, total: int) -> None:
                progress.expect(total)

        fetch(source, dest, deadline, Relay())

    cache = ModelCache(tmp_path / "cache", fetcher=watched, fetching=board)
    staged = cache.stage("m", weights.as_uri() + "/", digest, time.monotonic() + 30)
    assert staged.fetched_bytes == 4000
    assert seen == [(3000, 4000), (4000, 4000)]  # the whole directory's size, known before its first byte
    assert board == {}  # done: nothing fetching any more
