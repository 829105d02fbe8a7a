"""End to end: a commit in a real git repository becomes served HTTP traffic.

Real Ray (the session's), the real controller and proxy on a free loopback
port, the agent running its loop in a thread, real HTTP. One controller for
the module; each test starts from an empty cluster and its own repository.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
import ray

from controller.client import start_or_connect
from gitops.admin.api import WebhookGuard, build_app, server
from gitops.admin.webhooks import sign
from gitops.loop.agent import Agent, AgentSettings, Trigger
from gitops.loop.history import History
from gitops.loop.metrics import AgentMetrics
from gitops.reconcile import planner
from gitops.reconcile.applying import Deadlines, apply
from gitops.reconcile.outcomes import Outcome
from gitops.sources.repos import GitSource
from gitops.specs.loading import Loader
from tests.support.stack import eventually, free_port
from vocabulary.spec.state import ServingState

pytestmark = pytest.mark.real

APP = '''
import time

CODE = "{code}"


class Echo:
    def __init__(self, label, start_delay_s=0.0):
        time.sleep(start_delay_s)
        self.label = label

    def __call__(self, request):
        return {{"label": self.label, "code": CODE}}
'''


def backend_toml(name: str, label: str, delay_s: float = 0.0) -> str:
    return (
        f'[backends.{name}]\nimport_path = "deployments.apps.echo:Echo"\n'
        f'init_args = ["{label}", {delay_s}]\nray_actor_options = {{ num_cpus = 0.01 }}\n'
        "graceful_shutdown_timeout_s = 1\n\n"
    )


class Specs:
    """Writes `deployments/echo.toml`; backend names carry a per-test tag so
    that no test re-creates a backend another test deleted."""

    def __init__(self, repo) -> None:
        self.repo = repo
        self.tag = uuid.uuid4().hex[:6]

    def name(self, label: str) -> str:
        return f"t{self.tag}-{label}"

    def write(self, traffic: dict[str, float], labels: tuple[str, ...] = ("v1", "v2"), delay_s: float = 0.0) -> None:
        weights = ", ".join(f'"{self.name(k)}" = {v}' for k, v in traffic.items())
        text = "".join(backend_toml(self.name(label), label, delay_s) for label in labels)
        self.repo.write("deployments/echo.toml", text + f'[endpoints.echo]\nroute = "/echo"\ntraffic = {{ {weights} }}\n')


@pytest.fixture(scope="module")
def cluster(ray_session):
    """The controller (and its proxy) in a namespace of this module's own."""
    namespace = f"{ray_session}-agent-{uuid.uuid4().hex[:6]}"
    port = free_port()
    # The product's startup timeout (60 s): a replica's process can take over 20 s to start on a loaded
    # 2-core CI machine (load 23 seen), and a replica whose import fails must report that error, not a timeout.
    options = {"proxy_metrics_port": free_port(), "startup_timeout_s": 60.0, "backoff_max_s": 2.0}
    client = start_or_connect(namespace=namespace, proxy_host="127.0.0.1", proxy_port=port, options=options)
    url = f"http://127.0.0.1:{port}"
    # The proxy starts with the controller; wait until it answers.
    wait_for(lambda: httpx.get(f"{url}/-/healthz", timeout=2).status_code == 200, what="proxy up")
    yield client, url, namespace
    client.shutdown()


@pytest.fixture
def empty_cluster(cluster):
    client, url, namespace = cluster
    yield cluster
    # Leave nothing behind for the next test, whatever this one did.
    async def clear() -> None:
        actual = await client.get_state()
        await apply(planner.plan(ServingState(), actual), client, actual=actual)

    asyncio.run(clear())


