"""The map checks itself: the words that describe the layout match the tree.

- Every package's `__init__.py` docstring names each of its modules and
  subpackages (as `name`, `name/`, `name.attribute` or `package.name`) and
  names no module of its own that does not exist; a dotted name of ours
  (`vocabulary.request_path.wire`, `vocabulary.control.goal_api.REPLICA_CLASS`) must resolve.
- docs/architecture.md: its package picture shows every top-level package
  of `[tool.setuptools.packages.find]`, and each package's bullet names
  every sub-package directly in it; any module a bullet names is there.
  The page stays at the level of packages and their rooms: the module
  lists are the docstrings', so a module that moves within its package
  changes its docstrings, not the page.
- No tracked file cites a repository path (`docs/reference/spec.md`,
  `gitops/loop/agent.py`) or a document by name (`CHANGELOG.md`) that is not there.
- `ray._private` is used only in `controller.shell.ray_private`, and the import
  contracts stay whole: a module that says it is pure is not a named shell,
  each shell is also protected, and every module of a layered package is in
  one of its layers.
- The spec loader's list of our packages (which a spec repository may not
  shadow) is the list of packages we ship.

A backticked lowercase word in a package docstring or an architecture bullet is
read as a module name: write functions with their module (`ticks.tick`) or
with parentheses (`worst()`).
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# A backticked module name: `configs`, `sources/`, `vocabulary.control.goal_api.REPLICA_CLASS`.
_NAME = re.compile(r"`([a-z_][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)/?`")
# A cited repository path: `docs/reference/spec.md`, tests/pure/test_map.py, README.md,
# not part of a longer path, URL or pattern (`*.py`, `<verb>.py`, `/etc/x.toml`).
_PATH = re.compile(
    r"(?<![\w/.*<>{}$~:-])((?:[\w.-]+/)*[\w-]+\.(?:md|py|toml|json|ya?ml|txt|sh|cfg|ini|html))(?![\w/*>}-])"
)
_DOCUMENTED = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
# Files that may cite what is gone: the changelog tells history.
_HISTORY = {"CHANGELOG.md"}


@cache
def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def top_packages() -> list[str]:
    """The packages `[tool.setuptools.packages.find]` ships."""
    return [name.rstrip("*") for name in pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]]


def packages() -> list[Path]:
    """Every package directory of ours, subpackages included."""
    found: list[Path] = []
    for top in top_packages():
        found += sorted(init.parent for init in (ROOT / top).rglob("__init__.py"))
    return found


def children(package: Path) -> set[str]:
    """The modules and subpackages directly in `package`."""
    modules = {path.stem for path in package.glob("*.py") if path.name != "__init__.py"}
    return modules | {path.parent.name for path in package.glob("*/__init__.py")}


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def module_path(dotted: str) -> Path | None:
    """The file of a module or package of ours, if there is one."""
    base = ROOT.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).partition(".")[0] for alias in node.names}
    return names


def unresolved(dotted: str) -> str | None:
    """Why a dotted name of ours does not resolve (None: it does, or it is not ours)."""
    parts = dotted.split(".")
    if parts[0] not in top_packages():
        return None
    for end in range(len(parts), 0, -1):
        path = module_path(".".join(parts[:end]))
        if path is None:
            continue
        if end == len(parts) or parts[end] in top_level_names(path) or module_path(".".join(parts[: end + 1])):
            return None
        return f"`{dotted}`: {'.'.join(parts[:end])} has no {parts[end]}"
    return f"`{dotted}`: no such module"


def naming_problems(words: str, package: Path, where: str) -> list[str]:
    """What `words` (a docstring, a README bullet) get wrong about `package`'s modules."""
    dotted_package = ".".join(package.relative_to(ROOT).parts)
    ours = children(package)
    named: set[str] = set()
    problems: list[str] = []
    for name in _NAME.findall(words):
        if (name.startswith("__") and name not in ours) or name in top_packages():  # `__version__`, `gitops`
            continue
        if "." not in name:
            named.add(name)
            continue
        if name.partition(".")[0] in ours:  # `ticks.TickReport`: relative to the package
            name = f"{dotted_package}.{name}"
        if name.startswith(dotted_package + "."):
            named.add(name.removeprefix(dotted_package + ".").partition(".")[0])
        reason = unresolved(name)
        if reason:
            problems.append(f"{where} names {reason}")
    problems += [f"{where} does not name `{name}`" for name in sorted(ours - named)]
    problems += [f"{where} names `{name}`, which is not in {dotted_package}" for name in sorted(named - ours)]
    return problems


