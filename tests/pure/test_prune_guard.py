"""The prune guard (`gitops.reconcile.prune_guard`): deleting everything needs a `gitops: prune-all` trailer."""

from __future__ import annotations

from gitops.reconcile.prune_guard import prune_refusal, says_prune_all
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.state import ServingState

RUNNING = ServingState(
    backends={"b": BackendConfig(name="b", version="1", import_path="m:f")},
    endpoints={"e": EndpointConfig(name="e", route="/e", traffic={"b": 1.0})},
)


def test_the_trailer_is_a_line_of_its_own_in_any_case() -> None:
    assert says_prune_all("drop everything\n\ngitops: prune-all\n")
    assert says_prune_all("drop everything\n\nSigned-off-by: a <a@b>\nGitOps:  Prune-All")
    assert not says_prune_all("drop everything")
    assert not says_prune_all("explain why gitops: prune-all is not used here")
    assert not says_prune_all("gitops: prune-all-but-one")


def test_an_empty_desired_state_over_a_running_one_is_refused_without_the_trailer() -> None:
    refused = prune_refusal(ServingState(), RUNNING, prune_all=False)
    assert refused is not None
    assert "deletes every endpoint (1) and backend (1)" in refused and "gitops: prune-all" in refused
    assert prune_refusal(ServingState(), RUNNING, prune_all=True) is None


def test_partial_deletes_and_an_empty_cluster_are_never_refused() -> None:
    only_backend = ServingState(backends=RUNNING.backends)
    assert prune_refusal(only_backend, RUNNING, prune_all=False) is None
    assert prune_refusal(ServingState(), ServingState(), prune_all=False) is None
