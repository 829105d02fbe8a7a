"""Spec tree -> the frozen desired state, or every error in it with its location.

Public API (other modules code against exactly this): a `Loader`, with
`load_tree(tree, spec_path)`, `load_commit(repo, rev, spec_path)` and
`load_directory(path, root)`, each returning a `LoadResult` of a
`DesiredState` (a fully resolved `vocabulary.spec.state.ServingState`) or
`SpecError`s. Trees are read only through `gitops.sources.trees.Tree`.

Loading never raises on bad input: TOML syntax, table contents
(`gitops.specs.models`), rules across files (`gitops.specs.documents`), import paths
(`gitops.specs.imports`), gRPC servicers (`gitops.specs.servicers`: an endpoint's
`grpc_service` and `grpc_methods` are derived from its backends' `grpc_servicer`)
and code paths all become `SpecError`s, reported at once.
A backend's version hashes its code as `gitops.specs.code` says: never the
spec files.

Hostile trees are bounded (`gitops.specs.limits`, docs/guides/security.md): spec
files are sized before they are read; a symbolic link under the spec path
or a backend's code paths that leads outside the repository is an error at
its file (the export refuses any other); a top-level module of the
repository named like a module of the standard library, of ray-gitops or of
Ray is an error at its file, since the repository root comes first on the
replicas' import path.

A loader caches its results by git hashes: the spec path's tree hash, then
the hashes of every path the backends' code depends on, so re-loading an
unchanged commit costs a few hash look-ups. Each spec file's parse is kept
by its path and blob hash too (for the files of the last tree loaded), so a
commit changing one file of thousands parses one file. The caches belong to
the loader object: whoever loads (a command, the agent, a bench, a test)
makes one and passes it on; a fresh loader starts cold.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Hashable, Iterator, Mapping

from vocabulary.spec.backends import BackendConfig, ModelConfig, SecretConfig
from vocabulary.spec.endpoints import EndpointConfig, GrpcMethodKind
from vocabulary.spec.state import ServingState
from gitops.specs.pins.automation import AUTOMATION_PATH
from gitops.specs.code import CodeIndex
from gitops.specs.imports import AttributeKind, ResolvedImport, class_methods, module_files, resolve_import
from gitops.specs.servicers import ResolvedServicer, missing_methods, resolve_servicer
from gitops.specs.documents import Documents, ParsedFile, SpecError, combine, oversized_file, parse_file
from gitops.specs.environments import (
    ENVIRONMENTS_PATH,
    EnvironmentFile,
    EnvironmentSettings,
    environment_path,
    overlay,
    parse_environment,
)
from gitops.specs.limits import SpecLimits, size_text
from gitops.sources.hashing import escaping_links, resolve_inside
from gitops.sources.trees import CommitTree, DirectoryTree, Tree, find_toplevel
from gitops.specs.models import DERIVED_BACKEND_FIELDS, DERIVED_ENDPOINT_FIELDS, BackendSpec, EndpointSpec, Loc
from gitops.specs.pins.pinned_models import bind_models
from gitops.specs.secrets import age_file_problem
from gitops.specs.versions import code_paths, default_code_path, derive_version

__all__ = ["DesiredState", "SpecError", "LoadResult", "Loader", "environment_names"]

DesiredState = ServingState
CACHE_SIZE = 64


@dataclass(frozen=True)
class LoadResult:
    """A desired state or its errors; `code_paths` names, per backend, the
    paths its version hashes (`gitops.specs.code`), for `gitops plan`."""

    state: ServingState | None
    errors: tuple[SpecError, ...] = ()
    # The loader's environment's settings ([promotion], [[sync_windows]]), when it has one.
    environment: EnvironmentSettings | None = None
    code_paths: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Per backend that reserves GPUs or has a [placement]: where that is written, for an error
    # the cluster's nodes give at plan time (`gitops.reconcile.gpus.capacity_problems`).
    placements: Mapping[str, tuple[str, int, int]] = field(default_factory=dict)

    def placement_error(self, backend: str, message: str) -> SpecError:
        """`message` about `backend`'s placement, at the line that says it (else the spec path's first)."""
        file, line, col = self.placements.get(backend, ("", 1, 1))
        return SpecError(file, line, col, f"backends.{backend}: {message}")

    @property
    def ok(self) -> bool:
        return not self.errors


class _LRU:
    """A small thread-safe LRU: the agent may load from more than one thread."""

    def __init__(self, size: int) -> None:
        self._items: OrderedDict[Hashable, object] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> object | None:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
            return self._items.get(key)

    def put(self, key: Hashable, value: object) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


class Loader:
    """Loads spec trees, remembering the last `cache_size` results of each stage."""

    def __init__(
        self, cache_size: int = CACHE_SIZE, limits: SpecLimits = SpecLimits(), environment: str | None = None
    ) -> None:
        self.limits = limits
        # With an environment, `environments/NAME.toml` is applied on top (`gitops.specs.environments`).
        self.environment = environment
        self._documents = _LRU(cache_size)
        self._results = _LRU(cache_size)
        # A commit never changes, so its result is final: re-loading it skips hashing.
        self._by_identity = _LRU(cache_size)
        # (path, blob hash) -> (size, parse) for the spec files of the last tree read.
        self._files: dict[tuple[str, str], tuple[int, ParsedFile]] = {}
        self._built = _Built()  # the configs of the last resolve
        self._files_lock = threading.Lock()  # guards _files and _built

    def load_tree(self, tree: Tree, spec_path: str = "deployments") -> LoadResult:
        spec_path = spec_path.strip("/")
        key = None if tree.identity is None else (tree.identity, spec_path)
        cached = None if key is None else self._by_identity.get(key)
        if isinstance(cached, LoadResult):
            return cached
        try:
            with _collector_paused():
                result = self._load(tree, spec_path)
        except (OSError, KeyError) as error:
            # An unreadable file (permissions, a dangling link) is reported, not raised.
            unreadable = SpecError(spec_path or ".", 1, 1, f"cannot read the spec tree: {error}")
            return LoadResult(None, (unreadable,))
        if key is not None:
            self._by_identity.put(key, result)
        return result

    def load_commit(self, repo_path: str | Path, rev: str = "HEAD", spec_path: str = "deployments") -> LoadResult:
        """Load the specs of one commit of the repository at `repo_path`;
        raises UserError only for a bad repository or revision."""
        return self.load_tree(CommitTree(repo_path, rev), spec_path)

    def load_directory(self, path: str | Path, root: str | Path | None = None) -> LoadResult:
        """Load a spec directory on disk; import paths resolve from `root`
        (default: the git top level containing `path`, else its parent)."""
        target = Path(path).resolve()
        base = Path(root).resolve() if root is not None else find_toplevel(target) or target.parent
        try:
            spec_path = target.relative_to(base).as_posix()
        except ValueError:
            outside = SpecError(str(path), 1, 1, f"spec path is outside the root {base}")
            return LoadResult(None, (outside,))
        return self.load_tree(DirectoryTree(base), "" if spec_path == "." else spec_path)

    def _load_specs(self, tree: Tree, spec_path: str, environment: EnvironmentFile | None) -> LoadResult:
        spec_hash = tree.hash(spec_path)
        if spec_hash is None:
            missing = SpecError(spec_path or ".", 1, 1, f"spec path '{spec_path}' does not exist")
            return LoadResult(None, (missing,))
        listed = tree.files(spec_path)
        # A spec file may be a link to a file outside the spec path, whose
        # content the spec path's hash does not cover: the keys name it.
        linked = tuple(_blob_key(tree, path) for path in listed if tree.link_target(path) is not None)
        if environment is not None:
            linked += ((environment_path(environment.name), tree.hash(environment_path(environment.name)) or ""),)
        documents = self._read_documents(tree, listed, (spec_path, spec_hash, linked), environment)
        paths = _dependency_paths(documents)
        # Checked on every load, not cached: links and top-level modules
        # depend on more of the tree than the hashed paths.
        code_errors = _escaping_links(tree, paths) + _shadowing_modules(tree, documents)
        if code_errors:
            return _failed([*documents.errors, *code_errors])
        key = (spec_path, spec_hash, linked, tuple((path, tree.hash(path)) for path in paths))
        cached = self._results.get(key)
        if isinstance(cached, LoadResult):
            return cached
        with self._files_lock:
            before = self._built
        result, built = _resolve(tree, documents, before, CodeIndex(tree, spec_path))
        with self._files_lock:
            self._built = built
        self._results.put(key, result)
        return result

    def _load(self, tree: Tree, spec_path: str) -> LoadResult:
        environment = self._environment_file(tree)
        result = self._load_specs(tree, spec_path, environment)
        if environment is None or not result.ok:
            return result
        return replace(result, environment=environment.settings)

    def _environment_file(self, tree: Tree) -> EnvironmentFile | None:
        if self.environment is None:
            return None
        path = environment_path(self.environment)
        if tree.hash(path) is None:
            return parse_environment(self.environment, None, self.limits)
        if tree.link_target(path) is not None:
            refused = SpecError(path, 1, 1, "an environment file must be a file, not a symbolic link")
            return EnvironmentFile(self.environment, path, errors=(refused,))
        size = tree.sizes([path]).get(path, 0)
        if size > self.limits.max_file_bytes:
            return EnvironmentFile(self.environment, path, errors=(oversized_file(path, size, self.limits),))
        return parse_environment(self.environment, tree.read_files([path]).get(path), self.limits)

    def _read_documents(
        self, tree: Tree, listed: list[str], key: Hashable, environment: EnvironmentFile | None = None
    ) -> Documents:
        cached = self._documents.get(key)
        if isinstance(cached, Documents):
            return cached
        errors = _escaping_links(tree, listed)
        unsafe = {error.file for error in errors}
        tomls = [path for path in listed if path.endswith(".toml") and path not in unsafe and not _is_environment_file(path)]
        with self._files_lock:
            known = self._files
        blobs = {path: _blob_key(tree, path) for path in tomls}
        sizes = {path: known[blobs[path]][0] for path in tomls if blobs[path] in known}
        sizes.update(tree.sizes([path for path in tomls if path not in sizes]))
        files, size_errors = _within_limits(tomls, sizes, self.limits)
        parsed = {path: known[blobs[path]][1] for path in files if blobs[path] in known}
        contents = tree.read_files([path for path in files if path not in parsed])
        parsed.update({path: parse_file(path, data, self.limits) for path, data in contents.items()})
        with self._files_lock:
            self._files = {blobs[path]: (sizes[path], parsed[path]) for path in files if blobs[path][1]}
        overlaid: tuple[SpecError, ...] = ()
        if environment is not None:
            parsed, overlaid = overlay(parsed, environment, self.limits)
        documents = combine(parsed, tuple(errors + size_errors) + overlaid, self.limits)
        self._documents.put(key, documents)
        return documents


def _blob_key(tree: Tree, path: str) -> tuple[str, str]:
    """What a file's parse is kept by: its path and the blob hash of what it
    reads as (through a link inside the tree: the target's); "" when it
    leads nowhere, and such a file's parse is never kept."""
    resolved = resolve_inside(tree, path) if tree.link_target(path) is not None else path
    return (path, (tree.hash(resolved) if resolved is not None else None) or "")


# --- stages -------------------------------------------------------------------------


def _within_limits(
    files: list[str], sizes: dict[str, int], limits: SpecLimits
) -> tuple[list[str], list[SpecError]]:
    """The spec files to read: each within the file limit, all within the tree
    limit; sizes come from the tree, so nothing too big is ever read."""
    accepted: list[str] = []
    errors: list[SpecError] = []
    total = 0
    for path in files:
        size = sizes[path]
        total += size
        if size > limits.max_file_bytes:
            errors.append(oversized_file(path, size, limits))
        elif total > limits.max_tree_bytes:
            limit = size_text(limits.max_tree_bytes)
            errors.append(SpecError(path, 1, 1, f"spec files reach {total} bytes here; together they may have at most {limit}"))
            break
        else:
            accepted.append(path)
    return accepted, errors


def _escaping_links(tree: Tree, paths: list[str]) -> list[SpecError]:
    """Each symbolic link under `paths` that leads outside the repository.

    The repository root ("", a root-level module's code path) is left to the
    export, which refuses such links anywhere: a working directory's root
    holds things git never sees (a virtualenv's links to the interpreter)."""
    files = sorted({file for top in paths if top for file in tree.files(top)})
    return [
        SpecError(path, 1, 1, f"symbolic link to '{target}' leads outside the repository")
        for path, target in escaping_links(tree, files)
    ]


# Top-level modules a replica imports besides the user's: Python's own, ray-gitops' and Ray's.
_OWN_PACKAGES = frozenset(
    {"gitops", "controller", "proxy", "replica", "vocabulary", "httpedge", "datalink", "telemetry", "ray_gitops",
     "hardening"}
)
_TAKEN_MODULES = frozenset(sys.stdlib_module_names) | _OWN_PACKAGES | {"ray"}


def _shadowing_modules(tree: Tree, documents: Documents) -> list[SpecError]:
    """Top-level modules of the repository that would replace one the replicas need.

    A checkout of ray-gitops itself (all of its packages at the root) is the
    exception for its own packages: they are the code the replicas run."""
    if not documents.backends:
        return []
    own_checkout = all(tree.exists(f"{name}/__init__.py") for name in _OWN_PACKAGES)
    taken = _TAKEN_MODULES - (_OWN_PACKAGES if own_checkout else frozenset())
    errors: list[SpecError] = []
    for entry in tree.children(""):
        name = entry.removesuffix(".py")
        path = entry if entry.endswith(".py") else f"{entry}/__init__.py"
        if name in taken and tree.exists(path):
            owner = "Python's standard library" if name in sys.stdlib_module_names else "ray-gitops or Ray"
            errors.append(
                SpecError(
                    path, 1, 1,
                    f"module '{name}' is also a module of {owner}: replicas import the repository's "
                    f"'{name}' instead (the repository root is first on their import path); rename it",
                )
            )
    return errors


def _failed(errors: tuple[SpecError, ...] | list[SpecError]) -> LoadResult:
    return LoadResult(None, tuple(sorted(set(errors), key=SpecError.sort_key)))


def _dependency_paths(documents: Documents) -> list[str]:
    """Every path whose content can change a backend's import check or version."""
    paths: set[str] = set()
    for declared in documents.backends.values():
        if declared.spec is None or declared.spec.import_path is None:  # an [llm] backend runs no code of the tree
            continue
        modules = [declared.spec.import_path, declared.spec.grpc_servicer or declared.spec.import_path]
        for candidate in (file for module in modules for file in module_files(module.partition(":")[0])):
            paths |= {candidate, default_code_path(candidate)}
        paths |= set(declared.spec.code_paths or ())
    # A secret's file: a new value is a new load result (its keyed hash changes).
    paths |= {declared.spec.file for declared in documents.secrets.values() if declared.spec is not None}
    return sorted(paths)


_CodeHashes = tuple[tuple[str, str | None], ...]
# What an endpoint's config takes from its backends' servicers: the service, its methods and kinds.
_Derived = tuple[str | None, tuple[tuple[str, GrpcMethodKind], ...]]


@dataclass(frozen=True)
class _Built:
    """The configs the last resolve built, by name, with the spec object each
    came from (a file's parse is kept, so an unchanged file gives the same
    objects) and, for a backend, its code paths' hashes: a config is built
    again only when one of them changed."""

    backends: Mapping[str, tuple[BackendSpec, _CodeHashes, BackendConfig]] = field(default_factory=dict)
    endpoints: Mapping[str, tuple[EndpointSpec, _Derived, EndpointConfig]] = field(default_factory=dict)


def _resolve(tree: Tree, documents: Documents, before: _Built, code: CodeIndex) -> tuple[LoadResult, _Built]:
    errors = list(documents.errors)
    built: dict[str, tuple[BackendSpec, _CodeHashes, BackendConfig]] = {}
    imports: dict[tuple[str, str], ResolvedImport] = {}  # one tree: an import path resolves once
    servicers: dict[str, ResolvedServicer] = {}  # backend -> its grpc_servicer's service and methods
    for name, declared in documents.backends.items():
        if declared.spec is None:
            continue
        import_path = declared.spec.import_path
        method = "__call__" if declared.spec.protocol is None else "predict"  # protocol = "v2": a model class
        if import_path is None:  # [llm]: the built-in OpenAI app, installed with ray-gitops
            target = ResolvedImport(None, AttributeKind.CLASS, None)
        else:
            if (import_path, method) not in imports:
                imports[import_path, method] = resolve_import(tree, import_path, method)
            target = imports[import_path, method]
        servicer = None
        if declared.spec.grpc_servicer is not None:
            servicer = servicers[name] = resolve_servicer(tree, declared.spec.grpc_servicer)
        resolved, problems = _resolve_backend(
            tree, name, declared.spec, target, before.backends.get(name), code, servicer
        )
        errors.extend(declared.error(loc, message) for loc, message in problems)
        if resolved is not None:
            built[name] = resolved
    secrets, secret_errors = _secret_files(tree, documents)
    errors.extend(secret_errors)
    if errors:
        return _failed(errors), before
    derived: dict[str, _Derived] = {}
    for name, declared_endpoint in documents.endpoints.items():
        found, problems = _served_service(name, declared_endpoint.spec, servicers, documents)
        derived[name] = found
        errors.extend(declared_endpoint.error(loc, message) for loc, message in problems)
    errors.extend(_services_served_twice(documents, derived))
    if errors:
        return _failed(errors), before
    endpoints = {
        name: _endpoint_built(name, d.spec, derived[name], before.endpoints.get(name))
        for name, d in documents.endpoints.items()
    }
    models = {
        name: ModelConfig.model_validate({**declared.spec.model_dump(), "name": name})
        for name, declared in sorted(documents.models.items())
        if declared.spec is not None
    }
    state = ServingState(
        backends={name: bind_models(config, models) for name, (_, _, config) in built.items()},
        endpoints={name: config for name, (_, _, config) in endpoints.items()},
        secrets=secrets,
        models=models,
    )
    paths = {name: tuple(path for path, _ in hashes) for name, (_, hashes, _) in built.items()}
    return LoadResult(state, code_paths=paths, placements=_placements(documents)), _Built(built, endpoints)


def _placements(documents: Documents) -> dict[str, tuple[str, int, int]]:
    """Where each backend's [placement] (else its ray_actor_options) is written, for those reserving GPUs."""
    where = {}
    for name, declared in documents.backends.items():
        spec = declared.spec
        if spec is None or (spec.placement is None and not spec.ray_actor_options.num_gpus):
            continue
        key = "placement" if spec.placement is not None else "ray_actor_options"
        where[name] = (declared.file, *declared.locations.find(("backends", name, key)))
    return where


def _secret_files(tree: Tree, documents: Documents) -> tuple[dict[str, SecretConfig], list[SpecError]]:
    """Each declared secret whose file exists and is an age file (`gitops.specs.secrets`)."""
    secrets: dict[str, SecretConfig] = {}
    errors: list[SpecError] = []
    for name, declared in sorted(documents.secrets.items()):
        if declared.spec is None:
            continue
        path, at = declared.spec.file, ("secrets", name, "file")
        if not tree.exists(path):
            errors.append(declared.error(at, f"secrets.{name}.file: '{path}' does not exist"))
            continue
        size = tree.sizes([path])[path]
        head = tree.read_files([path])[path][:64] if size <= 1024 * 1024 else b""
        problem = age_file_problem(size, head)
        if problem is not None:
            errors.append(declared.error(at, f"secrets.{name}.file: '{path}' {problem}"))
            continue
        secrets[name] = SecretConfig(name=name, file=path)
    return secrets, errors


def _resolve_backend(
    tree: Tree,
    name: str,
    spec: BackendSpec,
    target: ResolvedImport,
    before: tuple[BackendSpec, _CodeHashes, BackendConfig] | None,
    code: CodeIndex,
    servicer: ResolvedServicer | None = None,
) -> tuple[tuple[BackendSpec, _CodeHashes, BackendConfig] | None, list[tuple[Loc, str]]]:
    at: Loc = ("backends", name)
    problems: list[tuple[Loc, str]] = []
    if servicer is not None:
        problems.extend(_servicer_problems(tree, name, spec, target, servicer))
    if target.error is not None:
        problems.append(((*at, "import_path"), f"backends.{name}.import_path: {target.error}"))
    if target.kind is AttributeKind.FUNCTION and spec.protocol is not None:
        attribute = spec.runs().partition(":")[2]
        problems.append((
            (*at, "import_path"),
            f"backends.{name}.import_path: '{attribute}' is a function; protocol = \"v2\" needs a model class "
            "with predict(inputs) -> outputs",
        ))
    elif target.kind is AttributeKind.FUNCTION:
        attribute = spec.runs().partition(":")[2]
        for key in ("init_args", "init_kwargs"):
            if getattr(spec, key):
                problems.append(
                    ((*at, key), f"backends.{name}.{key}: '{attribute}' is a function; {key} is only for a class")
                )
    for index, path in enumerate(spec.code_paths or ()):
        if not tree.exists(path):
            problems.append(((*at, "code_paths", index), f"backends.{name}.code_paths: '{path}' does not exist"))
    if problems:
        return None, problems
    servicer_file = None if servicer is None else servicer.module_file
    hashes = tuple((path, code.identity(path)) for path in code_paths(spec, target.module_file, servicer_file))
    if before is not None and before[0] is spec and before[1] == hashes:
        return before, []
    version = derive_version(spec, dict(hashes))
    return (spec, hashes, _backend_config(name, version, spec)), []


def _servicer_problems(
    tree: Tree, name: str, spec: BackendSpec, target: ResolvedImport, servicer: ResolvedServicer
) -> list[tuple[Loc, str]]:
    """Why a backend's `grpc_servicer` cannot serve: it declares no service, the backend runs no class
    of its own, or its class (with no base classes to inherit from) lacks a method the service declares."""
    at: Loc = ("backends", name, "grpc_servicer")
    if servicer.error is not None:
        return [(at, f"backends.{name}.grpc_servicer: {servicer.error}")]
    if spec.import_path is None or spec.protocol is not None:
        return [(at, f"backends.{name}.grpc_servicer: only a class of import_path can be a servicer "
                 "(not an [llm] backend, nor one with a protocol)")]
    if target.kind is AttributeKind.FUNCTION:
        attribute = spec.import_path.partition(":")[2]
        return [(at, f"backends.{name}.grpc_servicer: '{attribute}' is a function; a servicer is a class "
                 "implementing the service's methods")]
    methods = class_methods(tree, spec.import_path)
    missing = [] if methods is None else missing_methods(servicer, methods)
    if missing:
        attribute = spec.import_path.partition(":")[2]
        return [(at, f"backends.{name}.grpc_servicer: class '{attribute}' has no method {missing[0]!r} of "
                 f"{servicer.service} (define it, or subclass the generated servicer class, whose methods "
                 "answer UNIMPLEMENTED)")]
    return []


def _served_service(
    name: str, spec: EndpointSpec | None, servicers: Mapping[str, ResolvedServicer], documents: Documents
) -> tuple[_Derived, list[tuple[Loc, str]]]:
    """The service an endpoint's backends' servicers serve and its methods' kinds, or why they disagree
    (with one another, or with the endpoint's own `grpc_service`)."""
    if spec is None:
        return (None, ()), []
    at: Loc = ("endpoints", name)
    named = sorted((backend, servicers[backend]) for backend in _endpoint_backend_names(spec) if backend in servicers)
    named = [(backend, servicer) for backend, servicer in named if servicer.error is None]
    if not named:
        return (None, ()), []
    first, servicer = named[0]
    for backend, other in named[1:]:
        if other.service != servicer.service:
            return (None, ()), [(at, f"endpoints.{name}: its backends' servicers serve different services: "
                                 f"'{first}' {servicer.service} ({_where_servicer(documents, first)}), "
                                 f"'{backend}' {other.service} ({_where_servicer(documents, backend)})")]
    if spec.grpc_service is not None and spec.grpc_service != servicer.service:
        return (None, ()), [((*at, "grpc_service"), f"endpoints.{name}.grpc_service: '{spec.grpc_service}' is not "
                             f"the service backend '{first}' serves: its grpc_servicer registers "
                             f"{servicer.service} ({_where_servicer(documents, first)}); drop grpc_service or make "
                             "them agree")]
    kinds: dict[str, GrpcMethodKind] = {}
    for backend, other in named:
        for method, kind in other.methods:
            if kinds.setdefault(method, kind) is not kind:
                return (None, ()), [(at, f"endpoints.{name}: its backends' servicers disagree on the kind of "
                                     f"{servicer.service}/{method}: '{first}' has {kinds[method].value}, "
                                     f"'{backend}' {kind.value}")]
    for method in spec.grpc_streaming:
        declared = kinds.get(method)
        if declared is None or not declared.requests_stream:
            said = ("does not declare it" if declared is None
                    else f"declares it {declared.value}: its requests do not stream")
            return (None, ()), [((*at, "grpc_streaming"), f"endpoints.{name}.grpc_streaming: names '{method}', and "
                                 f"{servicer.service} (backend '{first}''s grpc_servicer) {said}; a servicer's "
                                 "methods need no grpc_streaming")]
    return (servicer.service, tuple(sorted(kinds.items()))), []


def _endpoint_backend_names(spec: EndpointSpec) -> set[str]:
    """Every backend an endpoint's spec sends requests to: by weight, by match or as a shadow."""
    return set(spec.traffic) | set(spec.shadow) | {rule.backend for rule in spec.match}


def _where_servicer(documents: Documents, backend: str) -> str:
    return documents.backends[backend].where(("backends", backend, "grpc_servicer"))


def _services_served_twice(documents: Documents, derived: Mapping[str, _Derived]) -> list[SpecError]:
    """A service an endpoint serves only by its backends' servicers, and another endpoint serves too
    (services written twice are `gitops.specs.documents`' to refuse)."""
    errors: list[SpecError] = []
    owners: dict[str, str] = {}
    for name in sorted(documents.endpoints):
        spec = documents.endpoints[name].spec
        if spec is not None and spec.grpc_service is not None:
            owners.setdefault(spec.grpc_service, name)
    for name in sorted(documents.endpoints):
        declared, (service, _) = documents.endpoints[name], derived.get(name, (None, ()))
        if service is None or declared.spec is None or declared.spec.grpc_service is not None:
            continue
        owner = owners.setdefault(service, name)
        if owner != name:
            first = documents.endpoints[owner].where(("endpoints", owner))
            errors.append(declared.error(("endpoints", name), f"endpoints.{name}: its backends' servicers serve "
                                         f"{service}, already served by endpoint '{owner}' ({first})"))
    return errors


def _endpoint_built(
    name: str, spec: EndpointSpec, derived: _Derived, before: tuple[EndpointSpec, _Derived, EndpointConfig] | None
) -> tuple[EndpointSpec, _Derived, EndpointConfig]:
    if before is not None and before[0] is spec and before[1] == derived:
        return before
    return spec, derived, _endpoint_config(name, spec, derived)


def _backend_config(name: str, version: str, spec: BackendSpec) -> BackendConfig:
    """Every key a file set goes to the config field of the same name;
    autoscaled backends start at their minimum."""
    keys = spec.model_dump(include=_BACKEND_KEYS, exclude_none=True)
    if spec.llm is not None:  # the built-in OpenAI app, given its [llm] table
        keys.update(import_path=spec.runs(), init_kwargs={"llm": spec.llm.model_dump(mode="json")})
    return BackendConfig.model_validate(
        {**keys, "name": name, "version": version, "num_replicas": spec.replica_target()}
    )


def _endpoint_config(name: str, spec: EndpointSpec, derived: _Derived = (None, ())) -> EndpointConfig:
    """Every key a file set goes to the config field of the same name; the service and its methods'
    kinds come from the backends' servicers when they name one."""
    keys = spec.model_dump(include=_ENDPOINT_KEYS)
    service, methods = derived
    if service is not None:
        keys.update(grpc_service=service, grpc_methods=dict(methods))
    return EndpointConfig.model_validate({**keys, "name": name})


_BACKEND_KEYS = set(BackendConfig.model_fields) - DERIVED_BACKEND_FIELDS
_ENDPOINT_KEYS = set(EndpointConfig.model_fields) - DERIVED_ENDPOINT_FIELDS


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No garbage collection while a load runs.

    A load builds tens of thousands of objects that all live on (the parse
    cache, the state), and makes few cycles. The collector's passes over that
    growing heap in the middle of a load were a quarter of a cold load of
    10,000 specs, and what made it grow faster than the specs (bench.reconcile).
    What a load leaves behind is collected as usual once it is over.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _is_environment_file(path: str) -> bool:
    """An environment file, or `automation.toml` (`gitops.specs.pins.automation`), is never a spec file,
    even with the repository root as the spec path."""
    return path.startswith(f"{ENVIRONMENTS_PATH}/") or path == AUTOMATION_PATH


def environment_names(tree: Tree) -> list[str]:
    """The environments a tree defines: one `environments/NAME.toml` each."""
    return [name.removesuffix(".toml") for name in tree.children(ENVIRONMENTS_PATH) if name.endswith(".toml")]