def test_every_package_docstring_names_each_of_its_modules_and_no_other() -> None:
    problems = []
    for package in packages():
        init = package / "__init__.py"
        problems += naming_problems(docstring(init), package, str(init.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def architecture() -> str:
    return ARCHITECTURE.read_text()


def test_the_architecture_package_picture_shows_every_package() -> None:
    blocks = re.findall(r"```\n(.*?)```", architecture(), re.S)
    picture = next((block for block in blocks if "vocabulary" in block), "")
    missing = [name for name in top_packages() if not re.search(rf"\b{name}/", picture)]
    assert picture and not missing, f"docs/architecture.md's package picture misses {missing}"


def architecture_bullet(package: str) -> str:
    """The docs/architecture.md bullet about `package/`: from its `- \\`package/\\`` to the next bullet."""
    match = re.search(rf"^- `{package}/`.*?(?=^- |^\S|\Z)", architecture(), re.S | re.M)
    return match.group(0) if match else ""


def subpackages(package: Path) -> set[str]:
    return {path.parent.name for path in package.glob("*/__init__.py")}


def bullet_problems(words: str, package: Path, where: str) -> list[str]:
    """What a bullet gets wrong about `package`: a sub-package it does not name, or a name that is not there."""
    problems = naming_problems(words, package, where)
    ours = children(package)
    named = {name for name in _NAME.findall(words) if "." not in name and name in ours}
    # Modules need not be named (the docstring lists them); sub-packages must be.
    missing_modules = {f"{where} does not name `{name}`" for name in ours - named - subpackages(package)}
    return [problem for problem in problems if problem not in missing_modules]


def test_the_architecture_page_names_each_package_s_rooms_and_only_what_is_there() -> None:
    problems = []
    for name in top_packages():
        bullet = architecture_bullet(name)
        if not bullet:
            problems.append(f"docs/architecture.md has no bullet starting with `{name}/`")
            continue
        problems += bullet_problems(bullet, ROOT / name, f"docs/architecture.md's `{name}/` bullet")
    assert not problems, "\n".join(problems)


def test_a_bullet_must_name_sub_packages_and_may_leave_modules_to_the_docstring() -> None:
    package = ROOT / "gitops"
    rooms = sorted(subpackages(package))
    assert rooms, "gitops has sub-packages"
    every_room = " ".join(f"`{room}/`" for room in rooms)
    assert bullet_problems(f"- `gitops/` is the agent: {every_room}.", package, "b") == []
    missing = bullet_problems(f"- `gitops/` is the agent: {every_room.replace(f'`{rooms[0]}/`', '')}.", package, "b")
    assert missing == [f"b does not name `{rooms[0]}`"]
    assert bullet_problems(f"- `gitops/`: {every_room}, `no_such_module`.", package, "b") == [
        "b names `no_such_module`, which is not in gitops"
    ]


def tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, text=True
        ).stdout.split("\0")
        return [ROOT / name for name in listed if name]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: the files on disk
        skip = {".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", "build"}
        return [p for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.relative_to(ROOT).parts)]


def prose(path: Path, text: str) -> str:
    """Where a file cites other files: a module's docstrings and comments, a
    page's text outside code (a code span with a space is a command, not a
    citation), a configuration file's comments. String literals are left out:
    tests write paths of their own temporary repositories."""
    if path.suffix == ".py":
        tree = ast.parse(text)
        documented = [tree, *(n for n in ast.walk(tree) if isinstance(n, _DOCUMENTED))]
        docs = [ast.get_docstring(node) or "" for node in documented]
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        comments = [token.string for token in tokens if token.type == tokenize.COMMENT]
        return "\n".join(docs + comments)
    if path.suffix == ".md":
        text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
        return re.sub(r"`[^`\n]*`", lambda span: "" if " " in span.group(0) else span.group(0), text)
    return "\n".join(line.partition("#")[2] for line in text.splitlines())


def cited_paths(text: str, top_level: set[str], documents: set[str]) -> set[str]:
    """The repository paths `text` cites that are not there: under one of the
    repository's top-level directories (`docs/reference/spec.md`), or a document named
    by itself (`CHANGELOG.md`) that no directory holds. `deployments/` is left
    out: it is our example spec tree and every user's spec directory, so a
    guide's `deployments/hello.toml` is a file of the reader's repository."""
    cited: set[str] = set()
    for path in _PATH.findall(text):
        first = path.split("/", 1)[0]
        if "/" in path and first in top_level - {"deployments"} and not (ROOT / path).exists():
            cited.add(path)
        elif re.fullmatch(r"[A-Z][A-Z_]*\.md", path) and path not in documents:
            cited.add(path)
    return cited


