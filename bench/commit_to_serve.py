"""Commit to serve: how long from `git commit` to the proxy serving the change.

Runs the real thing: `gitops run` as a subprocess (embedded Ray, controller,
proxy, agent with the file-system watch) against a throw-away local git
repository on loopback ports, then

- flips all of /echo's traffic between two backends, commit after commit,
  and times each commit until the proxy answers from the other backend
  (target: under 0.5 s at p50);
- changes the backend's code and times each commit until the new version
  answers (a rolling restart: new replicas start, old ones drain).

The clock starts just before `git commit` runs. Prints figures; asserts
nothing about time.
"""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

FLIPS = int(os.environ.get("BENCH_FLIPS", "20"))
ROLLS = int(os.environ.get("BENCH_ROLLS", "3"))

APP = '''
CODE = "{code}"


class Echo:
    def __init__(self, label):
        self.label = label

    def __call__(self, request):
        return {{"label": self.label, "code": CODE}}
'''


def spec(to: str) -> str:
    backends = "".join(
        f'[backends.{name}]\nimport_path = "deployments.apps.echo:Echo"\ninit_args = ["{name}"]\n'
        f"ray_actor_options = {{ num_cpus = 0.01 }}\ngraceful_shutdown_timeout_s = 1\n\n"
        for name in ("blue", "green")
    )
    return backends + f'[endpoints.echo]\nroute = "/echo"\ntraffic = {{ {to} = 1.0 }}\n'


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def commit(repo: Path, files: dict[str, str], message: str) -> float:
    for relpath, text in files.items():
        path = repo / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    started = time.perf_counter()
    git(repo, "commit", "-q", "-m", message)
    return started


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(http: httpx.Client, url: str, key: str, value: str, timeout_s: float = 120.0) -> float:
    """Poll until the answer's `key` is `value`; returns when (perf_counter)."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        try:
            response = http.get(url)
            if response.status_code == 200 and response.json().get(key) == value:
                return time.perf_counter()
        except httpx.HTTPError:
            pass
        time.sleep(0.002)
    raise SystemExit(f"bench: {url} never answered {key}={value} within {timeout_s} s")


def figures(name: str, seconds: list[float]) -> None:
    ordered = sorted(seconds)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    print(
        f"{name}: n={len(seconds)} p50={statistics.median(seconds) * 1000:.0f} ms "
        f"p90={p90 * 1000:.0f} ms min={ordered[0] * 1000:.0f} ms max={ordered[-1] * 1000:.0f} ms"
    )


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="commit-to-serve-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        git(repo, "config", "user.email", "bench@example.invalid")
        git(repo, "config", "user.name", "bench")
        commit(repo, {
            "deployments/__init__.py": "", "deployments/apps/__init__.py": "",
            "deployments/apps/echo.py": APP.format(code="0"), "deployments/echo.toml": spec("blue"),
        }, "blue")
        proxy_port, admin_port = free_port(), free_port()
        agent = subprocess.Popen(
            [sys.executable, "-m", "gitops", "run", "--repo", str(repo), "--state-dir", str(Path(tmp) / "state"),
             "--proxy-port", str(proxy_port), "--admin-port", str(admin_port),
             "--proxy-metrics-port", str(free_port()), "--interval", "30"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{proxy_port}/echo"
        try:
            with httpx.Client(timeout=5) as http:
                wait_for(http, url, "label", "blue", timeout_s=180)
                flips = []
                for i in range(FLIPS):
                    to = "green" if i % 2 == 0 else "blue"
                    started = commit(repo, {"deployments/echo.toml": spec(to)}, f"traffic to {to}")
                    flips.append(wait_for(http, url, "label", to) - started)
                    time.sleep(0.2)
                rolls = []
                for i in range(1, ROLLS + 1):
                    started = commit(repo, {"deployments/apps/echo.py": APP.format(code=str(i))}, f"code {i}")
                    rolls.append(wait_for(http, url, "code", str(i)) - started)
            figures("traffic-only change, commit -> new split effective at the proxy", flips)
            figures("code change, commit -> new version serving (rolling restart)", rolls)
        finally:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(timeout=60)
            except subprocess.TimeoutExpired:
                agent.kill()


if __name__ == "__main__":
    main()
