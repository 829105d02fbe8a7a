"""One agent per namespace: who may reconcile a controller (issue 11 row 10)."""

from __future__ import annotations

from controller.state.ownership import claim
from vocabulary.control.ownership import Owner


def owner(agent_id: str) -> Owner:
    return Owner(agent_id, "https://git.example/specs.git", "main", "deployments", "host-a", 42, 0.0)


def test_a_controller_without_owner_is_granted() -> None:
    assert claim(None, owner("a"), take_over=False) is None


def test_the_same_agent_restarted_is_granted_again() -> None:
    assert claim(owner("a"), owner("a"), take_over=False) is None


def test_another_agent_is_refused_with_the_owner_record() -> None:
    assert claim(owner("a"), owner("b"), take_over=False) == owner("a")


def test_another_agent_taking_over_is_granted() -> None:
    assert claim(owner("a"), owner("b"), take_over=True) is None


def test_the_owner_record_round_trips_through_the_checkpoint_json() -> None:
    assert Owner.from_json(owner("a").to_json()) == owner("a")
