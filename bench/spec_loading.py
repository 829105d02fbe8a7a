"""Spec loading cost: cold load of a commit, re-load of an unchanged commit
(the agent's every tick), and a cold load of a large spec tree. Prints figures."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import git  # noqa: E402

from gitops.specs.loading import Loader  # noqa: E402
from gitops.sources.trees import CommitTree  # noqa: E402

APP = "class Echo:\n    def __init__(self, label):\n        self.label = label\n\n    def __call__(self, request):\n        return self.label\n"


def make_repo(root: Path, endpoints: int) -> None:
    (root / "deployments" / "apps").mkdir(parents=True)
    (root / "deployments" / "apps" / "echo.py").write_text(APP)
    for i in range(endpoints):
        (root / "deployments" / f"svc{i}.toml").write_text(
            f'[backends.b{i}]\nimport_path = "deployments.apps.echo:Echo"\ninit_args = ["{i}"]\n\n'
            f'[endpoints.e{i}]\nroute = "/e{i}"\ntraffic = {{ b{i} = 1.0 }}\n'
        )
    git_env = ["-c", "user.email=bench@example.invalid", "-c", "user.name=bench"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", *git_env, "commit", "-qm", "bench"], cwd=root, check=True)


def timed_ms(action, repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def report(label: str, samples: list[float]) -> None:
    print(f"{label:<48} median {statistics.median(samples):7.2f} ms   max {max(samples):7.2f} ms")


def main() -> None:
    for endpoints in (3, 100):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            make_repo(root, endpoints)
            repo = git.Repo(root)
            loader = Loader()

            def cold() -> None:
                assert Loader().load_commit(root).ok

            report(f"{endpoints} endpoints: cold load_commit", timed_ms(cold, 5))
            report(f"{endpoints} endpoints: unchanged commit, load_commit", timed_ms(lambda: loader.load_commit(root), 50))
            report(
                f"{endpoints} endpoints: unchanged commit, shared Repo",
                timed_ms(lambda: loader.load_tree(CommitTree(repo, "HEAD")), 50),
            )


if __name__ == "__main__":
    main()
