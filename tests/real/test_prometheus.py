"""A real Prometheus scrapes a real agent and proxy with the shipped config.

Prometheus (Debian's package, installed by `make test`) runs on loopback
with a copy of monitoring/prometheus.yml whose only changes are the
targets, a 1 s scrape and evaluation interval, and the absolute path of the
shipped alert rules. There is no skip when it is missing: the test fails.

The full-stack test runs `gitops run` joined to the session's Ray against a
real git repository, makes a few commits (good, traffic change, invalid,
fixed), sends traffic (including handler errors, so 5xx series exist, and
shadow copies), kills one replica (so a restart is counted), and then
evaluates every query of the shipped dashboard and alert rules through
Prometheus's HTTP API. Alert rules are conditions that are normally false;
each is written as `<query> <comparison> <threshold>`, and the test
evaluates the query without the comparison, which must return data.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.server
import json
import re
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml

from proxy.observability.metrics import ProxyMetrics
from tests.support.otlp import OtlpReceiver
from tests.support.prometheus import MONITORING, Prometheus
from tests.support.stack import AgentProcess, agent_namespace, free_port

pytestmark = pytest.mark.real

THRESHOLD = re.compile(r"^(?P<query>.+?)\s*(?:>|<|>=|<=|==|!=)\s*[0-9.]+$")


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Callable[[dict[str, list[str]]], Prometheus]]:
    started: list[Prometheus] = []

    def start(targets: dict[str, list[str]]) -> Prometheus:
        started.append(Prometheus(tmp_path, targets))
        return started[-1]

    yield start
    for prometheus in started:
        prometheus.stop()


def test_a_restarted_proxy_is_one_series_whose_counter_resets_like_any_process(
    start_prometheus: Callable[[dict[str, list[str]]], Prometheus],
) -> None:
    port = free_port()
    before = ProxyMetrics()
    before.serve("127.0.0.1", port)
    prometheus = start_prometheus({"gitops-agent": [], "gitops-proxy": [f"127.0.0.1:{port}"]})
    try:
        for _ in range(5):
            before.request_finished("echo", "v1", 200, 0.01)
        total = 'gitops_http_requests_total{endpoint="echo"}'
        prometheus.wait_for(total, lambda r: bool(r) and float(r[0]["value"][1]) == 5)
    finally:
        before.close()
    after = ProxyMetrics()
    after.serve("127.0.0.1", port)
    try:
        for _ in range(2):
            after.request_finished("echo", "v1", 200, 0.01)
        prometheus.wait_for(total, lambda r: bool(r) and float(r[0]["value"][1]) == 2)
        # Same target, same labels: one series, not an old and a new one summed.
        assert prometheus.value(f"count({total})") == 1
        assert prometheus.value(f"sum({total})") == 2
        # Prometheus sees exactly one counter reset, as for any process restart...
        assert prometheus.value(f"resets({total}[5m])") == 1
        # ...and increase() counts through it instead of going negative.
        assert prometheus.value(f"increase({total}[5m])") >= 2
    finally:
        after.close()


# --- the full stack ---------------------------------------------------------------

APP = '''
from starlette.requests import Request


class Hello:
    def __init__(self, label: str) -> None:
        self.label = label

    def __call__(self, request: Request) -> dict:
        if request.query_params.get("fail"):
            raise RuntimeError("asked to fail")
        return {"backend": self.label}


class Batched:
    async def __call__(self, requests: list[Request]) -> list[dict]:
        return [{"batch_size": len(requests)} for _ in requests]


class Ticks:
    async def __call__(self, request: Request):
        for tick in range(3):
            yield f"data: {tick}\\n\\n"
'''


def spec(traffic: dict[str, float], capture: Path, broken: bool = False) -> str:
    """`capture`: the directory /hello's sampled records go to (its capture panel)."""
    text = ""
    for label in ("v1", "v2", "shadow"):
        text += (
            f'[backends.hello-{label}]\nimport_path = "apps.hello:Hello"\ninit_args = ["{label}"]\n'
            "num_replicas = 1\nray_actor_options = { num_cpus = 0 }\n"
            "health_check_period_s = 0.5\nhealth_check_timeout_s = 20\n\n"
        )
    text += (
        '[backends.batched]\nimport_path = "apps.hello:Batched"\nnum_replicas = 1\n'
        "max_concurrent_queries = 32\nray_actor_options = { num_cpus = 0 }\n"
        "[backends.batched.batching]\nmax_batch_size = 8\nbatch_wait_timeout_s = 0.05\n\n"
        '[endpoints.batched]\nroute = "/batched"\ntraffic = { batched = 1.0 }\n\n'
        '[backends.ticks]\nimport_path = "apps.hello:Ticks"\nnum_replicas = 1\n'
        "ray_actor_options = { num_cpus = 0 }\n\n"
        '[endpoints.ticks]\nroute = "/ticks"\ntraffic = { ticks = 1.0 }\n\n'
    )
    weights = ", ".join(f'"hello-{k}" = {v}' for k, v in traffic.items())
    text += (
        f'[endpoints.hello]\nroute = "/hello"\ntraffic = {{ {weights} }}\n'
        'shadow = { "hello-shadow" = 1.0 }\ntimeout_s = 5\nshadow_compare = "status"\n'
        # One lenient step: every traffic change is judged once, so the rollout
        # panels have checks to show without holding the test's traffic back.
        "\n[endpoints.hello.rollout]\nsteps = [1.0]\nstep_interval_s = 1\nmin_requests = 0\n"
        "max_error_ratio = 1.0\nmax_p99_latency_s = 60\n"
        # Traced and captured, so the audit panels have data (the agent exports to a loopback receiver).
        "\n[endpoints.hello.tracing]\nsample = 1.0\n"
        f'\n[endpoints.hello.capture]\nsample = 1.0\nsink = "file://{capture}"\n'
    )
    return text + ("no_such_key = 1\n" if broken else "")


