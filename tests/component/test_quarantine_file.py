"""The quarantine survives an agent restart in its state directory, and a broken file is reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops.loop.quarantine_file import QuarantineFile
from gitops.reconcile.rollback import Quarantine, RollbackReason

HELD = Quarantine(good="c3", held=frozenset({"c4"}), reason=RollbackReason.APPLY_FAILED, detail="goal failed")


def test_a_saved_quarantine_is_loaded_by_the_next_agent(tmp_path: Path) -> None:
    QuarantineFile(tmp_path / "quarantine.json").save(HELD)
    assert QuarantineFile(tmp_path / "quarantine.json").load() == HELD


def test_no_file_is_no_quarantine_and_lifting_removes_the_file(tmp_path: Path) -> None:
    store = QuarantineFile(tmp_path / "quarantine.json")
    assert store.load() is None
    store.save(HELD)
    store.save(None)
    assert store.load() is None and not (tmp_path / "quarantine.json").exists()


def test_a_broken_file_is_an_error_that_says_how_to_lift_it(tmp_path: Path) -> None:
    (tmp_path / "quarantine.json").write_text("{not json")
    with pytest.raises(ValueError, match="remove the file to lift it"):
        QuarantineFile(tmp_path / "quarantine.json").load()
