"""Bad commits of many kinds, one after another against one real agent (issue 34, item 3).

One `gitops run` joined to the session's Ray serves two endpoints from one
repository: `steady` (never touched by a case) and `target` (what each case
breaks). A thread sends `steady` light steady load through the real proxy the
whole time. Each case commits its bad change, waits until the agent has
attempted it, and asserts what the history row and the status say, that
`target` still answers the last good commit's version, and that `steady`
answered every request meanwhile; then it commits the good tree back and
waits until that is applied and Synced, so the cases are independent.

Covered: TOML syntax, unknown key, wrong type, missing import, name not in
module, circular `uses`, route clash, empty tree (the prune guard), a symlink
out of the repository, 10,000 backends, a secret sealed to an identity the
agent does not hold (all refused by validation); raise in `__init__`, hang in
`__init__` past the backend's `startup_timeout_s` (the replica is given up),
a memory blow-up in `__init__` (below), a failing health check and a model
whose bytes do not have the digest in git (the apply fails, the old version
keeps serving); raise in `__init__` beside a new backend (the whole commit is
undone: the new backend does not serve);
every request 500 (applied: nothing refuses it without a `[rollout]`; status
says BackendErrors); a canary whose p99 breaches its rollout's gate (aborted,
traffic back on the stable backend); a force-push that rewrites history (here
a reset of the watched local branch); a deleted branch (BranchNotFound, the
last commit keeps serving).

A memory blow-up in `__init__` past `ray_actor_options.memory` (which the
replica enforces as its process's RLIMIT_DATA, Ray only schedules by it) fails
the apply naming the limit.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import httpx
import pyrage
import pytest
import ray

from controller.state.backend_state import REPLICA_PREFIX
from tests.conftest import GitRepo
from tests.support.stack import AgentProcess, agent_namespace, named_actors

pytestmark = pytest.mark.real

STEADY_PY = '''\
class Steady:
    async def __call__(self, request) -> dict:
        return {"who": "steady"}
'''
STEADY_TOML = '''\
[backends.steady]
import_path = "deployments.steady:Steady"
num_replicas = 1
ray_actor_options = { num_cpus = 0.05 }

[endpoints.steady]
route = "/steady"
traffic = { steady = 1.0 }
'''
TARGET_PY = '''\
VERSION = "{version}"


class Target:
    async def __call__(self, request) -> dict:
        return {{"version": VERSION}}
'''
TARGET_TOML = '''\
[backends.target]
import_path = "deployments.target:Target"
num_replicas = 1
ray_actor_options = { num_cpus = 0.05 }

[endpoints.target]
route = "/target"
traffic = { target = 1.0 }
'''
GOOD = {
    "deployments/__init__.py": "",
    "deployments/steady.py": STEADY_PY,
    "deployments/steady.toml": STEADY_TOML,
    "deployments/target.py": TARGET_PY.format(version="good"),
    "deployments/target.toml": TARGET_TOML,
}


class SteadyLoad:
    """GET /steady every 50 ms on a thread; every answer's status code, in order."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.codes: list[int | str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                try:
                    self.codes.append(client.get(self.url).status_code)
                except httpx.HTTPError as error:
                    self.codes.append(type(error).__name__)
                time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


@dataclass
class Cluster:
    repo: GitRepo
    agent: AgentProcess
    load: SteadyLoad
    good: str = ""  # the last good commit applied

    def commit_tree(
        self, files: dict[str, str], message: str, links: dict[str, str] | None = None,
        blobs: dict[str, bytes] | None = None,
    ) -> str:
        for path in list(self._tracked()):
            if path not in files and path not in (blobs or {}):
                self.repo.git("rm", "-q", "--cached", path)
                (self.repo.root / path).unlink(missing_ok=True)
        for path, text in files.items():
            target = self.repo.root / path
            if target.is_symlink():
                target.unlink()
            self.repo.write(path, text)
        for path, data in (blobs or {}).items():
            (self.repo.root / path).parent.mkdir(parents=True, exist_ok=True)
            (self.repo.root / path).write_bytes(data)
        for path, points_to in (links or {}).items():
            (self.repo.root / path).unlink(missing_ok=True)
            os.symlink(points_to, self.repo.root / path)
        return self.repo.commit(message)

    def _tracked(self) -> list[str]:
        listed = self.repo.git("ls-files")
        return [line for line in listed.splitlines() if line]

    def restore(self) -> None:
        self.good = self.commit_tree(GOOD, "the good tree again")
        self.wait_synced(self.good)

    def wait_synced(self, commit: str) -> None:
        self.agent.wait(f"{commit[:7]} applied and Synced", lambda: (
            (s := self.agent.get("/status"))["last_applied_revision"] == commit and s["status"] == "Synced"
        ), timeout_s=120)

    def entry(self, commit: str, timeout_s: float = 120) -> dict:
        found: list[dict] = []

        def attempted() -> bool:
            entries = self.agent.get("/history?limit=20")["entries"]
            found[:] = [e for e in entries if e["commit"] == commit and e["result"] != "superseded"]
            return bool(found)

        self.agent.wait(f"{commit[:7]} in the history", attempted, timeout_s=timeout_s)
        return found[0]

    def target_version(self) -> str:
        answer = httpx.get(self.agent.proxy + "/target", timeout=10)
        assert answer.status_code == 200, answer.text
        return str(answer.json()["version"])


