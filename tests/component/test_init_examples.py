"""`gitops init --example NAME`: each example is written whole or not at all,
validates and plans with the repository's own commands, is the very file its
guide shows, and reuses the shipped apps of deployments/apps/ instead of a copy.

tests/real/test_init_examples.py serves them with a real agent.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pyrage
import pytest

from gitops.cli import main
from gitops.commands.init import EXAMPLES, SCAFFOLD, example_files, write_scaffold
from tests.conftest import GitRepo
from tests.support.docs import ROOT

EXAMPLE_DIR = ROOT / "gitops" / "commands" / "init-examples"
# `<!-- example: NAME/PATH -->` just before a ```toml block: the block is that file of that example.
_EXAMPLE_BLOCK = re.compile(
    r"^(?P<indent> *)<!-- example: (?P<name>[a-z-]+)/(?P<path>\S+) -->\n(?P=indent)```toml\n(?P<body>.*?)^(?P=indent)```$",
    re.DOTALL | re.MULTILINE,
)
DOC_PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])


def doc_examples() -> list[tuple[str, str, str, str]]:
    """(page#n, example name, path in the example, block text with the fence's indent removed) of every marked block."""
    found = []
    for page in DOC_PAGES:
        for n, match in enumerate(_EXAMPLE_BLOCK.finditer(page.read_text())):
            indent = len(match["indent"])
            body = "".join(line.removeprefix(" " * indent) for line in match["body"].splitlines(True))
            found.append((f"{page.relative_to(ROOT)}#{n + 1}", match["name"], match["path"], body))
    return found


def write_secret(root: Path) -> Path:
    """What the secrets example's next steps make: a key, its recipient, the token encrypted; the identity file."""
    identity = pyrage.x25519.Identity.generate()
    key = root.parent / "age-identity.txt"
    key.write_text(str(identity) + "\n")
    key.chmod(0o600)
    (root / ".gitops-recipients").write_text(f"{identity.to_public()}\n")
    (root / "secrets").mkdir(exist_ok=True)
    (root / "secrets" / "api-token.age").write_bytes(pyrage.encrypt(b"a-token", [identity.to_public()]))
    return key


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_each_example_is_written_validates_and_plans(
    name: str, repo: GitRepo, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo.root)
    assert main(["init", "--example", name]) == 0
    out = capsys.readouterr().out
    files = example_files(name)
    written = sorted(p.relative_to(repo.root).as_posix() for p in repo.root.rglob("*") if p.is_file() and ".git" not in p.parts)
    assert written == sorted(files) and all((repo.root / path).read_text() == text for path, text in files.items())
    assert [f"created {path}" for path in files] == out.splitlines()[: len(files)]
    assert f"Next ({EXAMPLES[name].guide} explains it):" in out and "gitops run" in out.splitlines()[-1]

    extra = ["--age-identity", str(write_secret(repo.root))] if name == "secrets" else []
    assert main(["validate", *extra]) == 0, capsys.readouterr().err
    checked = capsys.readouterr().out
    assert checked.rstrip().endswith("valid") and "invalid" not in checked
    if name == "environments":
        assert "environments: dev, prod, staging (each on top of the specs)" in checked

    repo.commit(f"Add the {name} example")
    specs = [text for path, text in files.items() if path.startswith("deployments/") and path.endswith(".toml")]
    spec = tomllib.loads("".join(specs))
    for environment in ["", *(["dev", "staging", "prod"] if name == "environments" else [])]:
        assert main(["plan", *(["--environment", environment] if environment else [])]) == 0, capsys.readouterr().err
        plan = capsys.readouterr().out
        for backend in spec["backends"]:
            assert f"+ backend {backend}" in plan
        for endpoint in spec["endpoints"]:
            assert f"+ endpoint {endpoint}" in plan
    if name == "environments":
        assert '"max_replicas": 8' in plan  # prod's own [autoscaling], on top of the tree


def test_the_examples_and_the_scaffold_share_one_repository(repo: GitRepo, monkeypatch: pytest.MonkeyPatch) -> None:
    """No two write the same file, route or name: a user may add one example after another."""
    monkeypatch.chdir(repo.root)
    write_scaffold(repo.root, SCAFFOLD)
    for name in EXAMPLES:
        assert main(["init", "--example", name]) == 0
    key = write_secret(repo.root)
    assert main(["validate", "--age-identity", str(key)]) == 0


def test_example_without_a_name_lists_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--example"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == list(EXAMPLES)
    assert all(len(line.split(maxsplit=1)[1]) > 20 for line in listed)
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_example_is_a_usage_error_naming_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--example", "model", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert err[0] == "gitops init: no example named 'model'; the examples are:"
    assert [line.split()[0] for line in err[1:]] == list(EXAMPLES)
    assert "Traceback" not in captured.err and captured.out == ""
    assert list(tmp_path.iterdir()) == []


def test_an_example_never_overwrites_and_names_every_file_in_the_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, app = tmp_path / "deployments" / "orders.toml", tmp_path / "deployments" / "apps" / "orders.py"
    app.parent.mkdir(parents=True)
    spec.write_text("# mine\n")
    app.write_text("# mine too\n")
    assert main(["init", "--example", "secrets", str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"gitops init: {app}, {spec} already exist; nothing was written (move them away or pick another DIR)"
    )
    assert spec.read_text() == "# mine\n" and app.read_text() == "# mine too\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["apps", "deployments", "orders.py", "orders.toml"]


def test_next_steps_outside_a_repository_start_one(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--example", "multiplexing", "target"]) == 0
    steps = capsys.readouterr().out.split("\n\n", 1)[1].splitlines()
    assert steps[1:5] == [
        "cd target", "git init", "gitops validate", 'git add deployments && git commit -m "Add the multiplexing example"',
    ]


@pytest.mark.parametrize("page, name, path, body", doc_examples(), ids=[page for page, *_ in doc_examples()])
def test_a_guide_shows_the_example_file_as_it_is(page: str, name: str, path: str, body: str) -> None:
    assert name in EXAMPLES, f"{page}: no example named {name}"
    assert body == example_files(name).get(path), f"{page} differs from {EXAMPLE_DIR.name}/{name}/{path}"


def test_every_example_spec_is_shown_by_its_guide() -> None:
    shown = {(name, path, page.split("#")[0]) for page, name, path, _ in doc_examples()}
    for name, example in EXAMPLES.items():
        guide = example.guide.split("#")[0]
        assert f"gitops init --example {name}" in (ROOT / guide).read_text(), guide
        for path in example_files(name):
            if path.endswith(".toml"):
                assert (name, path, guide) in shown, f"{guide} does not show {name}/{path}"


def test_example_code_is_the_shipped_apps_not_copies() -> None:
    """Each .py of an example links to the module of deployments/apps/ of its name (the wheel holds the bytes)."""
    modules = sorted(EXAMPLE_DIR.rglob("*.py"))
    assert modules
    for module in modules:
        assert module.is_symlink(), f"{module} is a copy"
        assert module.resolve() == ROOT / "deployments" / "apps" / module.name
        assert os.readlink(module).startswith("../"), "a relative link, so every clone has it"


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_the_printed_steps_run_as_written(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step up to `gitops run` in a shell, outside any repository, as a user pastes them; the
    upload to S3 is left out (tests/real/test_init_examples.py uploads to a loopback S3 server)."""
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--example", name, "project"]) == 0
    steps = capsys.readouterr().out.split("\n\n", 1)[1].splitlines()[1:]
    assert steps[-1].startswith(EXAMPLES[name].run)
    script = "\n".join(step for step in steps[:-1] if not step.startswith("aws "))
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path / "home"),
        "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@example.invalid",
        "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@example.invalid", "GIT_CONFIG_GLOBAL": os.devnull,
    }
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{script}\n{done.stdout}{done.stderr}"
    assert done.stdout.count(", valid") == 1
    log = subprocess.run(["git", "log", "--format=%s"], cwd=tmp_path / "project", capture_output=True, text=True)
    assert log.stdout.strip() == f"Add the {name} example"
    assert subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path / "project",
                          capture_output=True, text=True).stdout == "", "a file the steps made is left out of the commit"
