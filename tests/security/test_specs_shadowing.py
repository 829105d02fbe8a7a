"""A module of the repository named like one the replicas need (row 12): the
repository root is first on a replica's import path, so `os.py` or `gitops/`
there would replace Python's or ray-gitops' own. Refused at validation, at
the file, with the reason."""

from __future__ import annotations

import pytest

from gitops.sources.trees import MemoryTree
from gitops.specs.loading import Loader, LoadResult

ECHO_PY = "class Echo:\n    def __call__(self, request):\n        return 'hi'\n"
SPEC = '[backends.echo]\nimport_path = "apps.echo:Echo"\n'
OWN = ("gitops", "controller", "proxy", "replica", "vocabulary", "httpedge", "datalink", "telemetry", "ray_gitops", "hardening")


def load(extra: dict[str, str], spec: str = SPEC) -> LoadResult:
    return Loader().load_tree(MemoryTree({"apps/echo.py": ECHO_PY, "deployments/echo.toml": spec, **extra}))


@pytest.mark.parametrize(("path", "name"), [("os.py", "os"), ("json/__init__.py", "json"), ("asyncio.py", "asyncio")])
def test_a_module_named_like_the_standard_library_is_refused(path: str, name: str) -> None:
    result = load({path: ""})
    assert result.state is None
    assert [str(error) for error in result.errors] == [
        f"{path}:1:1: module '{name}' is also a module of Python's standard library: replicas import the "
        f"repository's '{name}' instead (the repository root is first on their import path); rename it"
    ]


@pytest.mark.parametrize("name", [*OWN, "ray"])
def test_a_module_named_like_ray_gitops_or_ray_is_refused(name: str) -> None:
    result = load({f"{name}/__init__.py": ""})
    assert [str(error) for error in result.errors] == [
        f"{name}/__init__.py:1:1: module '{name}' is also a module of ray-gitops or Ray: replicas import the "
        f"repository's '{name}' instead (the repository root is first on their import path); rename it"
    ]


def test_the_same_names_deeper_in_the_repository_are_fine() -> None:
    assert load({"apps/os.py": "", "apps/json/__init__.py": "", "apps/gitops/__init__.py": ""}).ok


def test_a_checkout_of_ray_gitops_itself_keeps_its_own_packages_but_not_a_stdlib_clash() -> None:
    own = {f"{name}/__init__.py": "" for name in OWN}
    assert load(own).ok
    assert [error.file for error in load({**own, "types.py": ""}).errors] == ["types.py"]


def test_a_module_added_beside_unchanged_specs_is_found_by_a_warm_loader() -> None:
    loader = Loader()
    files = {"apps/echo.py": ECHO_PY, "deployments/echo.toml": SPEC}
    assert loader.load_tree(MemoryTree(files)).ok
    assert [error.file for error in loader.load_tree(MemoryTree({**files, "os.py": ""})).errors] == ["os.py"]
