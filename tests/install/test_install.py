"""A stranger's first hour, on the wheel as pip installs it: no extras, no checkout.

The wheel is built from this checkout and installed into a fresh virtualenv
in a temp dir by the README's install lines, as written; every command
runs from a new git repository elsewhere, as the README tells a user to:
`gitops --version`, `init`, `validate`, `run` (joined to the test session's Ray, which runs the same Ray
and Python as the wheel's; tests/real/test_agent_run.py covers an embedded
Ray, and starting a second one would double this tier's cost), a request
through the proxy, `status`, `history`, `sync`, `suspend`, `resume`, and
SIGTERM. The tests run in file order against one agent; the last stops it.
"""

from __future__ import annotations

import re
import signal
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import ray

from gitops.commands.init import EXAMPLES, example_files
from tests.conftest import GitRepo
from tests.install.conftest import Built
from tests.support.install import REPO_ROOT, Installed, clean_env
from tests.support.stack import _shutdown_controller, eventually, free_port

pytestmark = pytest.mark.real


@dataclass
class Running:
    repo: GitRepo
    process: subprocess.Popen[str]
    proxy: str
    admin: str
    commit: str
    log: Path

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture(scope="module")
def project(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> GitRepo:
    """A user's new repository with the scaffold committed."""
    repo = GitRepo(tmp_path_factory.mktemp("home") / "specs")
    done = installed.gitops("init", cwd=repo.root)
    assert done.returncode == 0, done.stderr
    repo.commit("Add the hello deployment")
    return repo


@pytest.fixture(scope="module")
def running(installed: Installed, project: GitRepo, ray_session: str) -> Iterator[Running]:
    proxy_port, admin_port = free_port(), free_port()
    log = project.root.parent / "gitops-run.log"
    process = subprocess.Popen(
        [str(installed.bin / "gitops"), "run", "--proxy-port", str(proxy_port), "--admin-port", str(admin_port),
         "--proxy-metrics-port", str(free_port()), "--interval", "1",
         "--ray-address", ray.get_runtime_context().gcs_address],
        cwd=project.root, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True, env=installed.env(),
    )
    yield Running(
        project, process, f"http://127.0.0.1:{proxy_port}", f"http://127.0.0.1:{admin_port}", project.head(), log
    )
    if process.poll() is None:
        process.kill()
        process.wait(timeout=60)
    _shutdown_controller()


def test_the_wheel_builds_without_a_warning(built: Built) -> None:
    warnings = [line for line in built.output.splitlines() if "warning" in line.lower()]
    assert warnings == [], built.output


def test_the_checkouts_own_install_prints_no_setuptools_notice(tmp_path: Path) -> None:
    """`make run` and `make test` install the checkout editable: the Makefile's lines, run in a
    fresh clone (without the dependencies, which change nothing of the build), say nothing of
    setuptools."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True)
    venv = tmp_path / "venv"
    recipe = subprocess.run(
        ["make", "-n", "--always-make", f"{venv}/.installed", f"VENV={venv}", f"PYTHON={sys.executable}"],
        cwd=clone, capture_output=True, text=True, check=True, env=clean_env(),
    ).stdout.splitlines()
    assert any("pip install" in line and " -e " in line for line in recipe), recipe
    env = {**clean_env(), "PIP_NO_DEPS": "1"}
    for line in recipe:
        done = subprocess.run(["bash", "-c", line], cwd=clone, capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        said = done.stdout + done.stderr
        assert not any(word in said for word in ("setuptools", "BuildBackendWarning", "Editable installation")), said
    assert (venv / "bin" / "gitops").exists()


def test_the_readmes_git_install_line_installs_the_release_tag(tmp_path: Path) -> None:
    """The README's other way, `pip install "ray-gitops @ git+URL@TAG"`, with this repository as
    the forge (a clone tagged as the release) and without the dependencies, which the wheel's test
    installs."""
    readme = (REPO_ROOT / "README.md").read_text()
    [line] = {m[0] for m in re.finditer(r'pip install "ray-gitops @ git\+(\S+)@(v[\w.]+)"', readme)}
    [(url, tag)] = re.findall(r'pip install "ray-gitops @ git\+(\S+)@(v[\w.]+)"', line)
    assert tag == f"v{version('ray-gitops')}"
    forge = tmp_path / "forge" / "ray-gitops"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(forge)], check=True)
    subprocess.run(["git", "-C", str(forge), "tag", tag], check=True)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=clean_env())
    command = line.replace(url, f"file://localhost{forge}")  # a host, as the https URL has
    done = subprocess.run(["bash", "-c", f"{venv}/bin/{command}"], capture_output=True, text=True,
                          env={**clean_env(), "PIP_NO_DEPS": "1"}, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = subprocess.run([str(venv / "bin" / "pip"), "show", "-f", "ray-gitops"], capture_output=True, text=True)
    assert f"Version: {version('ray-gitops')}" in shown.stdout and "gitops/cli.py" in shown.stdout, shown.stdout


def test_the_readmes_pipx_line_installs_a_working_gitops(built: Built, tmp_path: Path) -> None:
    """The README's third way, `pipx install ./WHEEL`, as written, into a pipx home of the test's own
    (dependencies and all, as a user gets them)."""
    readme = " ".join((REPO_ROOT / "README.md").read_text().split())  # the sentence may wrap
    [line] = set(re.findall(r"`(pipx install \./ray_gitops-[\w.]+-py3-none-any\.whl)`", readme))
    assert line.endswith(built.wheel.name), (line, built.wheel.name)
    shutil.copy(built.wheel, tmp_path / built.wheel.name)
    pipx = Path(sys.executable).with_name("pipx")
    env = {**clean_env(), "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin"),
           "PIPX_MAN_DIR": str(tmp_path / "man"), "PIPX_DEFAULT_PYTHON": sys.executable}
    done = subprocess.run(["bash", "-c", line.replace("pipx", str(pipx), 1)], cwd=tmp_path, capture_output=True,
                          text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = subprocess.run([str(tmp_path / "bin" / "gitops"), "--version"], capture_output=True, text=True,
                           env=clean_env(), timeout=120)
    assert (shown.returncode, shown.stdout.strip()) == (0, f"gitops {version('ray-gitops')}"), shown.stderr


def test_version_is_the_installed_package_version(installed: Installed, tmp_path: Path) -> None:
    done = installed.gitops("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, f"gitops {version('ray-gitops')}")


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_the_wheel_writes_each_example_as_the_checkout_has_it(installed: Installed, tmp_path: Path, name: str) -> None:
    """The examples are package data (their apps linked from deployments/apps/ in the checkout, bytes in the
    wheel), and pip's byte-compiled copies of their modules are not written."""
    done = installed.gitops("init", "--example", name, str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = {path.relative_to(tmp_path).as_posix(): path.read_text() for path in tmp_path.rglob("*") if path.is_file()}
    assert written == example_files(name)


def test_the_scaffold_validates(installed: Installed, project: GitRepo) -> None:
    done = installed.gitops("validate", cwd=project.root)
    assert (done.returncode, done.stdout.splitlines()[-1]) == (0, "deployments: 1 backend, 1 endpoint, valid"), done.stderr


def test_the_scaffold_is_served_through_the_proxy(running: Running) -> None:
    def hello() -> httpx.Response | None:
        assert running.process.poll() is None, running.output()
        response = httpx.get(f"{running.proxy}/hello", timeout=5)
        return response if response.status_code == 200 else None

    answer = eventually(hello, timeout_s=240, interval_s=0.5, what="/hello served", retry_on=(httpx.HTTPError,))
    assert answer.json() == {"greeting": "hello", "version": "v1", "path": "/hello"}


def test_status_says_synced_at_the_commit(installed: Installed, running: Running) -> None:
    def synced() -> str | None:
        done = installed.gitops("status", "--agent", running.admin, cwd=running.repo.root)
        return done.stdout if done.returncode == 0 and "Status:     Synced" in done.stdout else None

    assert running.commit[:7] in eventually(synced, timeout_s=60, interval_s=0.5, what="gitops status Synced")


def test_history_lists_the_applied_commit(installed: Installed, running: Running) -> None:
    done = installed.gitops("history", "--agent", running.admin, cwd=running.repo.root)
    assert done.returncode == 0, done.stderr
    assert any(line.startswith(running.commit[:7]) and " applied " in line for line in done.stdout.splitlines())


@pytest.mark.parametrize(
    "verb, said",
    [
        ("sync", "sync requested; the agent reconciles now"),
        ("suspend", "reconciliation suspended"),
        ("resume", "reconciliation resumed"),
    ],
)
def test_control_verbs_answer(installed: Installed, running: Running, verb: str, said: str) -> None:
    done = installed.gitops(verb, "--agent", running.admin, cwd=running.repo.root)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, said, "")


def test_the_state_dir_stays_out_of_git(running: Running) -> None:
    state = running.repo.root / ".gitops-state"
    assert state.stat().st_mode & 0o777 == 0o700
    assert running.repo.git("status", "--porcelain", "--untracked-files=all") == ""


def test_sigterm_stops_with_exit_0_and_no_traceback(running: Running) -> None:
    running.process.send_signal(signal.SIGTERM)
    assert running.process.wait(timeout=120) == 0, running.output()
    assert "Traceback" not in running.output(), running.output()
    assert running.output().splitlines()[-1].endswith("gitops: stopped"), running.output()
