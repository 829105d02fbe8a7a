"""What the soak serves and breaks: a Ray head on Redis, a git remote, the agent under a
supervisor, the processes of each component, and the fault injectors.

Owns the repository the soak serves (three backends: `plain`, two replicas;
`relay`, which streams and calls `plain` through a handle; `chat`, a
WebSocket app; every change of `plain`'s CODE is a rolling update), starting
it all on loopback (Redis; a two-node Ray cluster, `ray start --head` at
127.0.0.3 with GCS fault tolerance on that Redis and `ray start --address`
at 127.0.0.2, each node's proxy on its own address by `--proxy-host
node-ip`; `git http-backend`; `gitops run` with fixed ports so a restarted
agent comes back where the clients connect, its state dir on a small tmpfs
when root), finding each component's processes below this cluster's
raylets (never another test's Ray), judging whether the cluster is whole,
and doing each `soak_plan.FaultKind`. Reuses the reliability scenarios' parts
(`tests.support.rayheads`, `.gitservers`, `.faults`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx

from bench import machine
from bench.soak_plan import FaultKind
from tests.conftest import GitRepo
from tests.support.stack import free_port
from tests.support.gitservers import HttpGitServer, Mode, Remote
from tests.support.rayheads import RayHead, RedisServer

__all__ = ["World", "EXPECTED_REPLICAS", "NODE_IPS"]

_PLAIN = '''"""The soak's plain backend: answers its code version over HTTP and through a handle."""
import os

CODE = "{code}"


class Plain:
    async def __call__(self, request):
        if isinstance(request, str):  # a handle call from `relay`
            return {{"code": CODE, "from": request}}
        return {{"code": CODE, "pid": os.getpid()}}
'''

_RELAY = '''"""The soak's relay backend: server-sent events on /relay/stream, a handle call to `plain` otherwise."""
{bad}import asyncio

from starlette.responses import JSONResponse, StreamingResponse

from ray_gitops import serving


class Relay:
    def __init__(self):
        self.plain = serving.handle("plain")

    async def __call__(self, request):
        if request.url.path.endswith("/stream"):
            count = int(request.query_params.get("count", "5"))
            return StreamingResponse(self.events(count), media_type="text/event-stream")
        try:
            answer = await self.plain.remote("relay")
        except serving.HandleError as error:  # the callee's replica died or was replaced under the call
            return JSONResponse({{"error": str(error)[:300]}}, status_code=502)
        return {{"via": "relay", **answer}}

    async def events(self, count):
        for tick in range(count):
            if tick:
                await asyncio.sleep(0.05)
            yield f"id: {{tick}}\\ndata: {{tick}}\\n\\n"
'''

_CHAT = '''"""The soak's WebSocket app: greets, echoes every message, until the client closes."""
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocketDisconnect


async def chat(websocket):
    await websocket.accept()
    await websocket.send_json({"hello": "soak"})
    try:
        while True:
            await websocket.send_text("echo: " + await websocket.receive_text())
    except WebSocketDisconnect:
        return


app = Starlette(routes=[WebSocketRoute("/ws", chat)])
'''

_SPEC = '''# The soak's three backends (bench/soak_world.py writes this file). Half a CPU
# per replica: the six fill 3 of the cluster's 4, spread over both nodes, with room
# for a rolling update's new replica beside the old.
[backends.plain]
import_path = "deployments.apps.plain:Plain"
code_paths = ["deployments/apps/plain.py"]
num_replicas = 2
ray_actor_options = {{ num_cpus = 0.5 }}
graceful_shutdown_timeout_s = 1
health_check_period_s = 1

[backends.relay]
import_path = "deployments.apps.relay:Relay"
code_paths = ["deployments/apps/relay.py"]
uses = ["plain"]
num_replicas = 2
ray_actor_options = {{ num_cpus = 0.5 }}
graceful_shutdown_timeout_s = 1
health_check_period_s = 1

[backends.chat]
import_path = "deployments.apps.chat:app"
code_paths = ["deployments/apps/chat.py"]
num_replicas = 2
ray_actor_options = {{ num_cpus = 0.5 }}
graceful_shutdown_timeout_s = 1
health_check_period_s = 1

