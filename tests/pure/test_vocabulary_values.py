"""`vocabulary` holds values only: no module keeps state of its own.

Read from each module's syntax tree (nothing is imported): a module-level
assignment of a mutable container (a list, dict or set literal or
comprehension) or of a call that does not build a frozen value, an
augmented assignment at module level, and a `global` statement anywhere are
module-level mutable state, which belongs to the replica side
(`ray_gitops.registry`) or to the process that owns it. Context variables
are kept out by an import contract (`pyproject.toml`).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Calls whose result is a frozen value, or a constant one.
FROZEN_CALLS = {
    "frozenset", "tuple", "object",  # `object()`: a sentinel, which has no attributes to change
    "re.compile", "TypeVar", "ParamSpec", "NewType",
    # A configured JSON codec keeps no state between calls; one built per call would cost the
    # request path (`request_keys` reads routing keys from every request's body).
    "json.JSONEncoder", "json.JSONDecoder",
}
# Module-level names that are mutable by type, yet read only; each with why it must be.
ALLOWED = {
    # Module metadata: `import *` and the tools read it; a list by convention.
    "__all__",
    # pydantic's `json_schema_extra` takes a dict (a read-only mapping is refused by its type and
    # by `gitops.specs.environments`, which recognises the marker by it); nothing writes to it.
    "ENVIRONMENT_OVERRIDABLE",
}
_MUTABLE = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)


def _module_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements run at import: the module's, and those nested in its if/try/with blocks."""
    found: list[ast.stmt] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        found.append(node)
        for field in ("body", "orelse", "finalbody"):
            found += _module_statements(getattr(node, field, []))
        for handler in getattr(node, "handlers", []):
            found += _module_statements(handler.body)
    return found


def _names(targets: list[ast.expr]) -> list[str]:
    return [ast.unparse(target) for target in targets]


def mutable_state(source: str, where: str) -> list[str]:
    """Where `source` keeps module-level mutable state, as `where:line: why`."""
    tree = ast.parse(source)
    problems = [f"{where}:{node.lineno}: `global {', '.join(node.names)}`"
                for node in ast.walk(tree) if isinstance(node, ast.Global)]
    for node in _module_statements(tree.body):
        if isinstance(node, ast.AugAssign):
            problems.append(f"{where}:{node.lineno}: `{ast.unparse(node.target)}` changed at import")
            continue
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        names = _names(targets)
        if set(names) <= ALLOWED:
            continue
        if isinstance(value, _MUTABLE):
            problems.append(f"{where}:{node.lineno}: {', '.join(names)} is a mutable {type(value).__name__}")
        elif isinstance(value, ast.Call) and ast.unparse(value.func) not in FROZEN_CALLS:
            problems.append(f"{where}:{node.lineno}: {', '.join(names)} = {ast.unparse(value.func)}(...), not a frozen value")
    return problems


def test_no_vocabulary_module_keeps_module_level_mutable_state() -> None:
    modules = sorted((ROOT / "vocabulary").rglob("*.py"))
    assert len(modules) > 10
    problems = [p for path in modules for p in mutable_state(path.read_text(), str(path.relative_to(ROOT)))]
    assert not problems, "\n".join(problems)


def test_the_check_finds_each_kind_of_state_and_passes_frozen_values() -> None:
    state = """
import re
from typing import TypeVar
__all__ = ["X"]
CACHE = {}
SEEN: list[str] = []
NAMES = {n for n in "ab"}
LOCK = Lock()
if True:
    HIDDEN = set()
COUNT = 0
COUNT += 1
PATTERN = re.compile("x")
FROZEN = frozenset({"a"})
T = TypeVar("T")
LIMIT = 10 * 1024
class Kept:
    cache = {}
    def bump(self) -> None:
        global COUNT
"""
    found = mutable_state(state, "m.py")
    assert [problem.split(":")[1] for problem in found] == ["20", "5", "6", "7", "8", "10", "12"], found
