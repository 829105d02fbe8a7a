"""The service the agent-driven scenarios serve from git, and reads of the agent.

Owns the repository content (a two-replica backend `svc` behind `/svc`, its
code versioned by a constant so every change is a code rollout) and what a
scenario asks of a running `gitops run` (`tests.support.stack.AgentProcess`):
its status conditions and the controller's replicas. Also a backend that
answers its version (`VERSIONED_ECHO`, committed by `commit_versioned_echo`),
for tests that need only something to serve, roll out and roll back.
"""

from __future__ import annotations

from typing import Any

from tests.conftest import GitRepo
from tests.support.stack import AgentProcess

__all__ = ["write_service", "conditions", "LOAD_PATH"]

LOAD_PATH = "/svc"

_APP = '''
import os
import time

CODE = "{code}"


class Svc:
    def __init__(self, start_delay_s=0.0):
        time.sleep(start_delay_s)

    def __call__(self, request):
        return {{"code": CODE, "pid": os.getpid()}}
'''

_SPEC = '''
[backends.svc]
import_path = "deployments.apps.svc:Svc"
init_args = [{delay}]
num_replicas = 2
ray_actor_options = {{ num_cpus = 0.01 }}
graceful_shutdown_timeout_s = 1
health_check_period_s = 1

[endpoints.svc]
route = "/svc"
traffic = {{ svc = 1.0 }}
'''


def write_service(repo: GitRepo, code: str, start_delay_s: float = 0.0) -> str:
    """Write the service at code version `code` and commit it; returns the commit."""
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/apps/__init__.py", "")
    repo.write("deployments/apps/svc.py", _APP.format(code=code))
    repo.write("deployments/svc.toml", _SPEC.format(delay=start_delay_s))
    return repo.commit(f"svc {code}")


def conditions(agent: AgentProcess) -> list[dict[str, Any]]:
    return list(agent.get("/status").get("conditions", []))


VERSIONED_ECHO = '''
class Echo:
    def __init__(self, version):
        self.version = version

    def __call__(self, request):
        return {"version": self.version}
'''


def commit_versioned_echo(repo: GitRepo, spec: str, version: str) -> str:
    """Commit `deployments/echo.py` (`VERSIONED_ECHO`) with `spec` as `deployments/echo.toml`."""
    repo.write("deployments/__init__.py", "")
    repo.write("deployments/echo.py", VERSIONED_ECHO)
    repo.write("deployments/echo.toml", spec)
    return repo.commit(f"echo {version}")
