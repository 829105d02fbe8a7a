"""`gitops run` gives the controller it claims this start's `--prometheus-url`, even one already running.

The controller client is a fake holding the owner record and the setting
(`controller.state.ownership.claim` decides, as in the controller); the real
controller's side is tests/pure/test_controller_rollout_metrics.py.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from controller.state.ownership import claim
from gitops.commands.run import take_charge
from gitops.errors import UserError
from vocabulary.control.ownership import Owner

SOURCE = SimpleNamespace(location="/srv/repo", branch="main")


class RunningController:
    """A controller some agent started earlier, with that agent's Prometheus."""

    def __init__(self, owner: Owner | None, prometheus_url: str | None) -> None:
        self.owner = owner
        self.prometheus_url = prometheus_url

    def claim(self, owner: Owner, take_over: bool = False) -> Owner | None:
        holder = claim(self.owner, owner, take_over)
        if holder is None:
            self.owner = owner
        return holder

    def set_prometheus_url(self, url: str | None) -> None:
        self.prometheus_url = url


def args(prometheus_url: str | None) -> argparse.Namespace:
    return argparse.Namespace(path="deployments", take_over=False, namespace="gitops", prometheus_url=prometheus_url)


def earlier(agent_id: str) -> Owner:
    return Owner(agent_id=agent_id, repo="/srv/repo", branch="main", path="deployments", host="h", pid=1,
                 started_at=0.0)


@pytest.mark.parametrize("url", ["http://prometheus-2:9090", None])
def test_a_restarted_agent_s_prometheus_url_reaches_its_running_controller(url: str | None) -> None:
    controller = RunningController(earlier("agent-1"), "http://prometheus-1:9090")
    take_charge(controller, args(url), SOURCE, "agent-1")
    assert controller.prometheus_url == url


def test_an_agent_refused_the_controller_leaves_its_prometheus_url_alone() -> None:
    controller = RunningController(earlier("agent-1"), "http://prometheus-1:9090")
    with pytest.raises(UserError, match="is reconciled by agent agent-1"):
        take_charge(controller, args("http://prometheus-2:9090"), SOURCE, "agent-2")
    assert controller.prometheus_url == "http://prometheus-1:9090"


def test_the_otlp_endpoint_is_the_flag_else_the_standard_variable_else_none() -> None:
    from gitops.commands.run import otlp_endpoint

    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    assert otlp_endpoint("http://127.0.0.1:4318", env) == "http://127.0.0.1:4318"
    assert otlp_endpoint(None, env) == "http://collector:4318"
    assert otlp_endpoint(None, {}) is None
    assert otlp_endpoint(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": ""}) is None


@pytest.mark.parametrize("flag,env,named", [
    ("127.0.0.1:4318", {}, "--otlp-endpoint"),
    (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "grpc://collector:4317"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
])
def test_an_otlp_endpoint_that_is_no_http_url_is_a_clear_error(flag: str | None, env: dict[str, str], named: str) -> None:
    from gitops.commands.run import otlp_endpoint

    with pytest.raises(UserError, match=f"{named}: .* is not an http:// or https:// URL"):
        otlp_endpoint(flag, env)
