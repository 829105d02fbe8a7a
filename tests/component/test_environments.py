"""Environments: `environments/NAME.toml` on top of the one spec tree, loaded and located."""

from __future__ import annotations

import pytest

from gitops.delivery.gates import Requirement, RequirementKind
from gitops.delivery.windows import WindowKind
from gitops.sources.trees import MemoryTree
from gitops.specs.environments import overridable_keys
from gitops.specs.loading import Loader
from tests.support.specs import ECHO_PY, ECHO_TOML


def tree(environments: dict[str, str]) -> MemoryTree:
    files = {"deployments/echo.toml": ECHO_TOML, "apps/echo.py": ECHO_PY}
    files.update({f"environments/{name}.toml": text for name, text in environments.items()})
    return MemoryTree(files)


def load(environment: str | None, environments: dict[str, str]):  # type: ignore[no-untyped-def]
    return Loader(environment=environment).load_tree(tree(environments))


PROD = """
[backends.echo-v1]
num_replicas = 3
runtime_env = { env_vars = { MODE = "production" } }

[backends.echo-v2.autoscaling]
max_replicas = 8

[endpoints.echo]
traffic = { echo-v1 = 1.0 }
"""


def test_an_environment_overrides_replicas_env_vars_autoscaling_and_traffic() -> None:
    result = load("prod", {"prod": PROD})
    assert result.ok, result.errors
    state = result.state
    assert state is not None
    assert state.backends["echo-v1"].num_replicas == 3
    assert state.backends["echo-v1"].runtime_env == {"env_vars": {"MODE": "production"}}
    # A table with keys of its own merges key by key: the base's min and target stay.
    scaling = state.backends["echo-v2"].autoscaling
    assert scaling is not None and (scaling.min_replicas, scaling.max_replicas, scaling.target_ongoing_requests) == (1, 8, 3)
    assert state.endpoints["echo"].traffic == {"echo-v1": 1.0}
    # Keys the environment leaves alone are the tree's.
    assert state.backends["echo-v1"].user_config == {"greeting": "hi"}


def test_without_an_environment_the_tree_is_loaded_as_written() -> None:
    state = load(None, {"prod": PROD}).state
    assert state is not None and state.backends["echo-v1"].num_replicas == 2
    assert state.endpoints["echo"].traffic == {"echo-v1": 0.9, "echo-v2": 0.1}


def test_a_key_that_is_not_overridable_is_an_error_at_its_place_in_the_environment_file() -> None:
    text = '[backends.echo-v1]\nnum_replicas = 3\nimport_path = "apps.other:Echo"\n'
    result = load("prod", {"prod": text})
    assert not result.ok
    assert [str(error) for error in result.errors] == [
        "environments/prod.toml:3:1: backends.echo-v1.import_path: not overridable per environment (these are: "
        + ", ".join(sorted(overridable_keys("backends")))
        + ")"
    ]


def test_pip_is_not_overridable_but_env_vars_are() -> None:
    text = '[backends.echo-v1]\nruntime_env = { pip = ["numpy"] }\n'
    errors = [str(error) for error in load("prod", {"prod": text}).errors]
    assert errors == [
        "environments/prod.toml:2:17: backends.echo-v1.runtime_env.pip: "
        "not overridable per environment (in runtime_env: env_vars)"
    ]


def test_an_overridden_value_that_breaks_a_rule_is_located_in_the_environment_file() -> None:
    text = "[endpoints.echo]\ntraffic = { echo-v1 = 0.5 }\n\n[backends.echo-v1]\nnum_replicas = -1\n"
    errors = [str(error) for error in load("prod", {"prod": text}).errors]
    assert any(e.startswith("environments/prod.toml:5:") and "num_replicas: must be >= 0" in e for e in errors), errors
    assert any(e.startswith("environments/prod.toml:2:") and "traffic" in e for e in errors), errors


def test_a_fixed_count_and_autoscaling_replace_each_other() -> None:
    state = load(
        "prod", {"prod": "[backends.echo-v2]\nnum_replicas = 2\n\n[backends.echo-v1.autoscaling]\nmax_replicas = 5\n"}
    ).state
    assert state is not None
    assert (state.backends["echo-v2"].num_replicas, state.backends["echo-v2"].autoscaling) == (2, None)
    scaling = state.backends["echo-v1"].autoscaling
    assert scaling is not None and (scaling.min_replicas, scaling.max_replicas) == (1, 5)


def test_both_a_fixed_count_and_autoscaling_in_an_environment_is_an_error_there() -> None:
    text = "[backends.echo-v2]\nnum_replicas = 2\nautoscaling = { max_replicas = 3 }\n"
    errors = [str(error) for error in load("prod", {"prod": text}).errors]
    assert errors == ["environments/prod.toml:2:1: backends.echo-v2: num_replicas cannot be combined with [autoscaling]"]