class RunningAgent:
    """The agent's loop (and optionally its admin server) on a thread of its own."""

    def __init__(self, agent: Agent, admin_port: int | None = None, webhook: WebhookGuard | None = None) -> None:
        self.agent = agent
        self._admin_port = admin_port
        self._webhook = webhook
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self._serve())
        try:
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        tasks = [asyncio.ensure_future(self.agent.run())]
        if self._admin_port is not None:
            app = build_app(self.agent, sync=lambda: self.agent.notify(Trigger.SYNC),
                            webhook_fetch=lambda: self.agent.notify(Trigger.WEBHOOK),
                            metrics=lambda: (self.agent.metrics.render(), "text/plain"), webhook=self._webhook)
            admin = server(app, "127.0.0.1", self._admin_port)
            tasks.append(asyncio.ensure_future(admin.serve()))
            while not admin.started:
                await asyncio.sleep(0.01)
        self._ready.set()
        try:
            await asyncio.gather(*tasks)
        finally:
            if self._admin_port is not None:
                admin.stop()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        """Like a kill: the loop is cancelled wherever it is."""
        self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(15)


class RequestLoop:
    """A steady stream of GET requests, counting status codes and answers."""

    def __init__(self, url: str) -> None:
        self.codes: Counter[int] = Counter()
        self.bodies: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url,), daemon=True)
        self._thread.start()

    def _run(self, url: str) -> None:
        with httpx.Client(timeout=10) as http:
            while not self._stop.is_set():
                try:
                    response = http.get(url)
                except httpx.TransportError:
                    self.codes[0] += 1  # no answer at all: a failed request, counted as status 0
                    continue
                self.codes[response.status_code] += 1
                if response.status_code == 200:
                    self.bodies.append(response.json())
                time.sleep(0.01)

    def stop(self) -> Counter[int]:
        self._stop.set()
        self._thread.join(15)
        return self.codes


def make_agent(
    repo, state_dir: Path, client, *, watch: bool = True, interval_s: float = 30.0, resync_s: float = 60.0,
    **settings: Any,
) -> Agent:
    loader = Loader()
    return Agent(
        GitSource(str(repo.root), None, state_dir),
        client,
        History(state_dir / "history.db"),
        load=loader.load_tree,
        plan=planner.plan,
        metrics=AgentMetrics(),
        settings=AgentSettings(interval_s=interval_s, resync_interval_s=resync_s, watch=watch,
                               deadlines=Deadlines(backend_s=60.0, endpoint_s=15.0), **settings),
    )


def wait_for(predicate: Callable[[], Any], timeout_s: float = 60.0, what: str = "condition") -> Any:
    """`eventually`, with this module's longer default and HTTP errors as "not yet"."""
    return eventually(predicate, timeout_s, what=what, retry_on=(httpx.HTTPError,))


def answer(url: str) -> dict | None:
    response = httpx.get(f"{url}/echo", timeout=5)
    return response.json() if response.status_code == 200 else None


def applied(agent: Agent, commit: str) -> bool:
    entries = agent.history(5)
    return bool(entries) and entries[0].commit == commit and entries[0].result.ok


def replica_actors(namespace: str) -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a.get("namespace") == namespace and a["name"].startswith("gitops-replica-")]


@pytest.fixture
def specs(repo) -> Specs:
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/apps/__init__.py", "")
    repo.write("deployments/apps/echo.py", APP.format(code="one"))
    specs = Specs(repo)
    specs.write({"v1": 1.0}, labels=("v1",))
    repo.commit("v1")
    return specs


@pytest.fixture
def served(specs, tmp_path, empty_cluster) -> Iterator[tuple[Agent, str, str]]:
    """The agent running on the test's repo: (agent, proxy URL, namespace)."""
    client, url, namespace = empty_cluster
    running = RunningAgent(make_agent(specs.repo, tmp_path / "state", client))
    try:
        yield running.agent, url, namespace
    finally:
        running.stop()


@pytest.mark.smoke
def test_commit_adding_an_endpoint_makes_it_answer(specs, served) -> None:
    agent, url, _ = served
    wait_for(lambda: applied(agent, specs.repo.head()), what="first apply")
    assert answer(url) == {"label": "v1", "code": "one"}
    assert agent.status().status.value == "Synced"


def test_commit_changing_traffic_changes_the_split(specs, tmp_path, empty_cluster) -> None:
    client, url, _ = empty_cluster
    specs.write({"v1": 1.0})
    specs.repo.commit("v1 and v2")
    running = RunningAgent(make_agent(specs.repo, tmp_path / "state", client))
    try:
        wait_for(lambda: applied(running.agent, specs.repo.head()), what="first apply")
        specs.write({"v1": 0.5, "v2": 0.5})
        split = specs.repo.commit("50/50")
        wait_for(lambda: applied(running.agent, split), timeout_s=20, what="split applied")
        labels = Counter(answer(url)["label"] for _ in range(60))
        assert set(labels) == {"v1", "v2"} and min(labels.values()) >= 10
    finally:
        running.stop()


