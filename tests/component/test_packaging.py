"""What a plain `pip install ray-gitops` brings is enough to import every module it ships."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions, requires

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from docgen import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The packages the wheel ships (pyproject's setuptools include patterns).
PACKAGES = tuple(pattern.rstrip("*") for pattern in PROJECT["tool"]["setuptools"]["packages"]["find"]["include"])
# Imported only inside the function that needs them, and installed by their extra
# (`pip install "ray-gitops[vllm]"`): the vLLM adapter (ray_gitops.llm.vllm_engine).
LAZY_EXTRAS = ("vllm",)


def _applies(requirement: Requirement, extras: frozenset[str]) -> bool:
    """Needed with these extras on this Python: no marker, or one that holds."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})


def _runtime_closure() -> set[str]:
    """The declared runtime dependencies and everything they require, with the
    extras they ask for (uvicorn[standard]) and none of ours."""
    todo = [Requirement(r) for r in PROJECT["project"]["dependencies"]]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        requirement = todo.pop()
        key = (canonicalize_name(requirement.name), frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        for text in requires(requirement.name) or []:
            needed = Requirement(text)
            if _applies(needed, key[1]):
                todo.append(needed)
    return {name for name, _ in seen}


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
    optional = PROJECT["project"]["optional-dependencies"]
    lazy = {canonicalize_name(Requirement(r).name) for extra in LAZY_EXTRAS for r in optional[extra]}
    assert [module for module in missing if canonicalize_name(module) not in lazy] == []


def test_the_version_is_the_distributions() -> None:
    from importlib.metadata import version

    import gitops

    assert gitops.__version__ == version("ray-gitops")
