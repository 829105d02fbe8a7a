"""A timed window's own collector (tests.support.collector): frozen within, each pause recorded, given back after."""

from __future__ import annotations

import gc

from tests.support.collector import settled


def test_within_the_window_the_process_is_frozen_and_each_collection_is_timed() -> None:
    held_before = [{"made": "before"}]
    with settled() as pauses:
        assert gc.get_freeze_count() > 0
        assert not any(obj is held_before for obj in gc.get_objects())
        gc.collect()
        gc.collect(0)
    assert len(pauses) == 2 and all(pause >= 0 for pause in pauses)
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert len(pauses) == 2
