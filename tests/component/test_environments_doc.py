"""docs/guides/environments.md says what the code does: its files load as shown, its error is
the one printed, its key table is the declared one."""

from __future__ import annotations

import re

from gitops.sources.trees import MemoryTree
from gitops.specs.environments import overridable_keys
from gitops.specs.loading import Loader
from tests.support.docs import ROOT

PAGE = (ROOT / "docs" / "guides" / "environments.md").read_text()
BLOCKS = re.findall(r"```toml\n(.*?)```", PAGE, re.DOTALL)
APP = (ROOT / "deployments" / "apps" / "echo.py").read_text()


def block(first_line: str, number: int = 0) -> str:
    found = [text for text in BLOCKS if text.startswith(first_line + "\n")]
    return found[number]


def load(environment: str, text: str) -> list[str]:
    tree = MemoryTree(
        {
            "deployments/echo.toml": block("# deployments/echo.toml"),
            "deployments/__init__.py": "",
            "deployments/apps/__init__.py": "",
            "deployments/apps/echo.py": APP,
            f"environments/{environment}.toml": text,
        }
    )
    return [str(error) for error in Loader(environment=environment).load_tree(tree).errors]


def test_the_prod_file_with_the_pages_mistake_gives_the_error_the_page_shows() -> None:
    shown = re.search(r"```\n(environments/prod\.toml:\d+:\d+: .*)\n```", PAGE)
    assert shown is not None and "(here with `num_replicas = 4` added to prod's file)" in PAGE
    mistaken = block("# environments/prod.toml").replace("[backends.echo-v1]\n", "[backends.echo-v1]\nnum_replicas = 4\n", 1)
    assert load("prod", mistaken) == [shown.group(1)]


def test_the_prod_file_as_shown_is_valid() -> None:
    assert load("prod", block("# environments/prod.toml")) == []


def test_the_promotion_and_sync_window_files_are_valid() -> None:
    assert load("staging", block("# environments/staging.toml")) == []
    assert load("prod", block("# environments/prod.toml", 1)) == []
    pull_request = next(text for text in BLOCKS if 'mode = "pull_request"' in text)
    assert load("staging", pull_request) == []


def test_the_key_table_lists_exactly_the_declared_keys() -> None:
    for section in ("backends", "endpoints"):
        row = re.search(rf"\| `\[{section}\.NAME\]` \| (.*) \|", PAGE)
        assert row is not None
        listed = sorted(re.findall(r"`([a-z_]+)`", row.group(1).replace("`env_vars`", "")))
        assert listed == sorted(overridable_keys(section))
