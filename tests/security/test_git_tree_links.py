"""Symbolic links leading outside the repository (row 7): `gitops validate`
names them at their file; the export never follows one; an agent records a
commit holding one as a failed apply, once, and applies nothing."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from gitops.cli import main
from gitops.loop.agent import Agent
from gitops.loop.history import History
from gitops.loop.metrics import AgentMetrics
from gitops.reconcile.outcomes import Outcome
from gitops.reconcile.planner import plan
from gitops.sources.repos import GitSource, SourceError
from gitops.sources.trees import MemoryTree
from gitops.specs.loading import Loader
from gitops.testing import FakeController

ECHO_PY = "class Echo:\n    def __call__(self, request):\n        return 'hi'\n"
SPEC = (
    '[backends.echo]\nimport_path = "apps.echo:Echo"\n\n'
    '[endpoints.echo]\nroute = "/echo"\ntraffic = { echo = 1.0 }\n'
)


def memory_errors(links: dict[str, str], files: dict[str, str] | None = None) -> list[str]:
    tree = MemoryTree({"apps/echo.py": ECHO_PY, "deployments/echo.toml": SPEC, **(files or {})}, links)
    result = Loader().load_tree(tree)
    assert result.state is None
    return [str(error) for error in result.errors]


@pytest.mark.parametrize("target", ["/etc/passwd", "../../etc/passwd", "../.."])
def test_a_link_in_a_code_path_leading_outside_is_refused_at_its_file(target: str) -> None:
    assert memory_errors({"apps/secret": target}) == [
        f"apps/secret:1:1: symbolic link to '{target}' leads outside the repository"
    ]


def test_a_link_leaving_through_another_link_is_refused() -> None:
    assert memory_errors({"apps/up": "..", "apps/out": "up/.."}) == [
        "apps/out:1:1: symbolic link to 'up/..' leads outside the repository"
    ]


def test_a_spec_file_linked_outside_is_refused_without_being_read() -> None:
    assert memory_errors({"deployments/passwd.toml": "/etc/passwd"}) == [
        "deployments/passwd.toml:1:1: symbolic link to '/etc/passwd' leads outside the repository"
    ]


def test_a_link_inside_the_repository_is_followed() -> None:
    tree = MemoryTree({"lib/echo.py": ECHO_PY, "deployments/echo.toml": SPEC}, {"apps": "lib"})
    assert Loader().load_tree(tree).ok


# --- a real repository ----------------------------------------------------------------


@pytest.fixture
def linked_repo(repo):
    repo.write("apps/echo.py", ECHO_PY)
    repo.write("deployments/echo.toml", SPEC)
    os.symlink("/etc/passwd", repo.root / "apps/passwd")
    repo.commit("a link out of the repository")
    return repo


@pytest.mark.real
def test_validate_names_the_link_in_a_commit_and_in_the_working_tree(linked_repo, capsys) -> None:
    expected = ["apps/passwd:1:1: symbolic link to '/etc/passwd' leads outside the repository"]
    spec_path = str(linked_repo.root / "deployments")
    assert main(["validate", spec_path, "--rev", "HEAD"]) == 1
    assert capsys.readouterr().err.splitlines() == expected
    assert main(["validate", spec_path, "--root", str(linked_repo.root)]) == 1
    assert capsys.readouterr().err.splitlines() == expected


@pytest.fixture
def docs_link_repo(repo):
    """Valid specs, and a link out of the repository where validation does not look."""
    repo.write("apps/echo.py", ECHO_PY)
    repo.write("deployments/echo.toml", SPEC)
    (repo.root / "docs").mkdir()
    os.symlink("/etc", repo.root / "docs/etc")
    repo.commit("docs link")
    return repo


@pytest.mark.real
def test_export_refuses_a_link_outside_before_writing_anything(docs_link_repo, tmp_path: Path) -> None:
    source = GitSource(str(docs_link_repo.root), None, tmp_path / "state")
    revision = source.newest()
    with pytest.raises(SourceError) as refused:
        source.export(revision)
    assert str(refused.value) == f"export {revision.short}: docs/etc is a symbolic link to '/etc', outside the repository"
    assert list((tmp_path / "state/exports").iterdir()) == []


@pytest.mark.real
def test_the_agent_records_a_failed_apply_once_and_applies_nothing(docs_link_repo, tmp_path: Path) -> None:
    controller, loader = FakeController(), Loader()
    agent = Agent(
        GitSource(str(docs_link_repo.root), None, tmp_path / "state"),
        controller,
        History(tmp_path / "state/history.db"),
        load=loader.load_tree,
        plan=plan,
        metrics=AgentMetrics(),
    )
    entry = asyncio.run(agent.tick(full=True))
    assert entry.result is Outcome.FAILED
    assert entry.errors == (f"export {docs_link_repo.head()[:7]}: docs/etc is a symbolic link to '/etc', outside the repository",)
    status = agent.status()
    assert (status.status.value, status.errors) == ("Failed", entry.errors)
    asyncio.run(agent.tick(full=True))  # a resync: the same commit stays failed, not recorded again
    assert (controller.calls, len(agent.history())) == ([], 1)
    docs_link_repo.remove("docs/etc")
    docs_link_repo.commit("drop the link")
    assert asyncio.run(agent.tick(full=False)).result is Outcome.APPLIED
