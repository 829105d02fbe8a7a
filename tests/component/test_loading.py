"""Loading a spec tree: the resolved desired state, or every error located."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from gitops.sources.trees import MemoryTree
from gitops.specs.loading import DesiredState, Loader, LoadResult, SpecError
from gitops.specs.models import DERIVED_BACKEND_FIELDS, DERIVED_ENDPOINT_FIELDS, DERIVED_MODEL_FIELDS
from tests.support.specs import ECHO_PY, ECHO_TOML
from vocabulary.spec.llm import LLMConfig
from vocabulary.spec.backends import AutoscalingConfig, BackendConfig, BatchingConfig, ModelConfig, UpdateConfig
from vocabulary.spec.endpoints import CaptureConfig, EndpointConfig, LimitsConfig, MatchRule, TracingConfig
from vocabulary.spec.rollout_config import MetricCheck, RolloutConfig
from vocabulary.spec.routing import MultiplexConfig, RoutingConfig
from vocabulary.spec.traffic_policy import CircuitConfig, OutliersConfig, RetriesConfig
from vocabulary.spec.v2 import TensorConfig, V2Config


def tree(specs: dict[str, str], code: dict[str, str] | None = None) -> MemoryTree:
    return MemoryTree({**{f"deployments/{k}": v for k, v in specs.items()}, **(code or {"apps/echo.py": ECHO_PY})})


def errors(result: LoadResult) -> list[str]:
    return [str(error) for error in result.errors]


def load_tree(tree: MemoryTree) -> LoadResult:
    """A load by a fresh loader: nothing cached by an earlier test."""
    return Loader().load_tree(tree)


def test_a_valid_tree_loads_into_a_resolved_desired_state() -> None:
    result = load_tree(tree({"echo.toml": ECHO_TOML}))
    assert result.ok and isinstance(result.state, DesiredState)
    v1 = result.state.backends["echo-v1"]
    assert v1.init_args == ("v1",) and v1.num_replicas == 2 and v1.working_dir is None
    assert v1.ray_actor_options == {"num_cpus": 0.1}
    assert v1.runtime_env == {"env_vars": {"MODE": "prod"}}
    assert v1.user_config == {"greeting": "hi"}
    assert len(v1.version) == 12


def test_autoscaling_is_carried_into_the_backend_config() -> None:
    state = load_tree(tree({"echo.toml": ECHO_TOML})).state
    assert state is not None
    v2 = state.backends["echo-v2"]
    assert v2.autoscaling == AutoscalingConfig(min_replicas=1, max_replicas=4, target_ongoing_requests=3)
    assert v2.num_replicas == 1


def test_endpoint_defaults_are_filled_in() -> None:
    state = load_tree(tree({"echo.toml": ECHO_TOML})).state
    assert state is not None
    echo = state.endpoints["echo"]
    assert echo.methods == ("GET", "POST") and echo.shadow == {} and echo.timeout_s == 30
    assert echo.traffic == {"echo-v1": 0.9, "echo-v2": 0.1}


def test_specs_are_merged_from_every_toml_file_below_the_spec_path() -> None:
    split = ECHO_TOML.split("[endpoints.echo]")
    result = load_tree(tree({"backends.toml": split[0], "nested/endpoints.toml": "[endpoints.echo]" + split[1]}))
    assert result.ok and result.state is not None
    assert set(result.state.backends) == {"echo-v1", "echo-v2"} and set(result.state.endpoints) == {"echo"}


def test_files_that_are_not_toml_are_ignored() -> None:
    result = load_tree(tree({"echo.toml": ECHO_TOML, "README.md": "not toml ["}))
    assert result.ok


def test_an_empty_spec_directory_is_an_empty_desired_state() -> None:
    result = load_tree(MemoryTree({"deployments/README.md": "nothing yet"}))
    assert result.ok and result.state == DesiredState()


def test_a_missing_spec_path_is_an_error_not_an_empty_state() -> None:
    result = load_tree(MemoryTree({"other/x.toml": ""}))
    assert result.state is None
    assert errors(result) == ["deployments:1:1: spec path 'deployments' does not exist"]


def test_a_spec_error_reads_file_line_col_message() -> None:
    assert str(SpecError("deployments/a.toml", 3, 5, "bad")) == "deployments/a.toml:3:5: bad"


def test_a_toml_syntax_error_is_located_by_tomllib() -> None:
    result = load_tree(tree({"bad.toml": "[backends.x]\nimport_path = \n"}))
    assert errors(result) == ["deployments/bad.toml:2:15: TOML syntax: Invalid value"]


def test_a_file_that_is_not_utf8_is_an_error() -> None:
    result = load_tree(MemoryTree({"deployments/bad.toml": b"# caf\xe9\n"}))
    assert errors(result) == ["deployments/bad.toml:1:1: file is not valid UTF-8"]


def test_an_error_is_located_at_the_offending_key() -> None:
    text = ECHO_TOML.replace("num_replicas = 2", "num_replicas = -2")
    assert errors(load_tree(tree({"echo.toml": text}))) == [
        "deployments/echo.toml:5:16: backends.echo-v1.num_replicas: must be >= 0 (got -2)"
    ]


def test_every_error_is_reported_at_once_in_file_order() -> None:
    result = load_tree(
        tree(
            {
                "a.toml": ECHO_TOML.replace("num_replicas = 2", "num_replicas = '2'"),
                "b.toml": "[endpoints.other]\nroute = 'x'\ntraffic = { nope = 1 }\n",
                "c.toml": "oops",
            }
        )
    )
    assert [(e.file, e.line) for e in result.errors] == [
        ("deployments/a.toml", 5),
        ("deployments/b.toml", 2),
        ("deployments/b.toml", 3),
        ("deployments/c.toml", 1),
    ]
    assert result.state is None


def test_a_name_defined_in_two_files_names_both_files() -> None:
    second = "\n\n[backends.echo-v1]\nimport_path = 'apps.echo:hello'\n"
    assert errors(load_tree(tree({"a.toml": ECHO_TOML, "b.toml": second}))) == [
        "deployments/b.toml:3:1: backend 'echo-v1' is defined twice: in deployments/a.toml:2:1 and in deployments/b.toml"
    ]


def test_two_endpoints_on_one_route_are_an_error() -> None:
    second = "[endpoints.again]\nroute = '/echo'\ntraffic = { echo-v1 = 1.0 }\n"
    assert errors(load_tree(tree({"a.toml": ECHO_TOML, "b.toml": second}))) == [
        "deployments/b.toml:2:1: endpoints.again.route: '/echo' is already the route of endpoint 'echo' (deployments/a.toml:20:1)"
    ]


def test_routes_differing_only_in_slashes_are_one_route() -> None:
    second = "[endpoints.again]\nroute = '/echo/'\ntraffic = { echo-v1 = 1.0 }\n"
    assert errors(load_tree(tree({"a.toml": ECHO_TOML, "b.toml": second}))) == [
        "deployments/b.toml:2:1: endpoints.again.route: '/echo/' is already the route of endpoint 'echo' "
        "(deployments/a.toml:20:1)"
    ]


def test_traffic_must_sum_to_one() -> None:
    text = ECHO_TOML.replace("echo-v2 = 0.1", "echo-v2 = 0.2")
    assert errors(load_tree(tree({"echo.toml": text}))) == [
        "deployments/echo.toml:21:1: endpoints.echo.traffic: weights sum to 1.1, not 1"
    ]


def test_traffic_within_tolerance_of_one_is_accepted() -> None:
    text = ECHO_TOML.replace("echo-v1 = 0.9, echo-v2 = 0.1", "echo-v1 = 0.3333333, echo-v2 = 0.6666667")
    assert load_tree(tree({"echo.toml": text})).ok


def test_traffic_to_an_undefined_backend_is_located_at_its_weight() -> None:
    text = ECHO_TOML.replace("echo-v2 = 0.1 }", "echo-v3 = 0.1 }")
    assert errors(load_tree(tree({"echo.toml": text}))) == [
        "deployments/echo.toml:21:28: endpoints.echo.traffic: backend 'echo-v3' is not defined"
    ]


def test_shadow_to_an_undefined_backend_is_an_error() -> None:
    text = ECHO_TOML + "shadow = { candidate = 0.5 }\n"
    assert errors(load_tree(tree({"echo.toml": text}))) == [
        "deployments/echo.toml:22:12: endpoints.echo.shadow: backend 'candidate' is not defined"
    ]


def test_an_invalid_backend_does_not_also_count_as_undefined() -> None:
    text = ECHO_TOML.replace("init_args = [\"v2\"]", "init_args = \"v2\"")
    assert errors(load_tree(tree({"echo.toml": text}))) == [
        "deployments/echo.toml:12:13: backends.echo-v2.init_args: must be an array (got 'v2')"
    ]


def test_positive_traffic_to_a_backend_with_zero_replicas_is_an_error() -> None:
    text = ECHO_TOML.replace("num_replicas = 2", "num_replicas = 0")
    assert errors(load_tree(tree({"echo.toml": text}))) == [
        "deployments/echo.toml:21:13: endpoints.echo.traffic: backend 'echo-v1' gets 90% of the traffic "
        "but can have 0 replicas (num_replicas = 0)"
    ]


def test_positive_traffic_to_an_autoscaled_backend_that_can_reach_zero_is_an_error() -> None:
    text = ECHO_TOML.replace("min_replicas = 1", "min_replicas = 0")
    [message] = errors(load_tree(tree({"echo.toml": text})))
    assert message.endswith(
        "backend 'echo-v2' gets 10% of the traffic but can have 0 replicas (autoscaling.min_replicas = 0)"
        "; set cold_start_timeout_s to hold its requests while a first replica starts"
    )


def test_zero_traffic_to_a_backend_with_zero_replicas_is_fine() -> None:
    text = ECHO_TOML.replace("num_replicas = 2", "num_replicas = 0").replace(
        "echo-v1 = 0.9, echo-v2 = 0.1", "echo-v1 = 0.0, echo-v2 = 1.0"
    )
    assert load_tree(tree({"echo.toml": text})).ok


def test_an_unknown_top_level_table_is_an_error() -> None:
    assert errors(load_tree(tree({"x.toml": "[backend.echo]\nimport_path = 'a:b'\n"}))) == [
        "deployments/x.toml:1:1: unknown table 'backend' "
        "(expected [backends.NAME], [endpoints.NAME], [secrets.NAME] or [models.NAME]) (did you mean 'backends'?)"
    ]


def test_an_invalid_name_is_located_at_its_table() -> None:
    assert errors(load_tree(tree({"x.toml": "\n[backends.Echo]\nimport_path = 'apps.echo:hello'\n"}))) == [
        "deployments/x.toml:2:1: backends.Echo: name must match [a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?"
    ]


def test_a_missing_module_is_located_at_the_import_path() -> None:
    text = ECHO_TOML.replace('"apps.echo:Echo"\ninit_args = ["v2"]', '"apps.gone:Echo"\ninit_args = ["v2"]')
    assert errors(load_tree(tree({"echo.toml": text}))) == [
        "deployments/echo.toml:11:1: backends.echo-v2.import_path: module 'apps.gone' not found "
        "(no apps/gone/__init__.py or apps/gone.py)"
    ]


def test_a_missing_attribute_is_an_error() -> None:
    text = ECHO_TOML.replace('"apps.echo:Echo"\ninit_args = ["v2"]', '"apps.echo:Missing"\ninit_args = ["v2"]')
    assert errors(load_tree(tree({"echo.toml": text}))) == [
        "deployments/echo.toml:11:1: backends.echo-v2.import_path: 'Missing' is not defined at module level in apps/echo.py"
    ]


def test_init_args_for_a_function_are_an_error() -> None:
    text = ECHO_TOML.replace('"apps.echo:Echo"\ninit_args = ["v2"]', '"apps.echo:hello"\ninit_args = ["v2"]')
    assert errors(load_tree(tree({"echo.toml": text}))) == [
        "deployments/echo.toml:12:1: backends.echo-v2.init_args: 'hello' is a function; init_args is only for a class"
    ]


def test_a_code_path_that_does_not_exist_is_an_error() -> None:
    text = ECHO_TOML.replace('init_args = ["v2"]', 'init_args = ["v2"]\ncode_paths = ["apps", "lib"]')
    assert errors(load_tree(tree({"echo.toml": text}))) == [
        "deployments/echo.toml:13:23: backends.echo-v2.code_paths: 'lib' does not exist"
    ]


def test_user_code_is_read_from_the_tree_not_imported() -> None:
    code = {"apps/echo.py": ECHO_PY + "\nraise SystemExit('imported!')\n"}
    assert load_tree(tree({"echo.toml": ECHO_TOML}, code)).ok


def test_reloading_an_unchanged_tree_returns_the_cached_result() -> None:
    loader = Loader()
    first = loader.load_tree(tree({"echo.toml": ECHO_TOML}))
    again = loader.load_tree(tree({"echo.toml": ECHO_TOML}))
    assert again is first


def test_a_fresh_loader_starts_with_an_empty_cache() -> None:
    first = Loader().load_tree(tree({"echo.toml": ECHO_TOML}))
    again = Loader().load_tree(tree({"echo.toml": ECHO_TOML}))
    assert again is not first and again == first


def test_a_change_to_code_outside_the_specs_is_not_served_from_the_cache() -> None:
    loader = Loader()
    loader.load_tree(tree({"echo.toml": ECHO_TOML}))
    changed = loader.load_tree(tree({"echo.toml": ECHO_TOML}, {"apps/echo.py": "def hello(r): pass\n"}))
    assert not changed.ok


EVERY_KEY_TOML = """
[backends.full]
import_path = "apps.echo:Echo"
init_args = ["x"]
init_kwargs = { label = "y" }
num_replicas = 3
max_concurrent_queries = 7
user_config = { a = 1 }
graceful_shutdown_timeout_s = 1
health_check_period_s = 2
health_check_timeout_s = 3
startup_timeout_s = 30
ray_actor_options = { num_cpus = 0.5 }
max_replicas_per_node = 2
placement = { bundles = [{ CPU = 1 }], strategy = "SPREAD" }
runtime_env = { env_vars = { A = "b" } }
batching = { max_batch_size = 4, batch_wait_timeout_s = 0.5 }
update = { max_surge = 0, max_unavailable = 2 }
routing = { policy = "prefix_affinity", key = "json:messages", prefix_bytes = 512, max_imbalance = 3 }
uses = ["scaled"]
secrets = ["db"]
on_secret_change = "restart"
models = ["weights"]

