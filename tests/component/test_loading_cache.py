"""A loader keeps each spec file's parse by its blob hash: a commit changing
one file of many parses that file only, and the answer (state, errors and
their locations) is the one a fresh loader gives."""

from __future__ import annotations

from gitops.sources.trees import MemoryTree
from gitops.specs.loading import Loader, LoadResult

APP = """
class Echo:
    def __init__(self, word):
        self.word = word

    def __call__(self, request):
        return self.word
"""


def service(i: int, greeting: str = "hi") -> str:
    return (
        f'[backends.svc-{i}]\nimport_path = "apps.echo:Echo"\ninit_args = ["{i}"]\n'
        f'user_config = {{ greeting = "{greeting}" }}\n\n'
        f'[endpoints.svc-{i}]\nroute = "/svc-{i}"\ntraffic = {{ svc-{i} = 1.0 }}\n'
    )


class CountingTree(MemoryTree):
    """A memory tree that counts the reads of each file."""

    def __init__(self, files: dict[str, str], links: dict[str, str] | None = None) -> None:
        super().__init__(files, links)
        self.reads: list[str] = []

    def read(self, path: str) -> bytes:
        self.reads.append(path)
        return super().read(path)


def tree(specs: dict[str, str], links: dict[str, str] | None = None) -> CountingTree:
    return CountingTree({"apps/__init__.py": "", "apps/echo.py": APP, **specs}, links)


def services(count: int) -> dict[str, str]:
    return {f"deployments/svc-{i}.toml": service(i) for i in range(count)}


def same(left: LoadResult, right: LoadResult) -> bool:
    return left.state == right.state and [str(e) for e in left.errors] == [str(e) for e in right.errors]


def test_a_one_file_change_parses_only_that_file() -> None:
    loader = Loader()
    loader.load_tree(tree(services(5)))
    changed = tree({**services(5), "deployments/svc-3.toml": service(3, greeting="changed")})
    loader.load_tree(changed)
    assert [path for path in changed.reads if path.endswith(".toml")] == ["deployments/svc-3.toml"]


def test_a_warm_loader_answers_as_a_fresh_one() -> None:
    loader = Loader()
    loader.load_tree(tree(services(5)))
    changed = {**services(5), "deployments/svc-3.toml": service(3, greeting="changed")}
    assert same(loader.load_tree(tree(changed)), Loader().load_tree(tree(changed)))


def test_an_unchanged_file_with_an_error_keeps_its_error_and_location() -> None:
    broken = {**services(3), "deployments/svc-1.toml": service(1).replace("init_args", "init_argz")}
    loader = Loader()
    loader.load_tree(tree(broken))
    changed = tree({**broken, "deployments/svc-2.toml": service(2, greeting="changed")})
    result = loader.load_tree(changed)
    assert [str(e) for e in result.errors] == [
        "deployments/svc-1.toml:3:1: backends.svc-1: unknown key 'init_argz' (did you mean 'init_args'?)"
    ]
    assert "deployments/svc-1.toml" not in changed.reads


def test_a_rule_across_files_is_checked_again_when_another_file_changes() -> None:
    loader = Loader()
    loader.load_tree(tree(services(2)))
    taken = {**services(2), "deployments/svc-1.toml": service(1).replace('route = "/svc-1"', 'route = "/svc-0"')}
    result = loader.load_tree(tree(taken))
    assert [str(e) for e in result.errors] == [
        "deployments/svc-1.toml:7:1: endpoints.svc-1.route: '/svc-0' is already the route of endpoint 'svc-0' "
        "(deployments/svc-0.toml:7:1)"
    ]


def test_a_linked_spec_file_is_read_again_when_its_target_changes() -> None:
    loader = Loader()
    linked = {"deployments/linked.toml": "../common/svc.toml"}
    loader.load_tree(tree({"common/svc.toml": service(0)}, linked))
    changed = tree({"common/svc.toml": service(0, greeting="changed")}, linked)
    result = loader.load_tree(changed)
    assert result.state is not None
    assert result.state.backends["svc-0"].user_config == {"greeting": "changed"}


def test_a_code_change_gives_new_versions_though_no_spec_file_changed() -> None:
    loader = Loader()
    before = loader.load_tree(tree(services(2))).state
    changed = CountingTree({"apps/__init__.py": "", "apps/echo.py": APP + "\nVERSION = 2\n", **services(2)})
    after = loader.load_tree(changed).state
    assert before is not None and after is not None
    assert after.backends["svc-0"].version != before.backends["svc-0"].version
    assert after == Loader().load_tree(changed).state
