"""A backend's [placement], max_replicas_per_node and accelerator_type as a spec file
writes them: into the backend's config, into its version, or refused with FILE:LINE; and
the agent's status saying why a replica waits to be placed."""

from __future__ import annotations

from pathlib import Path

from gitops.commands.remote import render_status
from gitops.reconcile.gpus import capacity_problems
from gitops.specs.loading import Loader
from gitops.status.rollup import StatusFacts, roll_up
from vocabulary.control.status import BackendStatus, ClusterStatus, NodeResources
from vocabulary.spec.placement import PlacementConfig

SPEC = """\
[backends.chat]
import_path = "deployments.apps.llm_sim:LLMSim"
num_replicas = 2
max_replicas_per_node = 1
ray_actor_options = {{ num_gpus = 1, accelerator_type = "A100" }}

[backends.chat.placement]
bundles = {bundles}
strategy = {strategy}
"""


def load(tmp_path: Path, bundles: str = "[{GPU = 1, CPU = 2}, {GPU = 1}]", strategy: str = '"STRICT_PACK"'):
    (tmp_path / "deployments").mkdir(exist_ok=True)
    (tmp_path / "deployments" / "chat.toml").write_text(SPEC.format(bundles=bundles, strategy=strategy))
    (tmp_path / "deployments" / "apps").mkdir(exist_ok=True)
    (tmp_path / "deployments" / "apps" / "llm_sim.py").write_text("class LLMSim:\n    def __call__(self, request): ...\n")
    return Loader().load_directory(tmp_path / "deployments", root=tmp_path)


def test_a_placement_table_reaches_the_backend_config(tmp_path: Path) -> None:
    result = load(tmp_path)
    assert result.errors == ()
    chat = result.state.backends["chat"]
    assert chat.placement == PlacementConfig(bundles=({"GPU": 1, "CPU": 2}, {"GPU": 1}), strategy="STRICT_PACK")
    assert chat.max_replicas_per_node == 1
    assert chat.ray_actor_options["accelerator_type"] == "A100"


def test_a_change_of_placement_is_a_new_version(tmp_path: Path) -> None:
    before = load(tmp_path).state.backends["chat"].version
    after = load(tmp_path, bundles="[{GPU = 2}]").state.backends["chat"].version
    assert before != after


def test_bad_placements_are_refused_with_file_line_and_why(tmp_path: Path) -> None:
    errors = [str(e) for e in load(tmp_path, bundles='[{GPU = 0}, {"" = 1}]', strategy='"WIDE"').errors]
    assert errors == [
        "deployments/chat.toml:8:12: backends.chat.placement.bundles[0]: a bundle must ask for some resource "
        "(e.g. {GPU = 1})",
        "deployments/chat.toml:8:23: backends.chat.placement.bundles[1]: '' is not a resource name (1-128 characters)",
        "deployments/chat.toml:9:12: backends.chat.placement.strategy: must be 'PACK', 'STRICT_PACK', 'SPREAD' or "
        "'STRICT_SPREAD' (got 'WIDE')",
    ]
    assert [str(e) for e in load(tmp_path, bundles="[]").errors] == [
        "deployments/chat.toml:8:11: backends.chat.placement.bundles: List should have at least 1 item after "
        "validation, not 0 (got [])",
    ]


def test_an_actor_asking_more_than_the_first_bundle_is_refused(tmp_path: Path) -> None:
    errors = [str(e) for e in load(tmp_path, bundles="[{CPU = 2}, {GPU = 1}]").errors]
    assert len(errors) == 1
    assert errors[0].startswith("deployments/chat.toml:1:1: backends.chat: ray_actor_options asks for {GPU: 1}, "
                                "more than the first bundle of [placement] {CPU: 2} offers")


def test_the_agent_status_says_why_a_replica_waits_to_be_placed() -> None:
    observed = BackendStatus(version="v1", target_replicas=2, pending="Pending: no node offers {GPU: 4} in one bundle set")
    facts = StatusFacts(repo="r", branch="main", path="deployments", applying="3f2a9c1d",
                        progress="waiting for backend chat", cluster=ClusterStatus(backends={"chat": observed}))
    status = roll_up(facts)
    ready = status.condition("Ready")
    assert ready is not None and ready.message == (
        "applying 3f2a9c1 waiting for backend chat; chat: Pending: no node offers {GPU: 4} in one bundle set")
    assert status.backends["chat"].problem() == "0/2 replicas ready: Pending: no node offers {GPU: 4} in one bundle set"
    assert "chat: Pending: no node offers {GPU: 4} in one bundle set" in render_status(status)


def test_a_bundle_larger_than_any_node_is_refused_at_plan_time_with_file_line(tmp_path: Path) -> None:
    """What the agent (and `gitops plan --live`) says of a commit once it knows the cluster's nodes."""
    loaded = load(tmp_path, bundles="[{GPU = 4}]")
    nodes = {n: NodeResources(total={"GPU": 2, "CPU": 8}) for n in ("a", "b")}
    problems = capacity_problems(loaded.state, nodes)
    assert [str(loaded.placement_error(name, problem)) for name, problem in problems.items()] == [
        "deployments/chat.toml:7:1: backends.chat: a bundle asks for 4 GPU but the largest node of the cluster has 2",
    ]
