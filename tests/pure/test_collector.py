"""A data-path process's collector once it has started: start-up frozen, full collections rare (datalink.collector)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from datalink.collector import FULL_AFTER, settle_collector


@pytest.fixture
def own_collector() -> Iterator[None]:
    """The test process's collector as it was, given back after the test."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_what_start_up_made_is_out_of_the_collectors_sight(own_collector: None) -> None:
    made_at_start_up = [{"route": "/"}]

    settle_collector()

    assert gc.get_freeze_count() > 0
    assert not any(obj is made_at_start_up for obj in gc.get_objects())


def test_full_collections_are_rare_and_the_young_ones_keep_pythons_pace(own_collector: None) -> None:
    young, middle, _ = gc.get_threshold()

    settle_collector()

    assert gc.get_threshold() == (young, middle, FULL_AFTER)
    assert FULL_AFTER >= 100 * 10  # a hundred times rarer than Python's default of 10


def test_cyclic_garbage_made_after_start_up_is_still_found_by_a_young_collection(own_collector: None) -> None:
    settle_collector()

    class Node:
        pass

    cycle = Node()
    cycle.self = cycle  # type: ignore[attr-defined]
    del cycle

    assert gc.collect(0) >= 1