class SpecRepo:
    """A real git repository for a module-scoped fixture (`repo` is per test)."""

    def __init__(self, root: Path, signing_key: Path) -> None:
        self.root = root
        root.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "tests@example.invalid")
        self.git("config", "user.name", "tests")
        # Every commit is ssh-signed, so the agent runs with --verify-commits.
        self.git("config", "gpg.format", "ssh")
        self.git("config", "user.signingkey", str(signing_key))
        self.git("config", "commit.gpgsign", "true")

    def git(self, *args: str) -> str:
        done = subprocess.run(["git", *args], cwd=self.root, check=True, capture_output=True, text=True)
        return done.stdout.strip()

    def write(self, relpath: str, text: str) -> None:
        path = self.root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def commit(self, message: str) -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")


def _kill_one_replica(backend: str) -> None:
    """Kill a replica actor the way a crash would; the controller must restart it."""
    names = [
        actor["name"]
        for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor["namespace"] == agent_namespace() and backend in actor["name"]
    ]
    assert names, f"no replica actor of {backend} found"
    ray.kill(ray.get_actor(names[0], namespace=agent_namespace()), no_restart=True)


def _shipped_queries() -> list[tuple[str, str]]:
    """(id, query) for every dashboard target and every alert rule's query."""
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    queries = [
        (f"panel:{panel['title']}:{target['refId']}", target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            condition = THRESHOLD.match(rule["expr"])
            assert condition, f"{rule['alert']}: not <query> <comparison> <threshold>"
            queries.append((f"alert:{rule['alert']}", condition["query"]))
    return queries


SHIPPED = _shipped_queries()


@dataclass(frozen=True)
class Stack:
    agent: AgentProcess
    prometheus: Prometheus
    codes: Counter[int]  # status codes the clients received from the proxy


class _RefusingReceiver(http.server.BaseHTTPRequestHandler):
    """A notification receiver that refuses us: every delivery fails at once (403, not retried)."""

    def do_POST(self) -> None:  # noqa: N802 — http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(403)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _refusing_receiver() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RefusingReceiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def stack(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The agent as the shipped dashboard expects it: signed commits checked
    (--verify-commits), shadow replies compared, traffic changes rolled out,
    and a notification receiver that refuses it, so every shipped panel and
    alert has series to show."""
    with _refusing_receiver() as receiver, OtlpReceiver() as otlp:
        yield from _stack(tmp_path_factory, receiver, otlp.url)


def _stack(tmp_path_factory: pytest.TempPathFactory, receiver: str, otlp: str) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("stack")
    capture = workdir / "capture"
    notify = workdir / "notify.toml"
    notify.write_text(f'[providers.ci]\ntype = "webhook"\nurl = "{receiver}"\n')
    key = workdir / "tests"  # the principal tests@example.invalid, the repository's committer
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tests", "-f", str(key)], check=True)
    allowed = workdir / "allowed_signers"
    allowed.write_text(f"tests@example.invalid {key.with_suffix('.pub').read_text().strip()}\n")
    repo = SpecRepo(workdir / "repo", key)
    repo.write("apps/__init__.py", "")
    repo.write("apps/hello.py", APP)
    repo.write("deployments/hello.toml", spec({"v1": 0.5, "v2": 0.5}, capture))
    first = repo.commit("hello, split 50/50")
    agent = AgentProcess(
        repo.root, workdir, ray.get_runtime_context().gcs_address,
        ["--log-format", "json", "--notify", str(notify), "--verify-commits", "--allowed-signers", str(allowed),
         "--otlp-endpoint", otlp]
    )
    prometheus = None
    try:
        agent.wait_applied(first)
        prometheus = Prometheus(
            workdir,
            {
                "gitops-agent": [f"127.0.0.1:{agent.admin_port}"],
                "gitops-proxy": [f"127.0.0.1:{agent.metrics_port}"],
            },
        )
        codes = _drive(agent, repo, capture)
        # rate() needs two samples after the last traffic: wait for three scrapes.
        driven = time.time()
        prometheus.wait_for(f"min(timestamp(up)) > {driven + 2.5}", bool, timeout_s=15)
        yield Stack(agent, prometheus, codes)
    finally:
        if prometheus is not None:
            prometheus.stop()
        agent.stop()


def _traffic(agent: AgentProcess, codes: Counter[int]) -> None:
    """40 requests, every tenth one asking the handler to raise (a 500)."""
    for i in range(40):
        reply = agent.http.get(agent.proxy + "/hello" + ("?fail=1" if i % 10 == 0 else ""))
        codes[reply.status_code] += 1
    # Concurrent requests to the batched backend, so its batch-size panel has data.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        batched = list(pool.map(lambda _: agent.http.get(agent.proxy + "/batched").status_code, range(32)))
    assert batched == [200] * 32
    # A client whose deadline has passed on arrival: 504, never started (the deadlines panel).
    late = agent.http.get(agent.proxy + "/hello", headers={"X-Request-Timeout": "0"})
    assert late.status_code == 504, late.text
    codes[late.status_code] += 1
    # Streamed answers, so the time-to-first-byte panel has data.
    streamed = [agent.http.get(agent.proxy + "/ticks") for _ in range(5)]
    assert [(r.status_code, r.text) for r in streamed] == [(200, "data: 0\n\ndata: 1\n\ndata: 2\n\n")] * 5


def _drive(agent: AgentProcess, repo: SpecRepo, capture: Path) -> Counter[int]:
    """Traffic, a traffic change, an invalid commit, its fix and a replica crash. (The traffic's
    5xx hold the status at BackendErrors for a minute: the commits after it are waited for as
    applied, not as Synced.)"""
    codes: Counter[int] = Counter()
    _traffic(agent, codes)
    repo.write("deployments/hello.toml", spec({"v1": 0.8, "v2": 0.2}, capture))
    agent.wait_applied_though_erring(repo.commit("shift traffic to v1"))
    repo.write("deployments/hello.toml", spec({"v1": 0.8, "v2": 0.2}, capture, broken=True))
    agent.wait_attempted(repo.commit("a typo"))
    _kill_one_replica("hello-v2")
    repo.write("deployments/hello.toml", spec({"v1": 0.9, "v2": 0.1}, capture))
    agent.wait_applied_though_erring(repo.commit("fix the typo, 90/10"))
    _traffic(agent, codes)
    return codes


# Series this stack cannot make without a feature it does not run; each is valid
# PromQL here (Prometheus accepts it), and the named real test makes its series.
NOT_DRIVEN = {
    "panel:Replica restarts by reason (1h):B": "a hung replica (tests/real/test_hung_replica.py)",
    "panel:Model fetches: bytes/s and seconds per fetch, by model:A": "an object store (tests/real/test_models.py)",
    "panel:Model fetches: bytes/s and seconds per fetch, by model:B": "an object store (tests/real/test_models.py)",
    "panel:Requests refused by tenant limits (5m):A": "a tenant over its limit (tests/real/test_rate_limits_workers.py)",
    **{f"panel:Multiplexed models: requests, loads and evictions per second:{ref}":
       "a multiplexed backend (tests/real/test_multiplexing.py)" for ref in "ABC"},
    **{f"panel:Retries and retry budget (per second):{ref}":
       "a retried request (tests/real/test_traffic_policy.py)" for ref in "AB"},
    **{f"panel:Outlier ejections:{ref}": "a replica failing as an outlier (tests/real/test_traffic_policy.py)"
       for ref in "AB"},
    "panel:Circuit limits: requests turned away (per second):A":
        "a circuit limit reached (tests/real/test_traffic_policy.py)",
    **{f"panel:LLM tokens per tenant (per second):{ref}":
       "an endpoint with a token budget (tests/real/test_token_budgets.py)" for ref in "AB"},
    "panel:Requests refused by token budgets (5m):A": "a tenant over its token budget (tests/real/test_token_budgets.py)",
    **{f"panel:Artifact automation {panel}": "an automation.toml (tests/real/test_automation.py)"
       for panel in ("looks by result (1h):A", "proposals and errors (1h):A", "proposals and errors (1h):B")},
    "alert:GitopsAutomationFailing": "an automation that fails (tests/real/test_automation.py)",
    **{f"panel:{panel}:{ref}": "an OpenAI backend's generations (tests/real/test_openai_backend.py)"
       for panel in ("LLM time to first token at the engine (p50, p99), by model",
                     "LLM time per output token at the engine (p50, p99), by model",
                     "LLM tokens and generations per second, by model") for ref in "AB"},
}


def test_every_query_left_undriven_is_still_shipped() -> None:
    assert set(NOT_DRIVEN) <= {name for name, _ in SHIPPED}


@pytest.mark.parametrize("name,query", SHIPPED, ids=[i for i, _ in SHIPPED])
def test_every_shipped_dashboard_and_alert_query_returns_data(
    stack: Stack, name: str, query: str
) -> None:
    if name in NOT_DRIVEN:
        stack.prometheus.query(query)  # accepted by Prometheus: a valid query over known series
    else:
        stack.prometheus.wait_for(query, bool, timeout_s=5)


def test_prometheus_scrapes_the_agent_and_the_proxy(stack: Stack) -> None:
    health = stack.prometheus.target_health(expected=2)
    assert set(health.values()) == {"up"}, health


def test_the_shipped_alert_rules_load_and_evaluate_cleanly(stack: Stack) -> None:
    groups = stack.prometheus.http.get("/api/v1/rules").json()["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    shipped = yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"]
    assert len(rules) == sum(len(group["rules"]) for group in shipped)
    assert {rule["health"] for rule in rules} == {"ok"}, rules


def test_agent_metrics_carry_the_true_state_of_the_stack(stack: Stack) -> None:
    prometheus = stack.prometheus
    applied = stack.agent.get("/status")["last_applied_revision"]
    prometheus.wait_for(f'gitops_applied_commit_info{{commit="{applied}"}}', bool)
    # The traffic includes handler errors (every tenth /hello raises), so the
    # status says the backend serves 5xx: Degraded, reason BackendErrors.
    prometheus.wait_for('gitops_sync_status{status="Degraded"} == 1', bool)
    weight = 'gitops_endpoint_traffic_weight{endpoint="hello",backend="hello-v1"}'
    prometheus.wait_for(weight, lambda r: bool(r) and float(r[0]["value"][1]) == 0.9)
    assert prometheus.value('sum(gitops_reconcile_total{result="failure"})') >= 1
    assert prometheus.value('sum(gitops_replica_restarts_total{backend="hello-v2"})') >= 1
    assert prometheus.value('max(gitops_backend_replicas{backend="hello-v1",state="RUNNING"})') == 1


def test_proxy_request_counts_equal_the_answers_clients_received(stack: Stack) -> None:
    query = 'sum by (code) (gitops_http_requests_total{endpoint="hello"})'
    expected = {str(code): float(n) for code, n in stack.codes.items()}
    stack.prometheus.wait_for(
        query, lambda r: {s["metric"]["code"]: float(s["value"][1]) for s in r} == expected
    )
    assert stack.codes[500] >= 1  # handlers raised, so the 5xx series are real
