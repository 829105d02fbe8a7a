"""What a plain `pip install ray-gitops` brings is enough to import every module it ships."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions, requires

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from docgen import ROOT

PACKAGES = ("gitops", "controller", "proxy", "replica", "vocabulary")


def _name(requirement: str) -> str:
    return canonicalize_name(Requirement(requirement).name)


def _applies(requirement: str) -> bool:
    """Needed here without extras: no marker, or one true on this Python."""
    marker = Requirement(requirement).marker
    return marker is None or marker.evaluate({"extra": ""})


def _runtime_closure() -> set[str]:
    """The declared runtime dependencies and everything they require, without extras."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    todo, seen = [_name(r) for r in declared], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for requirement in requires(name) or []:
            if _applies(requirement):
                todo.append(_name(requirement))
    return seen


def _imported_top_levels() -> set[str]:
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    found |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return found - set(PACKAGES) - set(sys.stdlib_module_names)


def test_every_third_party_import_comes_with_the_runtime_dependencies() -> None:
    distributions = packages_distributions()
    closure = _runtime_closure()
    missing = sorted(
        module for module in _imported_top_levels()
        if not {canonicalize_name(d) for d in distributions.get(module, [module])} & closure
    )
    assert missing == []


def test_the_version_is_the_distributions() -> None:
    from importlib.metadata import version

    import gitops

    assert gitops.__version__ == version("ray-gitops")