[secrets.db]
file = "secrets/db.age"

[models.weights]
source = "s3://models/weights/"
sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
load_timeout_s = 30

[models.hub]
source = "hf://acme/tiny@0123456789abcdef0123456789abcdef01234567"
sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
include = ["*.json"]
exclude = ["onnx/"]
token_secret = "db"

[backends.scaled]
import_path = "apps.echo:hello"
autoscaling = { min_replicas = 2, max_replicas = 5, target_ongoing_requests = 4, upscale_delay_s = 1, downscale_delay_s = 2, target_reported_load = 3 }
cold_start_timeout_s = 5
multiplex = { max_models_per_replica = 3, header = "X-Adapter", models = ["a1"], model_pattern = "a[0-9]" }

[backends.greeter]
import_path = "apps.greeter:Greeter"
grpc_servicer = "apps.greeter_pb2_grpc:add_GreeterServicer_to_server"

[backends.model]
import_path = "apps.model:Model"
protocol = "v2"
models = ["weights"]
v2 = { name = "iris", platform = "onnx", model = "weights", inputs = [{ name = "x", datatype = "FP16", shape = [-1, 4] }], outputs = [{ name = "y", datatype = "BYTES", shape = [2] }] }

[backends.chat]
models = ["weights", "hub"]
placement = { bundles = [{ CPU = 1 }, { GPU = 1 }, { GPU = 1 }], strategy = "STRICT_PACK" }
llm = { engine = "vllm", model = "weights", served_model_name = "w", tensor_parallel_size = 2, max_model_len = 64, lora_adapters = ["hub"], max_loras = 2, engine_args = { dtype = "half" } }