def test_commit_changing_code_rolls_replicas_without_failed_requests(specs, served) -> None:
    agent, url, _ = served
    wait_for(lambda: answer(url), what="/echo answering")
    requests = RequestLoop(f"{url}/echo")
    specs.repo.write("deployments/apps/echo.py", APP.format(code="two"))
    new_code = specs.repo.commit("new code")
    wait_for(lambda: applied(agent, new_code), what="rollout")
    wait_for(lambda: answer(url)["code"] == "two", timeout_s=10, what="new code serving")
    codes = requests.stop()
    assert set(codes) == {200} and codes[200] > 10
    assert requests.bodies[-1]["code"] == "two"


def test_commit_removing_the_endpoint_gives_404_and_its_actors_are_gone(specs, served) -> None:
    agent, url, namespace = served
    wait_for(lambda: answer(url), what="/echo answering")
    assert len(replica_actors(namespace)) == 1
    specs.repo.write("deployments/echo.toml", "")
    removed = specs.repo.commit("remove everything\n\ngitops: prune-all")  # the prune guard's trailer
    wait_for(lambda: applied(agent, removed), what="removal applied")
    assert httpx.get(f"{url}/echo", timeout=5).status_code == 404
    wait_for(lambda: replica_actors(namespace) == [], timeout_s=15, what="replica actors gone")


def test_broken_commit_fails_no_request_and_the_next_good_commit_applies(specs, served) -> None:
    agent, url, _ = served
    wait_for(lambda: answer(url), what="/echo answering")
    requests = RequestLoop(f"{url}/echo")
    specs.write({"v1": 0.5, "v9": 0.5}, labels=("v1",))
    broken = specs.repo.commit("traffic to a backend that does not exist")
    wait_for(lambda: [row.commit for row in agent.history(1)] == [broken], timeout_s=10, what="broken commit seen")
    status = agent.status()
    assert status.status.value == "Failed" and status.last_applied_revision != broken
    assert any(e.startswith("deployments/echo.toml:") and specs.name("v9") in e for e in status.errors)
    specs.write({"v1": 0.5, "v2": 0.5})
    fixed = specs.repo.commit("fixed")
    wait_for(lambda: applied(agent, fixed), what="fixed commit applied")
    codes = requests.stop()
    assert set(codes) == {200}
    assert agent.status().status.value == "Synced"


WEBHOOK_SECRET = b"hook"
PUSH_BODY = b'{"ref": "refs/heads/main"}'


@pytest.fixture
def hooked(specs, tmp_path, empty_cluster) -> Iterator[tuple[Agent, str, str]]:
    """An agent that only fetches on its webhook (no watch, no poll), after
    its first apply, and a commit pushed since: (agent, hook URL, proxy URL)."""
    client, url, _ = empty_cluster
    port = free_port()
    agent = make_agent(specs.repo, tmp_path / "state", client, watch=False, interval_s=600)
    running = RunningAgent(agent, admin_port=port, webhook=WebhookGuard(WEBHOOK_SECRET))
    try:
        wait_for(lambda: applied(agent, specs.repo.head()), what="first apply")
        specs.write({"v2": 1.0}, labels=("v2",))
        specs.repo.commit("pushed")
        yield agent, f"http://127.0.0.1:{port}/hooks/git", url
    finally:
        running.stop()


def test_webhook_with_a_valid_signature_triggers_a_fetch(hooked, specs) -> None:
    agent, hook, url = hooked
    signed = {"X-Hub-Signature-256": sign(WEBHOOK_SECRET, PUSH_BODY)}
    assert httpx.post(hook, content=PUSH_BODY, headers=signed).status_code == 202
    wait_for(lambda: applied(agent, specs.repo.head()), what="pushed commit applied")
    assert answer(url)["label"] == "v2"