@pytest.fixture(scope="module")
def cluster(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("bad-commits")
    repo = GitRepo(root / "repo")
    for path, text in GOOD.items():
        repo.write(path, text)
    good = repo.commit("the good tree")
    identity = root / "age-identity.txt"  # the agent's own: it opens no secret of the bad commits
    identity.write_text(f"{pyrage.x25519.Identity.generate()}\n")
    identity.chmod(0o600)
    # --interval 3: commits arrive by the ref watcher at once, and a failed apply's retry waits up to
    # 3 s (not 0.5), so the status shows why it failed long enough to be read between tries.
    agent = AgentProcess(repo.root, root, ray.get_runtime_context().gcs_address, extra_args=[
        "--age-identity", str(identity), "--model-cache-dir", str(root / "models"), "--interval", "3"])
    load = SteadyLoad(agent.proxy + "/steady")
    shared = Cluster(repo, agent, load, good)
    try:
        shared.wait_synced(good)
        load.start()
        yield shared
    finally:
        load.stop()
        agent.stop()
    assert load.codes and set(load.codes) == {200}, {c: load.codes.count(c) for c in set(load.codes)}


@dataclass(frozen=True)
class Case:
    """A bad change to the good tree, and what the agent must make of it."""

    name: str
    change: Callable[[dict[str, str]], dict[str, str]]
    result: str  # the history row's result
    reason: str  # the Ready condition's reason
    error: str  # found in the history row's errors
    message: str = ""  # the commit message
    links: dict[str, str] = field(default_factory=dict)  # path -> where the symbolic link points
    blobs: dict[str, bytes] = field(default_factory=dict)  # path -> binary content the commit adds
    absent: tuple[str, ...] = ()  # routes the commit adds that must not serve afterwards
    marks: tuple[pytest.MarkDecorator, ...] = ()


def _with(**changes: str) -> Callable[[dict[str, str]], dict[str, str]]:
    def change(tree: dict[str, str]) -> dict[str, str]:
        return {**tree, **{path.replace("__", "/").replace("_toml", ".toml").replace("_py", ".py"): text
                           for path, text in changes.items()}}
    return change


def _target_toml(text: str) -> Callable[[dict[str, str]], dict[str, str]]:
    return lambda tree: {**tree, "deployments/target.toml": text}


def _target_py(text: str) -> Callable[[dict[str, str]], dict[str, str]]:
    return lambda tree: {**tree, "deployments/target.py": text}


def _many_backends(tree: dict[str, str]) -> dict[str, str]:
    """10,000 backends in five generated files, each under the 1 MiB file limit."""
    return {**tree, **{
        f"deployments/generated{part}.toml": "".join(
            f'[backends.gen{n}]\nimport_path = "deployments.target:Target"\n' for n in range(part * 2000, (part + 1) * 2000))
        for part in range(5)
    }}


def _two_backends_one_raising(tree: dict[str, str]) -> dict[str, str]:
    """A new backend and endpoint that would start fine, and target's new version raising in `__init__`."""
    return {**tree, "deployments/target.py": RAISING_INIT, "deployments/extra.toml": EXTRA_TOML}


def _empty(tree: dict[str, str]) -> dict[str, str]:
    """Every spec file deleted; the spec directory stays (a missing one is another error)."""
    return {"deployments/__init__.py": "", "deployments/README.md": "nothing deployed\n"}


CIRCLE = '''
[backends.other]
import_path = "deployments.target:Target"
uses = ["target"]  # the endpoint, whose traffic goes to backend target, which uses other
'''
EXTRA_TOML = '''
[backends.extra]
import_path = "deployments.steady:Steady"
ray_actor_options = { num_cpus = 0.05 }

[endpoints.extra]
route = "/extra"
traffic = { extra = 1.0 }
'''
RAISING_INIT = '''\
VERSION = "bad"


class Target:
    def __init__(self) -> None:
        raise RuntimeError("model file missing")

    async def __call__(self, request) -> dict:
        return {"version": VERSION}
'''
FAILING_HEALTH = '''\
VERSION = "bad"


class Target:
    async def __call__(self, request) -> dict:
        return {"version": VERSION}

    def check_health(self) -> None:
        raise RuntimeError("database unreachable")
'''
ALL_500 = '''\
VERSION = "bad"


class Target:
    async def __call__(self, request) -> dict:
        raise RuntimeError("every request fails")
'''

HANGING_INIT = '''\
import time

VERSION = "bad"


class Target:
    def __init__(self) -> None:
        time.sleep(3600)  # waits for a dependency that never answers

    async def __call__(self, request) -> dict:
        return {"version": VERSION}
'''
MEMORY_HOG = '''\
VERSION = "bad"


class Target:
    def __init__(self) -> None:
        self.everything = bytearray(2 * 2**30)  # loads the whole data set into memory

    async def __call__(self, request) -> dict:
        return {"version": VERSION}
'''
# A value sealed to an age identity the agent does not hold (made here, never committed anywhere).
SEALED_TO_A_STRANGER = pyrage.encrypt(b"never-delivered", [pyrage.x25519.Identity.generate().to_public()])
SECRET_TOML = TARGET_TOML.replace("num_replicas = 1", 'num_replicas = 1\nsecrets = ["db"]') + '''
[secrets.db]
file = "secrets/db.age"
'''

CASES = [
    Case("toml-syntax", _target_toml("[backends.target\nimport_path = 1\n"), "invalid", "ValidationFailed",
         "deployments/target.toml:1:"),
    Case("unknown-key", _target_toml(TARGET_TOML.replace("num_replicas = 1", "num_replicas = 1\nreplicas = 2")),
         "invalid", "ValidationFailed", "deployments/target.toml:4:"),
    Case("wrong-type", _target_toml(TARGET_TOML.replace("num_replicas = 1", 'num_replicas = "one"')),
         "invalid", "ValidationFailed", "deployments/target.toml:3:"),
    Case("missing-import", _target_toml(TARGET_TOML.replace("deployments.target:", "deployments.nowhere:")),
         "invalid", "ValidationFailed", "deployments.nowhere"),
    Case("name-not-in-module", _target_toml(TARGET_TOML.replace(":Target", ":Targte")),
         "invalid", "ValidationFailed", "Targte"),
    Case("circular-uses", _target_toml(TARGET_TOML.replace("num_replicas = 1", 'num_replicas = 1\nuses = ["other"]')
                                       + CIRCLE), "invalid", "ValidationFailed", "(other -> target -> other)"),
    Case("route-clash", _target_toml(TARGET_TOML.replace('route = "/target"', 'route = "/steady"')),
         "invalid", "ValidationFailed", "/steady"),
    Case("empty-tree", _empty, "invalid", "ValidationFailed", "gitops: prune-all"),
    Case("raise-in-init", _target_py(RAISING_INIT), "failed", "ReconciliationFailed", "model file missing"),
    Case("failing-health-check", _target_py(FAILING_HEALTH), "failed", "ReconciliationFailed",
         "database unreachable"),
    Case("symlink-out-of-the-repository", lambda tree: {k: v for k, v in tree.items() if k != "deployments/target.py"},
         "invalid", "ValidationFailed", "deployments/target.py", links={"deployments/target.py": "/etc/hostname"}),
    Case("ten-thousand-backends", _many_backends, "invalid", "ValidationFailed",
         "10002 backends declared; a tree may declare at most 1000"),
    Case("memory-blow-up-in-init",
         _with(deployments__target_py=MEMORY_HOG, deployments__target_toml=TARGET_TOML.replace(
             "{ num_cpus = 0.05 }", "{ num_cpus = 0.05, memory = 200000000 }")),
         "failed", "ReconciliationFailed",
         "allocated past the replica's memory limit (ray_actor_options.memory = 200000000 bytes)"),
    Case("undecryptable-secret", _target_toml(SECRET_TOML), "invalid", "ValidationFailed",
         "secret 'db' (secrets/db.age) does not decrypt", blobs={"secrets/db.age": SEALED_TO_A_STRANGER}),
    Case("raise-in-init-with-a-new-backend-beside-it", _two_backends_one_raising, "failed", "ReconciliationFailed",
         "model file missing", absent=("/extra",)),
]


@pytest.mark.parametrize("case", [pytest.param(case, marks=case.marks, id=case.name) for case in CASES])
def test_a_bad_commit_changes_nothing_that_serves(cluster: Cluster, case: Case) -> None:
    _refused_and_nothing_changed(cluster, case)


def _refused_and_nothing_changed(cluster: Cluster, case: Case) -> dict:
    """Commit the case's bad tree; assert history, status and what serves; commit the good tree back.
    Returns the bad commit's history row."""
    before = len(cluster.load.codes)
    assert cluster.target_version() == "good"
    bad = cluster.commit_tree(case.change(dict(GOOD)), case.message or f"bad commit: {case.name}", case.links,
                              case.blobs)
    entry = cluster.entry(bad)
    assert entry["result"] == case.result, entry
    assert any(case.error in error for error in entry["errors"]), entry["errors"]
    # A failed apply is tried again with backoff: between tries the status says why it failed,
    # during one it says Progressing; so the reason is waited for, not read once.
    cluster.agent.wait(case.reason, lambda: cluster.agent.get("/status")["conditions"][0]["reason"] == case.reason,
                       timeout_s=60)
    status = cluster.agent.get("/status")
    assert status["last_attempted_revision"] == bad
    assert status["last_applied_revision"] == cluster.good
    assert cluster.target_version() == "good"
    for route in case.absent:  # the whole commit or nothing (docs/reference/troubleshooting.md)
        assert httpx.get(cluster.agent.proxy + route, timeout=10).status_code == 404, route
    during = cluster.load.codes[before:]
    assert during and set(during) == {200}, during
    cluster.restore()
    assert cluster.target_version() == "good"
    return entry


def test_a_hang_in_init_past_the_start_timeout_gives_the_replica_up_and_fails_the_apply(cluster: Cluster) -> None:
    """`startup_timeout_s = 3`: each hung replica is killed after 3 s (not the controller's 60),
    three in a row fail the apply, and no hung replica is left behind."""
    _refused_and_nothing_changed(cluster, Case(
        "hang-in-init-past-the-start-timeout",
        _with(deployments__target_py=HANGING_INIT,
              deployments__target_toml=TARGET_TOML.replace("num_replicas = 1", "num_replicas = 1\nstartup_timeout_s = 3")),
        "failed", "ReconciliationFailed", "not ready within 3s"))
    cluster.agent.wait("only the good replica of target left", lambda: len(
        named_actors(agent_namespace(), REPLICA_PREFIX + "target-")) == 1, timeout_s=30)


def test_a_commit_whose_every_request_is_500_applies_and_says_backend_errors(cluster: Cluster) -> None:
    """It starts and passes its health check: nothing refuses it (a `[rollout]` with checks would).
    Status says BackendErrors; the next good commit puts it right, and status says so once the
    good version serves, not when its 500s leave the one-minute window."""
    before = len(cluster.load.codes)
    bad = cluster.commit_tree({**GOOD, "deployments/target.py": ALL_500}, "bad commit: every request 500")
    assert cluster.entry(bad)["result"] == "applied"
    cluster.wait_synced(bad)
    for _ in range(10):
        assert httpx.get(cluster.agent.proxy + "/target", timeout=10).status_code == 500
    last_500 = time.monotonic()
    cluster.agent.wait("BackendErrors", lambda: cluster.agent.get("/status")["conditions"][0]["reason"]
                       == "BackendErrors", timeout_s=60)
    during = cluster.load.codes[before:]
    assert during and set(during) == {200}, during
    good = cluster.good = cluster.commit_tree(GOOD, "the good tree again")
    cluster.agent.wait(f"{good[:7]} Synced before the 500s leave the window", lambda: (
        (s := cluster.agent.get("/status"))["last_applied_revision"] == good and s["status"] == "Synced"
    ), timeout_s=50 - (time.monotonic() - last_500))
    assert cluster.target_version() == "good"


def test_a_force_push_that_rewrites_history_serves_the_new_head(cluster: Cluster) -> None:
    """The watched branch moves to a commit that is not a descendant of the applied one:
    the agent applies the branch head as it is, never the rewritten-away commit."""
    before = len(cluster.load.codes)
    gone = cluster.commit_tree({**GOOD, "deployments/target.py": TARGET_PY.format(version="two")}, "version two")
    cluster.wait_synced(gone)
    assert cluster.target_version() == "two"
    cluster.repo.git("reset", "-q", "--hard", f"{gone}~1")  # the rewrite, as a force-push leaves the branch
    rewritten = cluster.commit_tree({**GOOD, "deployments/target.py": TARGET_PY.format(version="rewritten")},
                                    "version two, rewritten")
    assert gone not in cluster.repo.git("log", "--format=%H")
    cluster.wait_synced(rewritten)
    assert cluster.target_version() == "rewritten"
    assert cluster.agent.get("/status")["watched_revision"] == rewritten
    during = cluster.load.codes[before:]
    assert during and set(during) == {200}, during
    cluster.restore()


def test_a_deleted_branch_keeps_the_last_commit_serving_until_it_is_back(cluster: Cluster) -> None:
    before = len(cluster.load.codes)
    cluster.repo.git("checkout", "-q", "--detach")
    cluster.repo.git("branch", "-D", "main")
    try:
        cluster.agent.wait("the branch missed", lambda: cluster.agent.get("/status")["conditions"][0]["reason"]
                           == "BranchNotFound", timeout_s=60)
        status = cluster.agent.get("/status")
        assert "main" in status["conditions"][0]["message"], status["conditions"]
        assert status["last_applied_revision"] == cluster.good
        assert cluster.target_version() == "good"
    finally:
        cluster.repo.git("checkout", "-q", "-b", "main")
    cluster.wait_synced(cluster.good)
    during = cluster.load.codes[before:]
    assert during and set(during) == {200}, during


WEIGHTS = b"weights of the one true model\n" * 1000


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def weights_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A plain HTTP server on loopback serving one model file, as docs/guides/models.md allows."""
    served = tmp_path_factory.mktemp("weights")
    (served / "weights.bin").write_bytes(WEIGHTS)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietFiles, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/weights.bin"
    finally:
        server.shutdown()
        server.server_close()


def test_a_model_with_a_wrong_digest_fails_whole_in_one_line_naming_model_source_and_both_digests(
    cluster: Cluster, weights_url: str
) -> None:
    right, wrong = hashlib.sha256(WEIGHTS).hexdigest(), hashlib.sha256(b"other weights").hexdigest()
    spec = TARGET_TOML.replace("num_replicas = 1", 'num_replicas = 1\nmodels = ["weights"]') + (
        f'\n[models.weights]\nsource = "{weights_url}"\nsha256 = "{wrong}"\nload_timeout_s = 20\n')
    line = f"model weights ({weights_url}): its bytes have sha256 {right}, but git pins {wrong}"
    entry = _refused_and_nothing_changed(
        cluster, Case("model-with-a-wrong-digest", _target_toml(spec), "failed", "ReconciliationFailed", line))
    [error] = [error for error in entry["errors"] if line in error]
    assert "\n" not in error, error


SLOW_PY = '''\
import asyncio


class Slow:
    async def __call__(self, request) -> dict:
        await asyncio.sleep(0.3)
        return {"version": "slow"}
'''
CANARY_TOML = TARGET_TOML.replace("traffic = { target = 1.0 }", "traffic = { target-slow = 1.0 }") + '''
[backends.target-slow]
import_path = "deployments.slow:Slow"
ray_actor_options = { num_cpus = 0.05 }

[endpoints.target.rollout]
steps = [0.5, 1.0]
step_interval_s = 3
min_requests = 5
max_p99_latency_s = 0.1
'''


def test_a_p99_breach_under_a_rollout_aborts_it_and_traffic_returns_to_the_stable_backend(cluster: Cluster) -> None:
    """A canary answering every request 200 but in 0.3 s, behind a rollout whose gate is p99 <= 0.1 s:
    the first step's p99 fails the gate, the rollout aborts and every request goes to `target` again."""
    before = len(cluster.load.codes)
    canary_load = SteadyLoad(cluster.agent.proxy + "/target")  # the requests the gate judges
    canary_load.start()
    try:
        bad = cluster.commit_tree({**GOOD, "deployments/slow.py": SLOW_PY, "deployments/target.toml": CANARY_TOML},
                                  "bad commit: a canary with a slow p99")
        # Recorded as applied once its goals are met, then as aborted when the gate fails.
        cluster.agent.wait("the canary aborted", lambda: cluster.entry(bad)["result"] == "aborted", timeout_s=90)
        entry = cluster.entry(bad)
        assert any("target-slow: p99_latency" in error and "> 0.1" in error for error in entry["errors"]), entry
        cluster.agent.wait("RolloutAborted", lambda: cluster.agent.get("/status")["conditions"][0]["reason"]
                           == "RolloutAborted", timeout_s=60)
        assert cluster.agent.get("/status")["last_attempted_revision"] == bad
        assert {cluster.target_version() for _ in range(20)} == {"good"}  # traffic is back on the stable backend
    finally:
        canary_load.stop()
    assert canary_load.codes and set(canary_load.codes) == {200}, canary_load.codes
    during = cluster.load.codes[before:]
    assert during and set(during) == {200}, during
    cluster.restore()
    assert cluster.target_version() == "good"
