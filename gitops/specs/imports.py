"""Static check of a backend's `module:attribute` import path at one commit.

The module is resolved from the repository root as Python would
(`a/b/__init__.py` before `a/b.py`) and parsed with `ast`; the attribute
must be bound at module level (def, async def, class, assignment, import).
User code is never imported or executed here: validation must be safe on
any commit and must not need the code's dependencies.
"""

from __future__ import annotations

import ast
import enum
import warnings
from dataclasses import dataclass

from gitops.sources.hashing import Tree

__all__ = [
    "AttributeKind", "ResolvedImport", "class_methods", "module_files", "module_functions", "module_names",
    "read_module", "resolve_import",
]


class AttributeKind(str, enum.Enum):
    CLASS = "class"
    FUNCTION = "function"
    # Bound by assignment, import or `import *`: what it is is only known at run time.
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ResolvedImport:
    """Where an import path leads; `error` is set when it leads nowhere."""

    module_file: str | None
    kind: AttributeKind | None
    error: str | None = None


def module_files(module: str) -> tuple[str, str]:
    """The files that could hold `module`, in the order Python tries them."""
    base = module.replace(".", "/")
    return f"{base}/__init__.py", f"{base}.py"


def resolve_import(tree: Tree, import_path: str, method: str = "__call__") -> ResolvedImport:
    """Where `import_path` leads; a class there must define `method` (its handler:
    `__call__`, or a v2 model's `predict`) unless it may inherit it."""
    module, _, attribute = import_path.partition(":")
    found, syntax, error = read_module(tree, module)
    if syntax is None or found is None:
        return ResolvedImport(found, None, error)
    names, has_star = _module_names(syntax.body)
    kind = names.get(attribute, AttributeKind.UNKNOWN if has_star else None)
    if kind is None:
        return ResolvedImport(found, None, f"'{attribute}' is not defined at module level in {found}")
    problem = _class_error(syntax.body, attribute, found, method) if kind is AttributeKind.CLASS else None
    return ResolvedImport(found, kind, problem)


def read_module(tree: Tree, module: str) -> tuple[str | None, ast.Module | None, str | None]:
    """The file holding `module`, its syntax tree, and why there is none (not found, not UTF-8, not Python)."""
    candidates = module_files(module)
    found = next((path for path in candidates if tree.exists(path) and not tree.is_dir(path)), None)
    if found is None:
        return None, None, f"module '{module}' not found (no {' or '.join(candidates)})"
    try:
        return found, _parse(tree.read(found).decode("utf-8"), found), None
    except UnicodeDecodeError:
        return found, None, f"{found} is not valid UTF-8"
    except SyntaxError as error:
        return found, None, f"{found}:{error.lineno}: cannot parse: {error.msg}"
    except (ValueError, RecursionError, MemoryError) as error:
        return found, None, f"{found}: cannot parse: {error}"


def class_methods(tree: Tree, import_path: str) -> frozenset[str] | None:
    """The names a class at `import_path` binds in its body, when that is all it has: None when it has
    bases other than `object` (they may add methods; only run time can tell) or is no class found."""
    module, _, attribute = import_path.partition(":")
    _, syntax, _ = read_module(tree, module)
    if syntax is None:
        return None
    found = _module_classes(syntax.body).get(attribute)
    if found is None or any(not (isinstance(base, ast.Name) and base.id == "object") for base in found.bases):
        return None
    return frozenset(_module_names(found.body)[0])


def module_functions(body: list[ast.stmt]) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions a module defines (also inside if/try/with), the last definition winning."""
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = node
        for nested in _nested_bodies(node):
            found.update(module_functions(nested))
    return found


def module_names(body: list[ast.stmt]) -> dict[str, AttributeKind]:
    """The names a module binds at module level and what each is (`AttributeKind`)."""
    return _module_names(body)[0]


def _parse(source: str, filename: str) -> ast.Module:
    # Warnings about the user's code (e.g. invalid escapes) are not ours to raise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(source, filename=filename)


def _module_names(body: list[ast.stmt]) -> tuple[dict[str, AttributeKind], bool]:
    """Names bound at module level (also inside if/try/with), the last binding winning."""
    names: dict[str, AttributeKind] = {}
    has_star = False
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = AttributeKind.FUNCTION
        elif isinstance(node, ast.ClassDef):
            names[node.name] = AttributeKind.CLASS
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets: list[ast.expr] = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(dict.fromkeys(_bound_names(targets), AttributeKind.UNKNOWN))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                has_star |= alias.name == "*"
                names[alias.asname or alias.name.split(".")[0]] = AttributeKind.UNKNOWN
        for nested in _nested_bodies(node):
            inner, star = _module_names(nested)
            names.update(inner)
            has_star |= star
    return names, has_star


def _nested_bodies(node: ast.stmt) -> list[list[ast.stmt]]:
    if isinstance(node, (ast.If, ast.For, ast.AsyncFor, ast.While)):
        return [node.body, node.orelse]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [node.body]
    if isinstance(node, (ast.Try, ast.TryStar)):
        handlers = [handler.body for handler in node.handlers]
        return [node.body, *handlers, node.orelse, node.finalbody]
    return []


def _bound_names(targets: list[ast.expr]) -> list[str]:
    found: list[str] = []
    for target in targets:
        if isinstance(target, ast.Name):
            found.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            found.extend(_bound_names(list(target.elts)))
    return found


def _class_error(body: list[ast.stmt], name: str, module_file: str, method: str) -> str | None:
    """A class without bases must define `method` itself to handle requests."""
    last = _module_classes(body)[name]
    if any(not (isinstance(base, ast.Name) and base.id == "object") for base in last.bases):
        return None  # `method` may be inherited; only run time can tell
    if method in _module_names(last.body)[0]:
        return None
    purpose = "to handle requests" if method == "__call__" else "(a v2 model's predict(inputs) -> outputs)"
    return f"class '{name}' in {module_file} has no {method} method {purpose}"


def _module_classes(body: list[ast.stmt]) -> dict[str, ast.ClassDef]:
    found: dict[str, ast.ClassDef] = {}
    for node in body:
        if isinstance(node, ast.ClassDef):
            found[node.name] = node
        for nested in _nested_bodies(node):
            found.update(_module_classes(nested))
    return found
