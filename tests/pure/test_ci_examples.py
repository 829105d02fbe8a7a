"""The CI examples under docs/ci call `gitops` with flags the CLI has."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from gitops.cli import build_parser

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ci"


def gitops_calls(text: str) -> list[list[str]]:
    """Every `gitops …` command line of a workflow, up to a redirection or `||`."""
    calls = []
    for line in text.splitlines():
        found = re.search(r"(?:^|\s|- )(gitops \S.*)", line)
        if found and not line.lstrip().startswith("#"):
            command = re.split(r"\s(?:>|\|\||>>)\s", found.group(1))[0]
            calls.append(shlex.split(re.sub(r"\$\{\{[^}]*\}\}|\$\w+", "X", command)))
    return calls


@pytest.mark.parametrize("example", ["github-actions.yml", "gitlab-ci.yml"])
def test_a_ci_example_is_yaml_whose_gitops_commands_parse(example: str) -> None:
    text = (DOCS / example).read_text()
    assert yaml.safe_load(text)
    calls = gitops_calls(text)
    assert [call[1] for call in calls] == ["validate", "plan"]
    for call in calls:
        build_parser().parse_args(call[1:])  # exits 2 (SystemExit) on an unknown flag
