"""Multiplex ids bounded (issue 50 row 11): a request's model id is checked against the
backend's `model_pattern` (default: a safe character set and 128 characters) and its
`models` list when given, refused with 400 before any replica or loader sees it; only
the ids `models` names become metric labels, every other one counts as `other`."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proxy.observability.metrics import ProxyMetrics
from tests.support.proxy_app import Proxy, Served, get, lru_replica, run
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet
from vocabulary.spec.routing import MultiplexConfig


def _proxy(config: MultiplexConfig, capacity: int = 1000) -> tuple[Proxy, Served, list[str]]:
    replica = lru_replica("r0", capacity)
    proxy = Proxy()
    served = Served()
    proxy.app.recorder = served
    proxy.serve("e", "/e", {"b": [replica]})
    proxy.publish(replicas__b=ReplicaSet(
        backend="b", max_concurrent_queries=100, multiplex=config,
        replicas=(ReplicaInfo(replica_id="r0", actor_name="r0", handle=replica),),
    ))
    return proxy, served, replica.seen  # type: ignore[return-value]


def _status(proxy: Proxy, model: str) -> tuple[int, str]:
    answer = run(get(proxy, "/e", headers={"x-model-id": model}))
    return answer.status_code, answer.text


@pytest.mark.parametrize("model", ["../../etc/passwd-x", "a/b", ".hidden", "..", "x" * 129, "a b", "a\\b"])
def test_an_id_outside_the_default_pattern_is_refused_before_any_replica_sees_it(model: str) -> None:
    proxy, _, seen = _proxy(MultiplexConfig())
    status, text = _status(proxy, model)
    assert status == 400 and "x-model-id header names no model this backend serves" in text.lower()
    assert seen == []


@pytest.mark.parametrize("model", ["en-fr", "llama3.1-8b", "m:v2", "A_1", "x" * 128])
def test_ordinary_ids_pass_the_default_pattern(model: str) -> None:
    proxy, _, seen = _proxy(MultiplexConfig())
    assert _status(proxy, model)[0] == 200 and len(seen) == 1


def test_a_declared_list_and_pattern_are_the_only_ids_accepted() -> None:
    proxy, _, seen = _proxy(MultiplexConfig(models=("en-fr", "org/model-1"), model_pattern=r"[a-z0-9/-]+"))
    assert _status(proxy, "en-fr")[0] == 200 and _status(proxy, "org/model-1")[0] == 200
    assert _status(proxy, "en-de")[0] == 400 and len(seen) == 2
    with pytest.raises(ValidationError, match="must be a regular expression"):
        MultiplexConfig(model_pattern="[")


def test_only_declared_ids_become_metric_labels_and_the_page_stays_small() -> None:
    for declared in ((), ("m0",)):
        pattern = "m0" if declared else r"[a-z0-9-]+"
        proxy, served, _ = _proxy(MultiplexConfig(models=declared, model_pattern=pattern), capacity=1000)
        metrics = ProxyMetrics()
        proxy.app.recorder = metrics
        assert _status(proxy, "m0")[0] == 200
        assert ('model="m0"' in metrics.render().decode()) == bool(declared)
    # A loader that accepts any id the pattern lets through: 300 of them, each loaded, none a label.
    proxy, served, _ = _proxy(MultiplexConfig(), capacity=1000)
    metrics = ProxyMetrics()
    proxy.app.recorder = metrics
    assert _status(proxy, "first")[0] == 200
    small = len(metrics.render())
    for index in range(300):
        assert _status(proxy, f"made-up-{index:03d}-" + "p" * 60)[0] == 200
    page = metrics.render().decode()
    assert 'model="other"' in page and "made-up" not in page and 'model="first"' not in page
    assert len(page) - small < 512, len(page) - small
    proxy.app.recorder = served
    _status(proxy, "made-up-again")
    assert served.served == [("b", "other", True, ())]