[endpoints.full]
route = "/full"
methods = ["PUT"]
traffic = { full = 1.0 }
shadow = { scaled = 0.5 }
timeout_s = 9
max_body_bytes = 1048576
match = [{ header = "x-canary", value = "yes", backend = "scaled" }, { json = "model", value = "small", backend = "scaled" }]
sticky = "cookie:user"
grpc_service = "helloworld.Greeter"
grpc_streaming = ["Chat"]
shadow_compare = "json"
shadow_ignore = ["at"]
shadow_query = true
shadow_values = true
limits = { requests_per_s = 5, burst = 7, tokens_per_minute = 9000, key = "query:tenant" }
rollout = { steps = [0.2, 1.0], step_interval_s = 5, min_requests = 3, max_error_ratio = 0.5, max_p99_latency_s = 2, on_failure = "pause", metrics = [{ name = "errors", query = "up", min = 0, max = 1 }] }
tracing = { sample = 0.25 }
capture = { sample = 0.5, sink = "file:///tmp/capture", max_body_bytes = 10, redact = ["json:$.password"] }
retries = { attempts = 3, retry_on = ["503"], methods = ["PUT", "POST"], non_idempotent = true, budget_percent = 10, min_retries = 1, backoff_s = 0.05, max_backoff_s = 0.5 }
outliers = { consecutive_errors = 4, success_rate_stdev = 1.5, success_rate_min_requests = 20, success_rate_min_replicas = 4, interval_s = 5, base_ejection_s = 10, max_ejection_percent = 34, replace_after = 2 }
circuit = { max_pending_requests = 7, max_retries = 2 }
"""  # noqa: E501 — a TOML line as a user writes it


def _set_by_the_file(model: type[BaseModel], values: list[BaseModel], derived: frozenset[str]) -> set[str]:
    """The fields of `model` that differ from their default in one of `values`."""
    fields = {name: field for name, field in model.model_fields.items() if name not in derived}
    defaults = {name: field.get_default(call_default_factory=True) for name, field in fields.items()}
    return {name for name in fields for value in values if getattr(value, name) != defaults.get(name)}


def test_every_config_field_a_file_may_set_reaches_the_config() -> None:
    files = tree({"full.toml": EVERY_KEY_TOML}, {
        "apps/echo.py": ECHO_PY, "apps/model.py": "class Model:\n    def predict(self, inputs): ...\n",
        "secrets/db.age": "age-encryption.org/v1\n",
        "apps/greeter.py": "from apps.greeter_pb2_grpc import GreeterServicer\n\n"
                           "class Greeter(GreeterServicer):\n    def __call__(self, request): ...\n",
        "apps/greeter_pb2_grpc.py": (Path(__file__).resolve().parents[1] / "real/apps/helloworld_pb2_grpc.py").read_text(),
    })
    state = load_tree(files).state
    assert state is not None
    backends, endpoints = list(state.backends.values()), list(state.endpoints.values())
    scaling = [b.autoscaling for b in backends if b.autoscaling is not None]
    batching = [b.batching for b in backends if b.batching is not None]
    updates = [b.update for b in backends if b.update is not None]
    routings = [b.routing for b in backends if b.routing is not None]
    multiplexes = [b.multiplex for b in backends if b.multiplex is not None]
    rules = [rule for e in endpoints for rule in e.match]
    limits = [e.limits for e in endpoints if e.limits is not None]
    rollouts = [e.rollout for e in endpoints if e.rollout is not None]
    checks = [check for rollout in rollouts for check in rollout.metrics]
    tracing = [e.tracing for e in endpoints if e.tracing is not None]
    capture = [e.capture for e in endpoints if e.capture is not None]
    retries = [e.retries for e in endpoints if e.retries is not None]
    v2 = [b.v2 for b in backends if b.v2 is not None]
    tensors = [tensor for table in v2 for tensor in (*table.inputs, *table.outputs)]
    outliers = [e.outliers for e in endpoints if e.outliers is not None]
    llms = [b.llm for b in backends if b.llm is not None]
    circuits = [e.circuit for e in endpoints if e.circuit is not None]
    expected = [
        (BackendConfig, backends, DERIVED_BACKEND_FIELDS),
        (EndpointConfig, endpoints, DERIVED_ENDPOINT_FIELDS),
        (AutoscalingConfig, scaling, frozenset()),
        (BatchingConfig, batching, frozenset()),
        (UpdateConfig, updates, frozenset()),
        (RoutingConfig, routings, frozenset()),
        (MultiplexConfig, multiplexes, frozenset()),
        (MatchRule, rules, frozenset()),
        (LimitsConfig, limits, frozenset()),
        (RolloutConfig, rollouts, frozenset()),
        (MetricCheck, checks, frozenset()),
        (ModelConfig, list(state.models.values()), DERIVED_MODEL_FIELDS),
        (TracingConfig, tracing, frozenset()),
        (CaptureConfig, capture, frozenset()),
        (RetriesConfig, retries, frozenset()),
        (V2Config, v2, frozenset()),
        (TensorConfig, tensors, frozenset()),
        (OutliersConfig, outliers, frozenset()),
        (LLMConfig, llms, frozenset()),
        (CircuitConfig, circuits, frozenset()),
    ]
    for model, values, derived in expected:
        assert _set_by_the_file(model, values, derived) == set(model.model_fields) - derived, model.__name__


def test_a_tree_of_ten_thousand_backends_is_one_error_quickly() -> None:
    import time

    from gitops.specs.limits import MAX_TABLES

    files = {
        f"deployments/many{part}.toml": "".join(
            f'[backends.b{n}]\nimport_path = "apps.echo:Echo"\n' for n in range(part * 2000, (part + 1) * 2000))
        for part in range(5)
    }
    started = time.monotonic()
    result = Loader().load_tree(MemoryTree({**files, "apps/echo.py": ECHO_PY}))
    took = time.monotonic() - started
    assert not result.ok and result.state is None
    assert [str(e) for e in result.errors] == [
        f"deployments/many0.toml:{2 * MAX_TABLES + 1}:1: 10000 backends declared; a tree may declare at most {MAX_TABLES}"]
    assert took < 20, took
