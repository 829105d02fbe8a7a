"""Version derivation: replicas restart exactly when code or code-affecting config changes."""

from __future__ import annotations

from typing import Any

import pytest

from gitops.sources.trees import MemoryTree
from gitops.specs.loading import Loader
from gitops.specs.models import check_backend
from gitops.specs.versions import code_paths, derive_version

BASE_SPEC = """
[backends.model]
import_path = "apps.model:Model"
init_args = ["small"]
num_replicas = 1
user_config = { threshold = 0.5 }
ray_actor_options = { num_cpus = 0.1 }

[endpoints.model]
route = "/model"
traffic = { model = 1.0 }
"""
MODEL_PY = "class Model:\n    def __call__(self, request):\n        return 1\n"
FILES = {"apps/model.py": MODEL_PY, "apps/vocab.txt": "a b c", "docs/README.md": "docs"}


def version_of(spec: str = BASE_SPEC, files: dict[str, str] | None = None) -> str:
    result = Loader().load_tree(MemoryTree({"deployments/model.toml": spec, **(files or FILES)}))
    assert result.ok and result.state is not None, result.errors
    return result.state.backends["model"].version


@pytest.mark.parametrize(
    "change",
    [
        ("num_replicas = 1", "num_replicas = 3"),
        ("threshold = 0.5", "threshold = 0.9"),
        ("traffic = { model = 1.0 }", "traffic = { model = 1.0 }\ntimeout_s = 3"),
        ("num_replicas = 1", "num_replicas = 1\nmax_concurrent_queries = 7\nhealth_check_period_s = 2"),
        ("num_replicas = 1", "num_replicas = 1\ngraceful_shutdown_timeout_s = 1"),
    ],
)
def test_in_place_fields_do_not_change_the_version(change: tuple[str, str]) -> None:
    assert version_of(BASE_SPEC.replace(*change)) == version_of()


@pytest.mark.parametrize(
    "change",
    [
        ('init_args = ["small"]', 'init_args = ["large"]'),
        ('init_args = ["small"]', 'init_args = ["small"]\ninit_kwargs = { seed = 1 }'),
        ("num_cpus = 0.1", "num_cpus = 0.2"),
        ("num_replicas = 1", 'num_replicas = 1\nruntime_env = { env_vars = { MODE = "x" } }'),
    ],
)
def test_code_affecting_fields_change_the_version(change: tuple[str, str]) -> None:
    assert version_of(BASE_SPEC.replace(*change)) != version_of()


def test_changing_a_file_under_the_module_folder_changes_the_version() -> None:
    assert version_of(files={**FILES, "apps/vocab.txt": "a b c d"}) != version_of()


def test_changing_a_file_outside_the_code_paths_keeps_the_version() -> None:
    assert version_of(files={**FILES, "docs/README.md": "new docs"}) == version_of()


def test_explicit_code_paths_narrow_what_counts_as_code() -> None:
    spec = BASE_SPEC.replace("num_replicas = 1", 'num_replicas = 1\ncode_paths = ["apps/model.py"]')
    assert version_of(spec, {**FILES, "apps/vocab.txt": "changed"}) == version_of(spec)
    assert version_of(spec, {**FILES, "apps/model.py": MODEL_PY + "# edit\n"}) != version_of(spec)


def test_an_explicit_version_wins() -> None:
    spec = BASE_SPEC.replace("num_replicas = 1", 'num_replicas = 1\nversion = "2024-06-01"')
    assert version_of(spec) == "2024-06-01"
    assert version_of(spec, {**FILES, "apps/model.py": MODEL_PY + "# edit\n"}) == "2024-06-01"


def test_the_version_does_not_depend_on_key_order() -> None:
    at = ("backends", "b")
    one, _ = check_backend({"import_path": "a:b", "init_kwargs": {"y": 1, "x": 2}}, at)
    two, _ = check_backend({"init_kwargs": {"x": 2, "y": 1}, "import_path": "a:b"}, at)
    assert one is not None and two is not None
    hashes: dict[str, Any] = {"a": "0" * 40, "b": None}
    assert derive_version(one, hashes) == derive_version(two, dict(reversed(hashes.items())))
    assert len(derive_version(one, hashes)) == 12


def test_the_default_code_path_is_the_imported_modules_folder() -> None:
    spec, _ = check_backend({"import_path": "apps.model:Model"}, ("backends", "b"))
    assert spec is not None
    assert code_paths(spec, "apps/model.py") == ("apps",)
    assert code_paths(spec, "apps/pkg/__init__.py") == ("apps/pkg",)


# --- spec files are never code ------------------------------------------------------

INIT_SPEC = """
[backends.hello-v1]
import_path = "deployments.hello:Hello"
init_args = ["v1"]
num_replicas = 1

[endpoints.hello]
route = "/hello"
traffic = { hello-v1 = 1.0 }
"""
HELLO_PY = "class Hello:\n    def __call__(self, request):\n        return 1\n"


def init_layout_version(spec: str = INIT_SPEC, **files: str) -> str:
    """hello-v1's version in the layout `gitops init` makes: the module beside its spec."""
    # Keyword names stand for paths: "__" is "/", a trailing "__py" is ".py".
    named = {name.replace("__py", ".py").replace("__", "/"): text for name, text in files.items()}
    tree = {"deployments/hello.toml": spec, "deployments/hello.py": HELLO_PY, **named}
    result = Loader().load_tree(MemoryTree(tree))
    assert result.ok and result.state is not None, result.errors
    return result.state.backends["hello-v1"].version


@pytest.mark.parametrize(
    "edit",
    [
        {"spec": INIT_SPEC.replace("num_replicas = 1", "num_replicas = 3")},
        {"spec": INIT_SPEC + '\n[endpoints.other]\nroute = "/other"\ntraffic = { hello-v1 = 1.0 }\n'},
        {"deployments__other.toml": '[endpoints.other]\nroute = "/other"\ntraffic = { hello-v1 = 1.0 }\n'},
        {"deployments__README.md": "notes", "deployments__sub__data.json": "{}"},
    ],
)
def test_spec_files_beside_the_module_are_not_code(edit: dict[str, str]) -> None:
    assert init_layout_version(**edit) == init_layout_version()


def test_python_files_beside_the_module_are_code() -> None:
    assert init_layout_version(deployments__hello__py=HELLO_PY + "# edit\n") != init_layout_version()
    assert init_layout_version(deployments__util__py="X = 1\n") != init_layout_version()
    assert init_layout_version(deployments__pkg__helpers__py="X = 1\n") != init_layout_version()


def test_a_root_module_does_not_hash_the_spec_files() -> None:
    spec = INIT_SPEC.replace("deployments.hello:Hello", "app:Hello")
    base = {"spec": spec, "app__py": HELLO_PY, "README.md": "r"}
    assert init_layout_version(**{**base, "spec": spec.replace("num_replicas = 1", "num_replicas = 2")}) == (
        init_layout_version(**base)
    )
    assert init_layout_version(**{**base, "README.md": "changed"}) != init_layout_version(**base)


def test_a_module_folder_apart_from_the_spec_path_hashes_as_git_does() -> None:
    """Versions outside the spec path are what they were before spec files were excluded."""
    tree = MemoryTree({"deployments/model.toml": BASE_SPEC, **FILES})
    result = Loader().load_tree(tree)
    assert result.state is not None
    spec, _ = check_backend({"import_path": "apps.model:Model", "init_args": ["small"],
                             "ray_actor_options": {"num_cpus": 0.1}}, ("backends", "model"))
    assert spec is not None
    assert result.state.backends["model"].version == derive_version(spec, {"apps": tree.hash("apps")})