def test_webhook_without_a_valid_signature_is_refused_and_fetches_nothing(hooked) -> None:
    agent, hook, url = hooked
    ticks = agent.ticks
    assert httpx.post(hook, content=PUSH_BODY).status_code == 401
    wrong = {"X-Hub-Signature-256": sign(b"guess", PUSH_BODY)}
    assert httpx.post(hook, content=PUSH_BODY, headers=wrong).status_code == 403
    time.sleep(0.5)
    assert agent.ticks == ticks
    assert answer(url)["label"] == "v1"


def test_agent_killed_mid_apply_converges_after_restart_without_duplicates(
    specs, tmp_path, empty_cluster
) -> None:
    client, url, namespace = empty_cluster
    specs.write({"v1": 0.5, "v2": 0.5}, delay_s=1.5)
    specs.repo.commit("two slow-starting backends")
    first = RunningAgent(make_agent(specs.repo, tmp_path / "state", client))
    wait_for(lambda: replica_actors(namespace), timeout_s=30, what="replicas starting")
    assert first.agent.history() == []  # still waiting for the backends' goals
    first.stop()  # killed mid-apply
    second = RunningAgent(make_agent(specs.repo, tmp_path / "state", client))
    try:
        wait_for(lambda: applied(second.agent, specs.repo.head()), what="converged after restart")
        assert {answer(url)["label"] for _ in range(30)} == {"v1", "v2"}
        backends = [name.removeprefix("gitops-replica-").rsplit("-", 2)[0] for name in replica_actors(namespace)]
        assert sorted(backends) == [specs.name("v1"), specs.name("v2")]
        results = [e.result for e in second.agent.history()]
        assert results.count(Outcome.APPLIED) == 1
    finally:
        second.stop()


def test_code_that_cannot_start_fails_the_apply_and_the_old_version_keeps_serving(specs, served) -> None:
    agent, url, _ = served
    wait_for(lambda: applied(agent, specs.repo.head()), what="first apply")
    requests = RequestLoop(f"{url}/echo")
    specs.repo.write("deployments/apps/echo.py", APP.format(code="two").replace(
        "self.label = label", "raise RuntimeError('model file missing')"))
    broken = specs.repo.commit("constructor raises")
    entry = wait_for(lambda: next((e for e in agent.history(3) if e.commit == broken), None),
                     what="broken rollout recorded")
    codes = requests.stop()
    assert entry.result is Outcome.FAILED
    assert entry.errors[0].startswith(f"update backend {specs.name('v1')} (rolling restart): ")
    assert "model file missing" in entry.errors[0]
    assert set(codes) == {200} and {b["code"] for b in requests.bodies} == {"one"}
    assert agent.status().status.value == "Failed"


def test_traffic_changed_behind_the_agents_back_is_corrected_and_counted(specs, tmp_path, empty_cluster) -> None:
    client, url, _ = empty_cluster
    specs.write({"v1": 1.0})
    specs.repo.commit("v1 and v2, all traffic to v1")
    agent = make_agent(specs.repo, tmp_path / "state", client, resync_s=1.0)
    running = RunningAgent(agent)
    try:
        wait_for(lambda: applied(agent, specs.repo.head()), what="first apply")

        async def by_hand() -> None:
            endpoint = (await client.get_state()).endpoints["echo"]
            goal = await client.apply_endpoint(endpoint.model_copy(update={"traffic": {specs.name("v2"): 1.0}}))
            await client.wait_for_goal(goal, 10)

        asyncio.run(by_hand())
        wait_for(lambda: answer(url)["label"] == "v1", timeout_s=15, what="drift corrected")
        # Metrics are written once, when the correcting tick has finished.
        wait_for(lambda: b"gitops_drift_corrections_total 1.0" in agent.metrics.render(), timeout_s=10,
                 what="the correction counted once")
    finally:
        running.stop()