[endpoints.plain]
route = "/plain"
traffic = {{ plain = 1.0 }}
timeout_s = 5

[endpoints.relay]
route = "/relay"
traffic = {{ relay = 1.0 }}
timeout_s = 5

[endpoints.chat]
route = "/chat"
traffic = {{ chat = 1.0 }}
timeout_s = 5
'''

EXPECTED_REPLICAS = 6
NODE_IPS = ("127.0.0.3", "127.0.0.2")  # the head's, the other node's (Ray keeps 127.0.0.1 for neither)
NODE_CPUS = 2
BAD_IMPORT = "import soak_no_such_module  # the bad commit: a missing import\n"
FETCH_TIMEOUT_S = 3.0
STATE_FS_MB = 64


class World:
    """Everything the soak runs, started in `__init__`; `close()` removes it all."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.lock = threading.Lock()  # one git change at a time (faults run in threads)
        self.agent_lock = threading.Lock()  # one start or kill of the agent at a time
        self.version = 0
        self.redis = RedisServer()
        self.head = RayHead(workdir, {"RAY_REDIS_ADDRESS": self.redis.address,
                                      "RAY_external_storage_namespace": f"soak-{uuid.uuid4().hex[:8]}"},
                            num_cpus=NODE_CPUS, node_ip=NODE_IPS[0])
        for node_ip in NODE_IPS[1:]:
            self.head.add_node(node_ip, NODE_CPUS)
        self.work = GitRepo(workdir / "work")
        self.remote = Remote(workdir, self.work)
        self.write_code(bad=False)
        self.remote.push()
        self.git = HttpGitServer(workdir)
        self.state_dir = workdir / "state"
        self.state_dir.mkdir()
        self.tmpfs = _mount_tmpfs(self.state_dir)
        self.ports = {"proxy": free_port(), "admin": free_port(), "metrics": free_port()}
        self.proxies = [f"http://{ip}:{self.ports['proxy']}" for ip in NODE_IPS]  # one per node
        self.admin = f"http://127.0.0.1:{self.ports['admin']}"
        self.http = httpx.Client(timeout=5)
        self.agent: subprocess.Popen[bytes] | None = None
        self.agent_kills = 0
        self._raylets: list[int] = []
        self.start_agent()

    # --- the repository -----------------------------------------------------------

    def write_code(self, bad: bool) -> str:
        self.work.write("deployments/__init__.py", "")
        self.work.write("deployments/apps/__init__.py", "")
        self.work.write("deployments/apps/plain.py", _PLAIN.format(code=f"v{self.version}"))
        self.work.write("deployments/apps/relay.py", _RELAY.format(bad=BAD_IMPORT if bad else ""))
        self.work.write("deployments/apps/chat.py", _CHAT)
        self.work.write("deployments/soak.toml", _SPEC.format())
        return self.work.commit(f"soak v{self.version}{' (bad: missing import)' if bad else ''}")

    def bump(self) -> str:
        """A rolling update of `plain`: a new CODE, committed and pushed."""
        with self.lock:
            self.version += 1
            commit = self.write_code(bad=False)
            self.remote.push()
            return commit

    def remote_head(self) -> str:
        done = subprocess.run(["git", "--git-dir", str(self.remote.path), "rev-parse", "refs/heads/main"],
                              capture_output=True, text=True, check=True)
        return done.stdout.strip()

    # --- the agent, as a supervisor runs it ---------------------------------------------

    def start_agent(self) -> None:
        log = (self.workdir / "agent.log").open("a")
        self.agent = subprocess.Popen(
            [sys.executable, "-m", "gitops", "run", "--repo", self.git.url("remote.git"), "--path", "deployments",
             "--ray-address", self.head.address, "--proxy-host", "node-ip", "--proxy-port", str(self.ports["proxy"]),
             "--proxy-metrics-port", str(self.ports["metrics"]), "--admin-port", str(self.ports["admin"]),
             "--interval", "0.5", "--resync-interval", "2", "--fetch-timeout", str(FETCH_TIMEOUT_S),
             "--state-dir", str(self.state_dir)],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "RAY_AUTH_MODE": "disabled"},
        )
        log.close()

    def restart_if_exited(self) -> int | None:
        """Start the agent again when it died by itself; returns its exit code (None: it runs)."""
        with self.agent_lock:
            assert self.agent is not None
            code = self.agent.poll()
            if code is not None:
                self.start_agent()
            return code

    def status(self) -> dict[str, object]:
        return dict(self.http.get(self.admin + "/status").json())

    # --- the processes of each component ------------------------------------------------

    def raylets(self) -> list[int]:
        """This cluster's raylets, one per node (every worker process is a child of its node's), found once."""
        if len(self._raylets) == len(NODE_IPS) and all(Path(f"/proc/{pid}").exists() for pid in self._raylets):
            return self._raylets
        pattern = re.compile(rf"raylet.*gcs[-_]address=\S+:{self.head.port}\b")
        self._raylets = [pid for pid in self.head.pids() if pattern.search(machine.command_line(pid))]
        return self._raylets

    def pids(self) -> dict[str, list[int]]:
        below = {pid: machine.command_line(pid) for raylet in self.raylets() for pid in machine.descendants(raylet)}
        agent = [self.agent.pid] if self.agent is not None and self.agent.poll() is None else []
        return {
            "agent": agent,
            "controller": [p for p, c in below.items() if c.startswith("ray::ControllerActor")],
            "proxy worker": [p for p, c in below.items() if c.startswith("ray::ProxyActor")],
            "replica host": [p for p, c in below.items() if c.startswith("ray::Replica")],
        }

    # --- whole again ----------------------------------------------------------------

    def whole(self, proxy_workers: int) -> bool:
        """The agent Synced on the remote's head, every process running, every route answering."""
        try:
            status = self.status()
            if status.get("status") != "Synced" or status.get("last_applied_revision") != self.remote_head():
                return False
            pids = self.pids()
            if (len(pids["replica host"]) != EXPECTED_REPLICAS or len(pids["proxy worker"]) != proxy_workers
                    or len(pids["controller"]) != 1 or any(_stopped(p) for p in pids["replica host"])):
                return False
            with httpx.Client(timeout=5) as fresh:
                for proxy in self.proxies:
                    plain = fresh.get(proxy + "/plain")
                    relay = fresh.get(proxy + "/relay")
                    answered = plain.status_code == relay.status_code == 200
                    if not answered or plain.json()["code"] != f"v{self.version}":
                        return False
            return True
        except (httpx.HTTPError, ValueError, KeyError, OSError):
            return False

    def serves_head(self) -> tuple[bool, str]:
        head = self.remote_head()
        status = self.status()
        with httpx.Client(timeout=5) as fresh:
            codes = {fresh.get(proxy + "/plain").json()["code"] for proxy in self.proxies for _ in range(5)}
        ok = status.get("last_applied_revision") == head and status.get("status") == "Synced" \
            and codes == {f"v{self.version}"}
        return ok, f"head {head[:7]} (CODE v{self.version}); applied {str(status.get('last_applied_revision'))[:7]}, " \
                   f"{status.get('status')}; /plain answers {sorted(codes)}"

    # --- the faults ---------------------------------------------------------------

    def inject(self, kind: FaultKind, hold_s: float, pick: int) -> str:
        """Do `kind` (holding it `hold_s` where it is held); returns a note for the table.

        `pick` chooses among processes of a kind (the schedule's seeded draw).
        """
        if kind in (FaultKind.REPLICA_KILL, FaultKind.PROXY_WORKER_KILL, FaultKind.CONTROLLER_KILL):
            role = {FaultKind.REPLICA_KILL: "replica host", FaultKind.PROXY_WORKER_KILL: "proxy worker",
                    FaultKind.CONTROLLER_KILL: "controller"}[kind]
            pids = sorted(self.pids()[role])
            if not pids:
                return f"no {role} running to kill"
            victim = pids[pick % len(pids)]
            _signal(victim, signal.SIGKILL)
            return f"pid {victim}"
        if kind is FaultKind.AGENT_KILL:
            with self.agent_lock:  # the supervisor must not see this exit as the agent's own
                assert self.agent is not None
                self.agent.kill()
                self.agent.wait(10)
                self.agent_kills += 1
                self.start_agent()
            return "restarted at once"
        if kind is FaultKind.REPLICA_STOP:
            pids = sorted(self.pids()["replica host"])
            victim = pids[pick % len(pids)]
            _signal(victim, signal.SIGSTOP)
            time.sleep(hold_s)
            alive = _signal(victim, signal.SIGCONT)
            return f"pid {victim}" + ("" if alive else "; replaced while stopped")
        if kind in (FaultKind.GIT_REFUSE, FaultKind.GIT_STALL, FaultKind.GIT_GARBAGE):
            return self._break_git(kind, hold_s)
        if kind is FaultKind.BAD_COMMIT:
            return self._bad_commit()
        if kind is FaultKind.ROLLING_UPDATE:
            return f"to v{self.version + 1}, {self.bump()[:7]}"
        if kind is FaultKind.GCS_RESTART:
            self.head.start_gcs(self.head.kill_gcs())
            return "SIGKILL, started again on its port"
        if kind is FaultKind.STATE_DIR_FULL:
            return self._fill_state_dir(hold_s)
        raise ValueError(kind)

    def _break_git(self, kind: FaultKind, hold_s: float) -> str:
        with self.lock:
            if kind is FaultKind.GIT_REFUSE:
                self.git.refuse()
            else:
                self.git.mode = Mode.STALL if kind is FaultKind.GIT_STALL else Mode.GARBAGE
        time.sleep(hold_s / 2)
        commit = self.bump()  # pushed while the remote is broken: applied once it mends
        time.sleep(hold_s / 2)
        with self.lock:
            if kind is FaultKind.GIT_REFUSE:
                self.git.start()
            else:
                self.git.serve()
        return f"v{self.version} ({commit[:7]}) pushed while broken"

    def _bad_commit(self) -> str:
        with self.lock:
            bad = self.write_code(bad=True)
            self.remote.push()
        deadline = time.monotonic() + 30
        seen = ""
        while time.monotonic() < deadline and not seen:
            try:
                history = self.http.get(self.admin + "/history").json()
                entries = history if isinstance(history, list) else history.get("entries", [])
                seen = next((str(e.get("result")) for e in entries if e.get("commit") == bad), "")
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.5)
        with self.lock:
            self.work.git("revert", "--no-edit", "HEAD")
            self.remote.push()
        return f"{bad[:7]} {seen or 'not yet in history after 30 s'}, then reverted"

    def _fill_state_dir(self, hold_s: float) -> str:
        if not self.tmpfs:
            raise RuntimeError("the state dir is not on a filesystem of its own (not root)")
        filler = self.state_dir / "soak-filler"
        with filler.open("wb") as out:
            try:
                while True:
                    out.write(b"\0" * (1 << 20))
                    out.flush()
            except OSError:
                pass
        time.sleep(hold_s / 2)
        commit = self.bump()  # applied with the disk full: its history row cannot be written
        time.sleep(hold_s / 2)
        filler.unlink()
        return f"{STATE_FS_MB} MB tmpfs; v{self.version} ({commit[:7]}) pushed while full"

    # --- the end ---------------------------------------------------------------------

    def close(self) -> None:
        self.http.close()
        if self.agent is not None and self.agent.poll() is None:
            self.agent.kill()  # the cluster goes next, with everything the agent ran on it
            self.agent.wait(10)
        self.head.remove()
        self.git.stop()
        self.redis.stop()
        if self.tmpfs:
            subprocess.run(["umount", "-l", str(self.state_dir)], check=False)


def _signal(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def _mount_tmpfs(path: Path) -> bool:
    """A small tmpfs on `path` when root (so the soak can fill it); False otherwise."""
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={STATE_FS_MB}m", "tmpfs", str(path)],
                          capture_output=True, check=False)
    return done.returncode == 0
