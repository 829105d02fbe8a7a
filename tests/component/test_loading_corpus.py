"""Golden files: every broken spec tree in tests/spec_corpus/ gives exactly its
expected errors, FILE:LINE:COL: message, one per line in expected.txt.

Each case is a small repository tree (deployments/*.toml, maybe apps/ code);
tests/spec_corpus/_shared/ is merged into every case so cases can import
`apps.echo`. A case's own files win over shared ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops.sources.trees import MemoryTree
from gitops.specs.loading import Loader

CORPUS = Path(__file__).resolve().parent.parent / "spec_corpus"
SHARED = CORPUS / "_shared"
CASES = sorted(path for path in CORPUS.iterdir() if path.is_dir() and path != SHARED)


def read_tree(*roots: Path) -> MemoryTree:
    files: dict[str, bytes] = {}
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and path.name != "expected.txt" and "__pycache__" not in path.parts:
                files[path.relative_to(root).as_posix()] = path.read_bytes()
    return MemoryTree(files)


def test_the_corpus_has_at_least_thirty_cases() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_broken_spec_tree_reports_its_expected_errors(case: Path) -> None:
    expected = (case / "expected.txt").read_text().splitlines()
    result = Loader().load_tree(read_tree(SHARED, case))
    assert result.state is None
    assert [str(error) for error in result.errors] == expected