def test_reverting_a_removal_brings_the_endpoint_and_its_backend_back(specs, served) -> None:
    agent, url, namespace = served
    wait_for(lambda: answer(url), what="/echo answering")
    specs.repo.write("deployments/echo.toml", "")
    removed = specs.repo.commit("remove the endpoint and its backend\n\ngitops: prune-all")  # the prune guard's trailer
    wait_for(lambda: applied(agent, removed), what="removal applied")
    assert httpx.get(f"{url}/echo", timeout=5).status_code == 404
    wait_for(lambda: replica_actors(namespace) == [], timeout_s=15, what="replica actors gone")
    specs.repo.git("revert", "--no-edit", removed)
    wait_for(lambda: applied(agent, specs.repo.head()), timeout_s=30, what="revert applied")
    assert answer(url) == {"label": "v1", "code": "one"}
    assert len(replica_actors(namespace)) == 1


MODEL = '''\
class Model:
    def __init__(self, label):
        if label == "boom":
            raise RuntimeError("model file weights.bin not found")
        self.label = label

    def __call__(self, request):
        return {"label": self.label}
'''


def three_backends(tag: str, labels: dict[str, str]) -> str:
    text = "".join(
        f'[backends.{tag}-{name}]\nimport_path = "txn.model:Model"\ninit_args = ["{label}"]\n'
        "ray_actor_options = { num_cpus = 0.01 }\ngraceful_shutdown_timeout_s = 1\n\n"
        for name, label in labels.items()
    )
    return text + f'[endpoints.{tag}]\nroute = "/{tag}"\ntraffic = {{ "{tag}-a" = 1.0 }}\n'


def test_a_failed_commit_is_undone_whole_and_status_says_which_commit_each_backend_runs(
    repo, tmp_path, empty_cluster
) -> None:
    """Three backends change; one raises in __init__: the other two go back to
    the previous commit's version, history and status say failed and reverted,
    and the error names the file and line that raised."""
    client, url, _ = empty_cluster
    tag = f"t{uuid.uuid4().hex[:6]}"
    repo.write("txn/model.py", MODEL)
    repo.write("deployments/txn.toml", three_backends(tag, {"a": "v1", "b": "v1", "c": "v1"}))
    good = repo.commit("three backends")
    agent = make_agent(repo, tmp_path / "state", client, watch=False)
    assert asyncio.run(agent.tick()).result is Outcome.APPLIED
    before = {name: config.version for name, config in asyncio.run(client.get_state()).backends.items()}

    repo.write("deployments/txn.toml", three_backends(tag, {"a": "v2", "b": "v2", "c": "boom"}))
    bad = repo.commit("three new versions, one broken")
    entry = asyncio.run(agent.tick(full=False))
    assert entry is not None and entry.result is Outcome.FAILED
    [error] = entry.errors
    assert "RuntimeError: model file weights.bin not found (txn/model.py:4)" in error, error
    assert error.endswith(f"; reverted to {good[:7]}"), error

    state = asyncio.run(client.get_state())
    assert {name: config.version for name, config in state.backends.items()} == before
    assert {config.commit for config in state.backends.values()} == {good}
    asyncio.run(agent.tick(full=False))  # observe
    status = agent.status()
    assert (status.status.value, status.last_attempted_revision, status.last_applied_revision) == ("Failed", bad, good)
    assert {name: backend.commit for name, backend in status.backends.items()} == dict.fromkeys(before, good)
    assert f"reverted to {good[:7]}" in status.condition("Ready").message
    wait_for(lambda: httpx.get(f"{url}/{tag}", timeout=5).json() == {"label": "v1"}, what="v1 still answers")


def test_a_package_the_cluster_lacks_names_the_line_and_runtime_env_pip(repo, tmp_path, empty_cluster) -> None:
    client, _, _ = empty_cluster
    tag = f"t{uuid.uuid4().hex[:6]}"
    repo.write("txn/model.py", "import surely_not_installed_here\n\n" + MODEL)
    repo.write("deployments/txn.toml", three_backends(tag, {"a": "v1"}))
    repo.commit("needs a package")
    agent = make_agent(repo, tmp_path / "state", client, watch=False)
    entry = asyncio.run(agent.tick())
    assert entry is not None and entry.result is Outcome.FAILED
    assert "ModuleNotFoundError: No module named 'surely_not_installed_here' (txn/model.py:1)" in entry.errors[0]
    assert "runtime_env.pip" in entry.errors[0]
    assert not asyncio.run(client.get_state()).backends  # undone: nothing was there before
