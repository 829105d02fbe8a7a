"""A small service (its app and its spec) for the loading tests.

Moved out of tests/component/test_loading.py, whose tests use them too."""

from __future__ import annotations

ECHO_PY = """
class Echo:
    def __init__(self, label):
        self.label = label

    async def __call__(self, request):
        return self.label


def hello(request):
    return "hello"
"""

ECHO_TOML = """
[backends.echo-v1]
import_path = "apps.echo:Echo"
init_args = ["v1"]
num_replicas = 2
user_config = { greeting = "hi" }
ray_actor_options = { num_cpus = 0.1 }
runtime_env = { env_vars = { MODE = "prod" } }

[backends.echo-v2]
import_path = "apps.echo:Echo"
init_args = ["v2"]

[backends.echo-v2.autoscaling]
min_replicas = 1
max_replicas = 4
target_ongoing_requests = 3

[endpoints.echo]
route = "/echo"
traffic = { echo-v1 = 0.9, echo-v2 = 0.1 }
"""