def missing_citations(files: list[Path]) -> list[str]:
    relative = [path.relative_to(ROOT) for path in files]
    top_level = {parts.parts[0] for parts in relative if len(parts.parts) > 1}
    documents = {parts.name for parts in relative}
    problems = []
    for path, name in zip(files, relative, strict=True):
        if str(name) in _HISTORY or path.suffix not in {".py", ".md", ".toml", ".cfg", ".yml", ".yaml"}:
            continue
        try:
            text = prose(path, path.read_text())
        except (UnicodeDecodeError, OSError, SyntaxError):
            continue
        problems += [f"{name} cites {cited}, which is not in the repository"
                     for cited in sorted(cited_paths(text, top_level, documents))]
    return problems


def test_no_file_cites_a_file_that_is_not_in_the_repository() -> None:
    problems = missing_citations(tracked_files())
    assert not problems, "\n".join(problems)


def test_a_citation_of_a_missing_file_is_found_and_a_reader_s_file_is_not() -> None:
    gone = prose(Path("x.py"), '"""See `docs/gone.md`."""\n# and NOTES_GONE.md\nPATH = "tests/made_by_a_test.py"\n')
    assert cited_paths(gone, {"docs", "tests"}, {"README.md"}) == {"docs/gone.md", "NOTES_GONE.md"}
    page = prose(Path("x.md"), "Your `app.py`, /etc/gitops/notify.toml, `tests/*.py`, `deployments/hello.toml`, "
                 "`python -m bench --json docs/out.json`, README.md.\n```\ncat docs/made.md\n```\n")
    assert cited_paths(page, {"docs", "tests", "deployments"}, {"README.md"}) == set()


# --- the import contracts stay whole -----------------------------------------------


def product_modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in top_packages():
        for path in sorted((ROOT / top).rglob("*.py")):
            dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found[dotted] = path
    return found


def ray_private_uses(path: Path) -> list[int]:
    """Lines of `path` that use `ray._private` (imports or attribute access)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ray._private"):
            lines.append(node.lineno)
        elif isinstance(node, ast.Import) and any(a.name.startswith("ray._private") for a in node.names):
            lines.append(node.lineno)
        elif (isinstance(node, ast.Attribute) and node.attr == "_private"
              and isinstance(node.value, ast.Name) and node.value.id == "ray"):
            lines.append(node.lineno)
    return lines


def test_ray_s_private_api_is_used_only_in_its_adapter() -> None:
    uses = [
        f"{name}:{line}" for name, path in product_modules().items() if name != "controller.shell.ray_private"
        for line in ray_private_uses(path)
    ]
    assert not uses, f"ray._private outside controller.shell.ray_private: {uses}"
    assert ray_private_uses(product_modules()["controller.shell.ray_private"])


def contracts(kind: str) -> list[dict[str, Any]]:
    return [c for c in pyproject()["tool"]["importlinter"]["contracts"] if c["type"] == kind]


def test_every_shell_is_protected_and_no_shell_says_it_is_pure() -> None:
    [purity] = [c for c in contracts("protected") if "pure" in c["name"]]
    shells = set(purity["allowed_importers"])
    assert shells <= set(purity["protected_modules"]), shells - set(purity["protected_modules"])
    claims = [
        name for name, path in product_modules().items()
        if not path.name == "__init__.py" and re.search(r"(^|[.!]\s+)Pure[.:]", docstring(path))
        and any(name == shell or name.startswith(shell + ".") for shell in shells)
    ]
    assert not claims, f"named as I/O shells, yet their docstrings say Pure: {claims}"


def test_a_spec_repository_may_shadow_none_of_our_packages() -> None:
    # A replica imports the repository's top-level modules before ours; the
    # loader refuses those that would replace one of our packages.
    loading = ast.parse((ROOT / "gitops" / "specs" / "loading.py").read_text())
    [own] = [node.value for node in loading.body if isinstance(node, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "_OWN_PACKAGES" for t in node.targets)]
    named = {c.value for c in ast.walk(own) if isinstance(c, ast.Constant)}
    assert named == set(top_packages())


def test_every_module_of_a_layered_package_is_in_one_of_its_layers() -> None:
    problems = []
    for contract in contracts("layers"):
        for container in contract.get("containers", []):
            layered = {name.strip() for layer in contract["layers"] for name in re.split(r"[|:]", layer)}
            package = ROOT.joinpath(*container.split("."))
            problems += [f"{container}.{name}" for name in sorted(children(package) - layered)]
    assert not problems, f"in no layer of their package's contract: {problems}"