def test_an_error_in_a_merged_table_is_located_in_the_environment_file() -> None:
    shadowed = "[backends.echo-v2]\nautoscaling = { min_replicas = 5 }\n"
    errors = [str(error) for error in load("prod", {"prod": shadowed}).errors]
    assert errors == ["environments/prod.toml:2:1: backends.echo-v2.autoscaling: min_replicas (5) must be <= max_replicas (4)"], (
        errors
    )


def test_an_unknown_backend_or_a_missing_file_is_an_error() -> None:
    errors = [str(error) for error in load("prod", {"prod": "[backends.nope]\nnum_replicas = 2\n"}).errors]
    assert errors == ["environments/prod.toml:1:1: backends.nope: no backend 'nope' in the spec tree"]
    missing = [str(error) for error in load("qa", {"prod": PROD}).errors]
    assert missing == ["environments/qa.toml:1:1: environment 'qa' has no file environments/qa.toml"]


SETTINGS = """
[promotion]
to = "prod"
branch = "env/prod"
soak_s = 60
require = ["rollouts", "no_backend_errors", "shadow_agreement>=0.99"]
mode = "pull_request"
provider = "github"
repository = "acme/serving"

[[sync_windows]]
kind = "deny"
schedule = "0 22 * * 1-5"
duration_s = 36000
timezone = "Europe/Berlin"
"""


def test_promotion_and_sync_windows_are_read_as_the_environment_settings() -> None:
    result = load("staging", {"staging": SETTINGS})
    assert result.ok, result.errors
    settings = result.environment
    assert settings is not None and settings.promotion is not None
    assert (settings.promotion.to, settings.promotion.branch, settings.promotion.soak_s) == ("prod", "env/prod", 60)
    assert settings.promotion.require[2] == Requirement(RequirementKind.SHADOW_AGREEMENT, 0.99)
    (window,) = settings.sync_windows
    assert (window.kind, window.timezone, window.duration_s) == (WindowKind.DENY, "Europe/Berlin", 36000)


def test_bad_settings_are_errors_with_their_location() -> None:
    text = (
        SETTINGS.replace('"shadow_agreement>=0.99"', '"fast"')
        .replace("Europe/Berlin", "Mars/Olympus")
        .replace("0 22 * * 1-5", "0 25 * * *")
    )
    errors = [str(error) for error in load("staging", {"staging": text}).errors]
    assert errors == [
        "environments/staging.toml:6:1: promotion.require: "
        "'fast' is not a gate (rollouts, no_backend_errors, shadow_agreement>=RATIO)",
        "environments/staging.toml:13:1: sync_windows[0].schedule: hour: '25' is outside 0-23",
        "environments/staging.toml:15:1: sync_windows[0].timezone: 'Mars/Olympus' is not a time zone of the zoneinfo database",
    ], errors


def test_pull_request_mode_needs_a_provider_and_repository() -> None:
    text = '[promotion]\nto = "prod"\nbranch = "env/prod"\nmode = "pull_request"\n'
    errors = [str(error) for error in load("staging", {"staging": text}).errors]
    assert errors == [
        'environments/staging.toml:1:1: promotion: mode = "pull_request" needs provider ("github" or "gitlab") and repository'
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('repository = "../../admin"', "promotion: repository must be OWNER/NAME (got '../../admin')"),
        ('api_url = "http://api.example.com"', "promotion.api_url: must be https: the promotion token is sent"),
        ('api_url = "https://user:pw@api.example.com"', "promotion.api_url: must be an https:// URL without credentials"),
    ],
)
def test_where_a_promotion_token_may_go_is_checked(line: str, message: str) -> None:
    text = '[promotion]\nto = "prod"\nbranch = "env/prod"\nmode = "pull_request"\nprovider = "github"\n'
    text += 'repository = "acme/serving"\n' if not line.startswith("repository") else ""
    errors = [str(error) for error in load("staging", {"staging": text + line + "\n"}).errors]
    assert len(errors) == 1 and message in errors[0], errors


def test_a_toml_syntax_error_is_located() -> None:
    errors = [str(error) for error in load("prod", {"prod": "[backends.echo-v1]\nnum_replicas = \n"}).errors]
    assert errors == ["environments/prod.toml:2:16: TOML syntax: Invalid value"], errors


def test_an_environment_file_that_is_a_link_or_too_big_is_refused() -> None:
    files = {"deployments/echo.toml": ECHO_TOML, "apps/echo.py": ECHO_PY, "elsewhere.toml": PROD}
    linked = Loader(environment="prod").load_tree(MemoryTree(files, links={"environments/prod.toml": "../elsewhere.toml"}))
    assert [str(e) for e in linked.errors] == [
        "environments/prod.toml:1:1: an environment file must be a file, not a symbolic link"
    ]
    big = load("prod", {"prod": "# " + "x" * 2_000_000 + "\n"})
    assert [str(e).split(";")[0] for e in big.errors] == ["environments/prod.toml:1:1: file is 2000003 bytes"]
