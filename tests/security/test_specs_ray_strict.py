"""Validation as strict as Ray: what Ray would refuse (or run to harm) at apply is
refused by `gitops validate`, located, and nothing is loaded to apply."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops.cli import main
from gitops.sources.trees import MemoryTree
from gitops.specs.loading import Loader, LoadResult

ECHO_PY = "class Echo:\n    def __call__(self, request):\n        return 'hi'\n"
HEADER = '[backends.echo]\nimport_path = "apps.echo:Echo"\n'


def load(body: str, loader: Loader | None = None) -> LoadResult:
    tree = MemoryTree({"apps/echo.py": ECHO_PY, "deployments/echo.toml": HEADER + body})
    return (loader or Loader()).load_tree(tree)


def errors(body: str) -> list[str]:
    result = load(body)
    assert result.state is None
    return [str(error) for error in result.errors]


def test_num_cpus_inf_is_refused() -> None:
    assert errors("ray_actor_options = { num_cpus = inf }\n") == [
        "deployments/echo.toml:3:23: backends.echo.ray_actor_options.num_cpus: must be a finite number (got inf)"
    ]


def test_a_timeout_of_nan_is_refused() -> None:
    assert errors("graceful_shutdown_timeout_s = nan\n") == [
        "deployments/echo.toml:3:1: backends.echo.graceful_shutdown_timeout_s: must be a finite number (got nan)"
    ]


def test_num_gpus_beyond_rays_fixed_point_range_is_refused() -> None:
    assert errors("ray_actor_options = { num_gpus = 1e308 }\n") == [
        "deployments/echo.toml:3:34: backends.echo.ray_actor_options.num_gpus: must be <= 922337000000000 (got 1e+308)"
    ]


def test_a_resource_amount_finer_than_rays_unit_is_refused() -> None:
    assert errors("ray_actor_options = { num_cpus = 0.00015 }\n") == [
        "deployments/echo.toml:3:23: backends.echo.ray_actor_options.num_cpus: "
        "Ray counts resources in steps of 0.0001 (got 0.00015)"
    ]


def test_a_resource_amount_in_rays_steps_is_accepted() -> None:
    assert load("ray_actor_options = { num_cpus = 0.1, resources = { accel = 0.0001 } }\n").ok


@pytest.mark.parametrize(("name", "key"), [("CPU", "num_cpus"), ("GPU", "num_gpus"), ("memory", "memory")])
def test_cpu_gpu_or_memory_inside_resources_is_refused(name: str, key: str) -> None:
    assert errors(f"ray_actor_options = {{ resources = {{ {name} = 1 }} }}\n") == [
        f"deployments/echo.toml:3:23: backends.echo.ray_actor_options.resources: "
        f"'{name}' is not a custom resource; set ray_actor_options.{key} instead"
    ]


@pytest.mark.parametrize("name", ["", "A=B", "1ST", "WITH SPACE"])
def test_an_environment_variable_name_that_is_not_a_name_is_refused(name: str) -> None:
    assert errors(f'runtime_env = {{ env_vars = {{ "{name}" = "x" }} }}\n') == [
        f"deployments/echo.toml:3:17: backends.echo.runtime_env.env_vars: "
        f"'{name}' is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
    ]


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("--index-url=https://evil.example/simple", "is a pip option; only requirements are allowed"),
        ("-r /etc/passwd", "is a pip option; only requirements are allowed"),
        ("-e .", "is a pip option; only requirements are allowed"),
        ("/etc/passwd", "must start with a project name (no local paths)"),
        ("./local", "must start with a project name (no local paths)"),
        ("pkg @ https://user:s3cret@example.com/pkg.whl", "holds a URL with credentials; a spec is no place for secrets"),
        ("pkg @ file:///etc/pkg", "names a local file; only requirements from an index or a remote URL are allowed"),
        ("numpy\\n--index-url=https://evil.example", "must be one line"),
    ],
)
def test_a_pip_entry_that_is_not_a_requirement_is_refused(entry: str, why: str) -> None:
    # A line break is shown escaped, as written in the file.
    assert errors(f'runtime_env = {{ pip = ["{entry}"] }}\n') == [
        f"deployments/echo.toml:3:17: backends.echo.runtime_env.pip: '{entry}' {why}"
    ]


def test_plain_requirements_are_accepted() -> None:
    assert load('runtime_env = { pip = ["numpy", "torch==2.3.1", "pkg[extra]>=1; python_version>\'3\'", '
                '"pkg @ https://example.com/pkg-1.0-py3-none-any.whl"] }\n').ok


def test_num_replicas_above_the_default_cap_of_1000_is_refused() -> None:
    assert errors("num_replicas = 100000\n") == [
        "deployments/echo.toml:3:16: backends.echo.num_replicas: 100000 is above this agent's --max-replicas (1000)"
    ]


def test_autoscaling_max_replicas_above_the_cap_is_refused() -> None:
    assert errors("autoscaling = { max_replicas = 1001 }\n") == [
        "deployments/echo.toml:3:32: backends.echo.autoscaling.max_replicas: "
        "1001 is above this agent's --max-replicas (1000)"
    ]


def test_validate_max_replicas_sets_the_cap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps/echo.py").write_text(ECHO_PY)
    (tmp_path / "deployments").mkdir()
    (tmp_path / "deployments/echo.toml").write_text(HEADER + "num_replicas = 8\n")
    args = ["validate", str(tmp_path / "deployments"), "--root", str(tmp_path)]
    assert main([*args, "--max-replicas", "8"]) == 0
    assert main([*args, "--max-replicas", "4"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "deployments/echo.toml:3:16: backends.echo.num_replicas: 8 is above this agent's --max-replicas (4)"
    ]


def test_run_refuses_a_max_replicas_below_one_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = tmp_path / "state"
    assert main(["run", "--max-replicas", "0", "--state-dir", str(state_dir)]) == 2
    assert capsys.readouterr().err.strip() == "gitops run: --max-replicas must be at least 1, not 0"
    assert not state_dir.exists()
